/* tls_private.h - the TLS layer under one Redis connection (tls.c), and the few
 * services of the connection (net.c) it uses. Private to net.c and
 * tls.c: the rest of the adapter sees only struct tm_rconn (net.h). */
#ifndef TASKMILL_REDIS_TLS_H
#define TASKMILL_REDIS_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#include "redis/net_private.h"

/*
 * The split: net.c owns the socket, the deadlines, the output buffer and
 * the reader; tls.c owns the session (c->ssl) and is the only file of
 * the adapter that calls OpenSSL. net.c calls a tm_rtls_ function only
 * for a connection opened with o->tls (tm_rtls_connect), or one whose
 * c->ssl is set (the others): a redis:// connection never reaches
 * OpenSSL, which is loaded (ssl_dl.h) only for a configuration that
 * names a rediss:// broker.
 */

/* tm_rtls_connect starts TLS on c's connected socket before the
 * deadline: the context from o's tls keys, SNI and the name verified
 * (o->server_name, else o->host; no SNI for an address), the handshake.
 * Sets c->ssl once the session exists (tm_rconn_close frees it, through
 * tm_rtls_close, even when the handshake then fails). 0, or -1 with the
 * reason in buf. */
int tm_rtls_connect(struct tm_rconn *c, const struct tm_rconn_opts *o,
                    int64_t deadline, char *buf, size_t size);
/* tm_rtls_settled waits, once the handshake is over and c->reader
 * exists, for the server's verdict on the session (one PING): 0, or -1
 * with the reason in buf. */
int tm_rtls_settled(struct tm_rconn *c, char *buf, size_t size);
/* tm_rtls_read reads at least one byte (at most size, and INT_MAX) of
 * the session into buf before the deadline: the count, or -1 with c->err
 * set. */
ssize_t tm_rtls_read(struct tm_rconn *c, char *buf, size_t size,
                     int64_t deadline);
/* tm_rtls_write writes all len bytes at p into the session before the
 * deadline: 0, or -1 with c->err set (to the server's alert when one
 * came before the connection closed). */
int tm_rtls_write(struct tm_rconn *c, const char *p, size_t len,
                  int64_t deadline);
/* tm_rtls_close frees the session, without close_notify (the caller shuts
 * the socket down first), and clears c->ssl. */
void tm_rtls_close(struct tm_rconn *c);

/* Defined in net.c, shared with the TLS layer. */

/* tm_rconn_set_err sets c->err and c->errstr, the one place they are
 * written. */
void tm_rconn_set_err(struct tm_rconn *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* tm_rconn_set_errno sets a REDIS_ERR_IO of "what: <errno e's text>". */
void tm_rconn_set_errno(struct tm_rconn *c, const char *what, int e);
/* tm_rconn_wait waits until c->fd is ready for events (POLLIN, POLLOUT)
 * or the deadline passes: 0 ready, or -1 with c->err set ("what: timed
 * out", or poll's error). */
int tm_rconn_wait(struct tm_rconn *c, short events, int64_t deadline,
                  const char *what);

#endif /* TASKMILL_REDIS_TLS_H */
