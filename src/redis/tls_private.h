/* tls_private.h - TLS under one Redis connection (tls.c): a transport
 * table (struct tm_rconn_fns) over net.c's socket. */
#ifndef TASKMILL_REDIS_TLS_H
#define TASKMILL_REDIS_TLS_H

#include "redis/net_private.h"

/*
 * The split: net.c owns the socket, the deadlines, the output buffer and
 * the reader, and reads and writes through the connection's table;
 * tls.c owns the session (c->priv, an SSL *) and is the only file of the
 * adapter that calls OpenSSL. tls.c sits above net.c: it uses net.c's
 * error setters, waits and commands; net.c names nothing of tls.c. The
 * caller that opens a connection (conn.c) gives tm_rtls_fns only for a
 * rediss:// broker: a redis:// connection never reaches OpenSSL, which
 * is loaded (ssl_dl.h) only for a configuration that names one.
 *
 * tm_rtls_fns's hooks:
 *   connect  the context from o's tls keys, SNI and the name verified
 *            (o->server_name, else o->host; no SNI for an address), the
 *            handshake; sets c->priv once the session exists
 *   settled  one PING: the server's verdict on the session (TLS 1.3
 *            judges the client's certificate after the handshake)
 *   readv    SSL_read into iov[0] only
 *   write    SSL_write of all of it (on a failure, the server's alert
 *            when one came before the connection closed)
 *   close    frees the session, without close_notify (the socket is
 *            shut down first), and clears c->priv
 */
extern const struct tm_rconn_fns tm_rtls_fns;

#endif /* TASKMILL_REDIS_TLS_H */
