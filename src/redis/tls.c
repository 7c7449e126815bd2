/* tls.c - TLS under one Redis connection (rediss://): the OpenSSL context
 * built from the broker's tls keys, the handshake (SNI, verification of
 * the chain and the name), the server's verdict on the session, reads and
 * writes with their want-read / want-write waits, OpenSSL's error texts,
 * and freeing the session.
 *
 * Invariants:
 * - OpenSSL is reached only through the sym_ pointers of ssl_dl.h, filled
 *   when a configuration names a rediss:// broker (config/broker.c);
 *   only such a connection has tm_rtls_fns (see tls_private.h).
 * - c->priv (the SSL *) is set once, by tls_connect, over c->fd
 *   (non-blocking), and freed only by tls_close.
 * - OpenSSL's error queue (one per thread) is cleared before each SSL_*
 *   call whose failure is read from it, and emptied when read, so that
 *   no stale entry blames a later call.
 * - Every wait (want-read, want-write) is tm_rconn_wait on c->fd, bounded
 *   by the caller's deadline. */
#include "redis/tls_private.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/uio.h>

#include "util/ssl_dl.h"
#include "util/util.h"

/* Room for one OpenSSL error text (ERR_error_string_n). */
#define TLS_ERR_BUF 200

/* ssl_of is c's session. */
static SSL *ssl_of(const struct tm_rconn *c)
{
    assert(c->priv != NULL);
    return c->priv;
}

/* ssl_errstr describes the first error on OpenSSL's queue (and empties
 * it: the queue is per thread, a stale entry would blame the next
 * call). */
static void ssl_errstr(char *buf, size_t size)
{
    unsigned long e = sym_ERR_get_error();
    if (e == 0)
        tm_snprintf(buf, size, "unknown TLS error");
    else
        sym_ERR_error_string_n(e, buf, size);
    sym_ERR_clear_error();
}

/* ssl_wait turns an SSL_* result into a wait: 0 when the call is to be
 * made again, -1 with c->err set. */
static int ssl_wait(struct tm_rconn *c, int ret, int64_t deadline,
                    const char *what)
{
    int e = sym_SSL_get_error(ssl_of(c), ret);
    if (e == SSL_ERROR_WANT_READ)
        return tm_rconn_wait(c, POLLIN, deadline, what);
    if (e == SSL_ERROR_WANT_WRITE)
        return tm_rconn_wait(c, POLLOUT, deadline, what);
    if (e == SSL_ERROR_ZERO_RETURN) {
        tm_rconn_set_err(c, REDIS_ERR_EOF, "Server closed the connection");
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL && sym_ERR_peek_error() == 0) {
        if (errno == 0 || ret == 0)
            tm_rconn_set_err(c, REDIS_ERR_EOF,
                             "Server closed the connection");
        else
            tm_rconn_set_errno(c, what, errno);
        return -1;
    }
    char eb[TLS_ERR_BUF];
    ssl_errstr(eb, sizeof eb);
    tm_rconn_set_err(c, REDIS_ERR_IO, "%s: %s", what, eb);
    return -1;
}

/* tls_readv reads at least one byte (at most iov[0]'s size, and
 * INT_MAX) of the session into iov[0] before the deadline: the count, or
 * -1 with c->err set. */
static ssize_t tls_readv(struct tm_rconn *c, const struct iovec *iov,
                         int iovcnt, int64_t deadline)
{
    assert(iovcnt >= 1);
    (void)iovcnt;
    size_t size = iov[0].iov_len;
    int want = size > INT_MAX ? INT_MAX : (int)size;
    for (;;) {
        sym_ERR_clear_error();
        int n = sym_SSL_read(ssl_of(c), iov[0].iov_base, want);
        if (n > 0)
            return n;
        if (ssl_wait(c, n, deadline, "read") != 0)
            return -1;
    }
}

/* tls_why_closed replaces a failed write's reason with the server's
 * alert when one arrived before the connection closed (a refused client
 * certificate, for one): that says why, the write error does not. */
static void tls_why_closed(struct tm_rconn *c)
{
    char one, eb[TLS_ERR_BUF];
    sym_ERR_clear_error();
    int n = sym_SSL_read(ssl_of(c), &one, 1);
    if (n <= 0 && sym_SSL_get_error(ssl_of(c), n) == SSL_ERROR_SSL &&
        sym_ERR_peek_error() != 0) {
        ssl_errstr(eb, sizeof eb);
        tm_rconn_set_err(c, REDIS_ERR_IO, "%s", eb);
    }
    sym_ERR_clear_error();
}

/* tls_write writes all len bytes at p into the session before the
 * deadline: 0, or -1 with c->err set (to the server's alert when one
 * came before the connection closed). */
static int tls_write(struct tm_rconn *c, const char *p, size_t len,
                     int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        size_t left = len - done;
        sym_ERR_clear_error();
        int n = sym_SSL_write(ssl_of(c), p + done,
                              left > INT_MAX ? INT_MAX : (int)left);
        if (n > 0) {
            done += (size_t)n;
        } else if (ssl_wait(c, n, deadline, "write") != 0) {
            tls_why_closed(c);
            return -1;
        }
    }
    return 0;
}

static int is_ip_literal(const char *h)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

/* tls_context builds the OpenSSL context of one connection from o. */
static SSL_CTX *tls_context(const struct tm_rconn_opts *o, char *buf,
                            size_t size)
{
    char eb[TLS_ERR_BUF];
    SSL_CTX *ctx = sym_SSL_CTX_new(sym_TLS_client_method());
    if (ctx == NULL) {
        ssl_errstr(eb, sizeof eb);
        tm_snprintf(buf, size, "TLS: %s", eb);
        return NULL;
    }
    /* SSL_CTX_set_min_proto_version and SSL_CTX_set_mode: macros over
     * SSL_CTX_ctrl */
    sym_SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION,
                     NULL);
    sym_SSL_CTX_ctrl(ctx, SSL_CTRL_MODE,
                     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                         SSL_MODE_ENABLE_PARTIAL_WRITE,
                     NULL);
    if (o->verify) {
        sym_SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        int ok = o->ca_file != NULL
                     ? sym_SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL)
                     : sym_SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            ssl_errstr(eb, sizeof eb);
            tm_snprintf(buf, size, "TLS: cannot load the CA %s%s: %s",
                        o->ca_file != NULL ? "file " : "store",
                        o->ca_file != NULL ? o->ca_file : "", eb);
            goto fail;
        }
    } else {
        sym_SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (o->cert_file != NULL) {
        if (sym_SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
            ssl_errstr(eb, sizeof eb);
            tm_snprintf(buf, size, "TLS: cannot load cert_file %s: %s",
                        o->cert_file, eb);
            goto fail;
        }
        if (sym_SSL_CTX_use_PrivateKey_file(ctx, o->key_file,
                                            SSL_FILETYPE_PEM) != 1 ||
            sym_SSL_CTX_check_private_key(ctx) != 1) {
            ssl_errstr(eb, sizeof eb);
            tm_snprintf(buf, size, "TLS: cannot use key_file %s: %s",
                        o->key_file, eb);
            goto fail;
        }
    }
    return ctx;
fail:
    sym_SSL_CTX_free(ctx);
    return NULL;
}

/* tls_connect starts TLS on c's connected socket before the deadline
 * (see tls_private.h). Sets c->priv once the session exists (the
 * connection's close frees it, through tls_close, even when the
 * handshake then fails). 0, or -1 with the reason in buf. */
static int tls_connect(struct tm_rconn *c, const struct tm_rconn_opts *o,
                       int64_t deadline, char *buf, size_t size)
{
    assert(c->fd >= 0 && c->priv == NULL);
    const char *name = o->server_name != NULL ? o->server_name : o->host;
    int rc = -1;
    SSL_CTX *ctx = tls_context(o, buf, size);
    if (ctx == NULL)
        return -1;
    SSL *ssl = sym_SSL_new(ctx);
    if (ssl == NULL || sym_SSL_set_fd(ssl, c->fd) != 1) {
        tm_snprintf(buf, size, "TLS: out of memory");
        sym_SSL_free(ssl);
        goto out;
    }
    c->priv = ssl;
    if (!is_ip_literal(name)) {
        /* SSL_set_tlsext_host_name: a macro over SSL_ctrl */
        sym_SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME,
                     TLSEXT_NAMETYPE_host_name, (void *)name);
    }
    if (o->verify) {
        X509_VERIFY_PARAM *vp = sym_SSL_get0_param(ssl);
        int ok = is_ip_literal(name)
                     ? sym_X509_VERIFY_PARAM_set1_ip_asc(vp, name)
                     : sym_X509_VERIFY_PARAM_set1_host(vp, name, 0);
        if (ok != 1) {
            tm_snprintf(buf, size, "TLS: cannot verify the name '%s'", name);
            goto out;
        }
    }
    for (;;) {
        sym_ERR_clear_error();
        int n = sym_SSL_connect(ssl);
        if (n == 1)
            break;
        long vr = sym_SSL_get_verify_result(ssl);
        if (vr != X509_V_OK) {
            sym_ERR_clear_error();
            tm_snprintf(buf, size, "TLS: certificate verification failed "
                        "for '%s': %s", name,
                        sym_X509_verify_cert_error_string(vr));
            goto out;
        }
        if (ssl_wait(c, n, deadline, "TLS handshake") != 0) {
            tm_snprintf(buf, size, "%s", c->errstr);
            goto out;
        }
    }
    rc = 0;
out:
    sym_SSL_CTX_free(ctx); /* the session holds its own reference */
    return rc;
}

/* A TLS 1.3 server judges the client's certificate after the client's
 * side of the handshake is over, so its refusal comes as an alert on the
 * first read. One PING (any reply, NOAUTH included, is an answer) makes
 * that refusal an error of the connect, with its reason, rather than a
 * reset on some later command. */
static int tls_settled(struct tm_rconn *c, char *buf, size_t size)
{
    assert(c->priv != NULL && c->reader != NULL);
    redisReply *r = tm_rconn_command(c, "PING");
    if (r == NULL) {
        tm_snprintf(buf, size, "TLS: the server ended the session: %s",
                    c->errstr);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/* tls_close frees the session, without close_notify (the caller shuts
 * the socket down first), and clears c->priv. */
static void tls_close(struct tm_rconn *c)
{
    sym_SSL_free(ssl_of(c)); /* no close_notify: the socket is shut down */
    c->priv = NULL;
}

const struct tm_rconn_fns tm_rtls_fns = {
    .connect = tls_connect,
    .settled = tls_settled,
    .readv = tls_readv,
    .write = tls_write,
    .close = tls_close,
};
