/* net.c - one connection to a Redis server: a non-blocking socket with
 * deadlines, replies through hiredis's reader, commands in RESP
 * (hiredis's formatter for format strings; argv commands written here,
 * see tm_rconn_append_argv), and the reply filter that caps bulk
 * strings. Its bytes go through the connection's transport table
 * (struct tm_rconn_fns): plain TCP here (tm_rconn_tcp), TLS a layer of
 * its own above this file (tls.c), chosen by the caller that opens.
 *
 * Invariants:
 * - c->fd is non-blocking; every wait is tm_rconn_wait, in poll() for at
 *   most what is left of the call's deadline.
 * - Every read and write of a connection's bytes goes through c->fns
 *   (never straight to the socket outside tm_rconn_tcp's hooks); this
 *   file names no TLS symbol and calls no OpenSSL function.
 * - c->err and c->errstr are written only by tm_rconn_set_err; once a
 *   call has set c->err, later calls do no I/O on the connection (they
 *   fail at once) until the caller closes it.
 * - The output buffer is empty after every flush, sent or not. */
#include "redis/net_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "redis/arena.h"
#include "util/util.h"

/* Bytes read from the socket at a time. */
#define TM_RCONN_CHUNK 16384
/* Bytes read past the end of a large string read into its place (see
 * get_reply): enough for the next entry's id, field and header lines,
 * few of a next large payload, which then goes to its place too. Past
 * a string shorter than TM_RCONN_CHUNK, a whole chunk is read: the next
 * entries are likely as small, and one read takes several of them. */
#define TM_RCONN_TAIL 1024

void tm_rconn_set_err(struct tm_rconn *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
    c->err = err;
}

void tm_rconn_set_errno(struct tm_rconn *c, const char *what, int e)
{
    char eb[TM_STRERRNO_BUF];
    tm_rconn_set_err(c, REDIS_ERR_IO, "%s: %s", what,
                     tm_strerror(e, eb, sizeof eb));
}

int tm_rconn_wait(struct tm_rconn *c, short events, int64_t deadline,
                  const char *what)
{
    for (;;) {
        int64_t left = deadline - tm_now_ms();
        if (left <= 0) {
            tm_rconn_set_err(c, REDIS_ERR_IO, "%s: timed out", what);
            return -1;
        }
        struct pollfd p = {.fd = c->fd, .events = events};
        int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR) {
            tm_rconn_set_errno(c, what, errno);
            return -1;
        }
    }
}

/* sock_readv reads at least one byte from the plain socket into iov
 * before the deadline (tm_rconn_tcp's readv). */
static ssize_t sock_readv(struct tm_rconn *c, const struct iovec *iov,
                          int iovcnt, int64_t deadline)
{
    for (;;) {
        ssize_t n = readv(c->fd, iov, iovcnt);
        if (n > 0)
            return n;
        if (n == 0) {
            tm_rconn_set_err(c, REDIS_ERR_EOF, "Server closed the connection");
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            tm_rconn_set_errno(c, "read", errno);
            return -1;
        }
        if (tm_rconn_wait(c, POLLIN, deadline, "read") != 0)
            return -1;
    }
}

/* read_some reads at least one byte before the deadline. */
static ssize_t read_some(struct tm_rconn *c, char *buf, size_t size,
                         int64_t deadline)
{
    struct iovec iov = {buf, size};
    return c->fns->readv(c, &iov, 1, deadline);
}

/* read_into reads at least one byte before the deadline: the first size
 * into at, then what else came (up to bsize) into buf. One system call
 * for both on a plain socket; TLS reads only into at. */
static ssize_t read_into(struct tm_rconn *c, char *at, size_t size,
                         char *buf, size_t bsize, int64_t deadline)
{
    struct iovec iov[2] = {{at, size}, {buf, bsize}};
    return c->fns->readv(c, iov, 2, deadline);
}

/* sock_send writes all len bytes at p to the plain socket before the
 * deadline (tm_rconn_tcp's write): 0, or -1 with c->err set. */
static int sock_send(struct tm_rconn *c, const char *p, size_t len,
                     int64_t deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(c->fd, p + done, len - done, MSG_NOSIGNAL);
        if (n >= 0) {
            done += (size_t)n;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (tm_rconn_wait(c, POLLOUT, deadline, "write") != 0)
                return -1;
        } else if (errno != EINTR) {
            tm_rconn_set_errno(c, "write", errno);
            return -1;
        }
    }
    return 0;
}

const struct tm_rconn_fns tm_rconn_tcp = {
    .readv = sock_readv,
    .write = sock_send,
};

/* flush sends every queued byte before the deadline, through the
 * connection's transport; the buffer is empty after it either way. */
static int flush(struct tm_rconn *c, int64_t deadline)
{
    int rc = c->fns->write(c, c->out, c->outlen, deadline);
    c->outlen = 0;
    return rc;
}

/* tcp_connect connects to one address before the deadline. */
static int tcp_connect(struct tm_rconn *c, const struct addrinfo *ai,
                       int64_t deadline, char *buf, size_t size)
{
    char eb[TM_STRERRNO_BUF];
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
                                       SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
        tm_snprintf(buf, size, "%s", tm_strerror(errno, eb, sizeof eb));
        return -1;
    }
    c->fd = fd;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            tm_snprintf(buf, size, "%s", tm_strerror(errno, eb, sizeof eb));
            goto fail;
        }
        if (tm_rconn_wait(c, POLLOUT, deadline, "connect") != 0) {
            tm_snprintf(buf, size, "%s", c->errstr);
            goto fail;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr != 0) {
            tm_snprintf(buf, size, "%s", tm_strerror(soerr, eb, sizeof eb));
            goto fail;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    return 0;
fail:
    close(fd);
    c->fd = -1;
    c->err = 0;
    return -1;
}

struct tm_rconn *tm_rconn_open(const struct tm_rconn_opts *o, char *buf,
                               size_t size)
{
    struct tm_rconn *c = tm_calloc(1, sizeof *c);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char port[16], why[200] = "no address";
    int64_t deadline = tm_now_ms() + o->connect_timeout_ms;
    c->fd = -1;
    c->fns = o->fns != NULL ? o->fns : &tm_rconn_tcp;
    c->timeout_ms = o->timeout_ms;
    tm_snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(o->host, port, &hints, &res);
    if (gai != 0) {
        tm_snprintf(buf, size, "cannot resolve %s: %s", o->host,
                    gai_strerror(gai));
        goto fail;
    }
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        if (tcp_connect(c, ai, deadline, why, sizeof why) == 0)
            break;
    freeaddrinfo(res);
    if (c->fd < 0) {
        tm_snprintf(buf, size, "%s", why);
        goto fail;
    }
    if (c->fns->connect != NULL &&
        c->fns->connect(c, o, deadline, buf, size) != 0)
        goto fail;
    c->reader = redisReaderCreate();
    if (c->reader == NULL) {
        tm_snprintf(buf, size, "out of memory");
        goto fail;
    }
    if (c->fns->settled != NULL && c->fns->settled(c, buf, size) != 0)
        goto fail;
    return c;
fail:
    tm_rconn_close(c);
    return NULL;
}

void tm_rconn_close(struct tm_rconn *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    if (c->priv != NULL && c->fns->close != NULL)
        c->fns->close(c); /* after the shutdown: no close_notify is sent */
    if (c->fd >= 0)
        close(c->fd);
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    tm_free(c->out);
    tm_free(c);
}

void tm_rconn_set_timeout(struct tm_rconn *c, int64_t timeout_ms)
{
    c->timeout_ms = timeout_ms;
}

/* out_room makes room for n more bytes on the output buffer. */
static void out_room(struct tm_rconn *c, size_t n)
{
    if (c->outlen + n <= c->outcap)
        return;
    size_t cap = c->outcap ? c->outcap : 256;
    while (cap < c->outlen + n)
        cap *= 2;
    c->out = tm_realloc(c->out, cap);
    c->outcap = cap;
}

/* queue takes a formatted command (len bytes, or -1: formatting failed)
 * onto the output buffer and frees it. */
static int queue(struct tm_rconn *c, char *cmd, long long len)
{
    if (len < 0 || cmd == NULL) {
        tm_rconn_set_err(c, REDIS_ERR_OOM, "cannot format the command");
        return -1;
    }
    out_room(c, (size_t)len);
    memcpy(c->out + c->outlen, cmd, (size_t)len);
    c->outlen += (size_t)len;
    redisFreeCommand(cmd);
    return 0;
}

/* put_head writes a RESP header (kind, then the decimal v, then CRLF) at
 * p; returns its length (at most 23 bytes). */
static size_t put_head(char *p, char kind, size_t v)
{
    char digits[20];
    size_t nd = 0, k = 0;
    do {
        digits[nd++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    p[k++] = kind;
    while (nd > 0)
        p[k++] = digits[--nd];
    p[k++] = '\r';
    p[k++] = '\n';
    return k;
}

/* tm_rconn_append_argv writes the command as RESP straight onto the
 * output buffer. Written here rather than with hiredis's
 * redisFormatCommandArgv, which returns each command as a malloc'd copy
 * built with one snprintf per argument: the hot path's XACK pipelines
 * carry thousands of ids, and that copy and formatting were among the
 * daemon's top costs (sdscatlen, vfprintf). The format is RESP's array
 * of bulk strings only; test_redis.c checks it byte for byte against
 * hiredis's formatter. */
int tm_rconn_append_argv(struct tm_rconn *c, int argc, const char **argv,
                         const size_t *lens)
{
    assert(argc > 0);
    size_t need = 24;
    for (int i = 0; i < argc; i++)
        need += 24 + 2 + (lens != NULL ? lens[i] : strlen(argv[i]));
    out_room(c, need);
    char *p = c->out + c->outlen;
    p += put_head(p, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens != NULL ? lens[i] : strlen(argv[i]);
        p += put_head(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    c->outlen = (size_t)(p - c->out);
    assert(c->outlen <= c->outcap);
    return 0;
}

int tm_rconn_append(struct tm_rconn *c, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    return queue(c, cmd, len);
}

/* ---- replies, with or without a cap on bulk strings ---- */

static int cap_feed_out(redisReader *rd, const char *p, size_t n)
{
    return n > 0 && redisReaderFeed(rd, p, n) != REDIS_OK ? -1 : 0;
}

/* cap_header reads the line p[0 .. len) (a whole line, "\n" included) at
 * a line start: for a bulk header of a payload up to the limit, or of a
 * nil, or a malformed one (left for the reader to refuse), it sets
 * f->pass and returns 0; for one over the limit it sets f->drop and
 * returns the payload's length (> limit), which the marker names. Any
 * other line returns 0 and leaves f as it is. */
static long long cap_header(struct tm_redis_cap *f, const char *p, size_t len)
{
    if (p[0] != '$')
        return 0;
    unsigned long long n = 0;
    size_t i = 1, digits = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9' && digits < 18) {
        n = n * 10 + (unsigned long long)(p[i] - '0');
        i++;
        digits++;
    }
    if (digits == 18 && i < len && p[i] >= '0' && p[i] <= '9') {
        /* past any size a server sends: dropped for good (the read
         * times out) rather than ever buffered */
        f->drop = SIZE_MAX;
        return LLONG_MAX;
    }
    /* "$-1", or no length the reader takes: no payload follows */
    if (digits == 0 || i >= len || p[i] != '\r')
        return 0;
    if (n <= f->limit) {
        f->pass = (size_t)n + 2;
        return 0;
    }
    f->drop = (size_t)n + 2;
    return (long long)n;
}

/* cap_marker passes on, in place of a bulk of n bytes, the marker and the
 * reason. */
static int cap_marker(const struct tm_redis_cap *f, redisReader *rd,
                      long long n)
{
    char text[128], head[32];
    int tl = tm_snprintf(text, sizeof text,
                         TM_REDIS_OVERSIZE "body of %lld bytes exceeds "
                         "max_payload of %zu\r\n", n, f->limit);
    int hl = tm_snprintf(head, sizeof head, "$%d\r\n", tl - 2);
    if (cap_feed_out(rd, head, (size_t)hl) != 0)
        return -1;
    return cap_feed_out(rd, text, (size_t)tl);
}

/* line_end finds the '\n' ending the line at p (n bytes on), or NULL.
 * Header lines are short ("$5\r\n"): a plain loop over the first bytes
 * beats a call to memchr. */
static const char *line_end(const char *p, size_t n)
{
    size_t k = n < 32 ? n : 32;
    for (size_t i = 0; i < k; i++)
        if (p[i] == '\n')
            return p + i;
    return n > k ? memchr(p + k, '\n', n - k) : NULL;
}

/* cap_takes says whether the bulk whose header was just read (f->pass
 * set by cap_header) is taken out of the stream into the arena. */
static int cap_takes(const struct tm_redis_cap *f)
{
    return f->arena != NULL && f->pass > 0 &&
           (f->pass == 2 || f->pass - 2 >= TM_REDIS_CAP_DIRECT);
}

/* cap_take starts filling a string of the arena with the payload of the
 * bulk whose header was just read, instead of passing it on. */
static int cap_take(struct tm_redis_cap *f)
{
    assert(f->str == NULL && f->pass >= 2);
    f->str_len = f->pass - 2;
    f->str_have = 0;
    f->str = tm_rarena_string(f->arena, f->str_len);
    f->crlf = 2;
    f->pass = 0;
    return 0;
}

/* cap_string takes bytes of the string being filled from in[0 .. n) (its
 * payload, then its CRLF); once whole, the string is queued and an empty
 * bulk fed in its place. Returns the bytes taken, or -1 when the payload
 * is not followed by CRLF (or the reader refuses the empty bulk). */
static ssize_t cap_string(struct tm_redis_cap *f, redisReader *rd,
                          const char *in, size_t n)
{
    size_t i = 0;
    if (f->str_have < f->str_len) {
        i = f->str_len - f->str_have < n ? f->str_len - f->str_have : n;
        memcpy(f->str + f->str_have, in, i);
        f->str_have += i;
    }
    while (i < n && f->crlf > 0) {
        if (in[i] != "\r\n"[2 - f->crlf])
            return -1;
        f->crlf--;
        i++;
    }
    if (f->str_have == f->str_len && f->crlf == 0) {
        tm_rarena_queue_string(f->arena, f->str, f->str_len);
        f->str = NULL;
        if (cap_feed_out(rd, "$0\r\n\r\n", 6) != 0)
            return -1;
    }
    return (ssize_t)i;
}

size_t tm_redis_cap_room(const struct tm_redis_cap *f, char **at)
{
    if (f->str == NULL)
        return 0;
    *at = f->str + f->str_have;
    return f->str_len - f->str_have;
}

void tm_redis_cap_filled(struct tm_redis_cap *f, size_t n)
{
    assert(f->str != NULL && n <= f->str_len - f->str_have);
    f->str_have += n;
}

int tm_redis_cap_feed(struct tm_redis_cap *f, redisReader *rd,
                      const char *in, size_t n)
{
    size_t i = 0;
    size_t run = 0; /* in[run .. i) passes as it is, not fed yet */
    if (f->nline > 0) {
        /* the line cut by the end of the last call, completed here: it
         * is fed on its own (from f->line), then the rest in runs */
        const char *nl = memchr(in, '\n', n);
        size_t take = nl != NULL ? (size_t)(nl - in) + 1 : n;
        if (f->nline + take > sizeof f->line)
            return -1;
        memcpy(f->line + f->nline, in, take);
        f->nline += take;
        if (nl == NULL)
            return 0;
        long long big = cap_header(f, f->line, f->nline);
        int rc = big > 0       ? cap_marker(f, rd, big)
                 : cap_takes(f) ? cap_take(f)
                                : cap_feed_out(rd, f->line, f->nline);
        f->nline = 0;
        if (rc != 0)
            return -1;
        i = run = take;
    }
    /* Bytes that pass unchanged are fed in runs as long as the input
     * allows: only an oversized bulk (its header, then its payload) or
     * one taken into the arena breaks a run, and a line cut at the end
     * is held back whole, since a bulk header may be one to replace. */
    while (i < n) {
        if (f->drop > 0) {
            size_t k = n - i < f->drop ? n - i : f->drop;
            f->drop -= k;
            i += k;
            run = i;
            continue;
        }
        if (f->str != NULL) {
            ssize_t k = cap_string(f, rd, in + i, n - i);
            if (k < 0)
                return -1;
            i += (size_t)k;
            run = i;
            continue;
        }
        if (f->pass > 0) {
            size_t k = n - i < f->pass ? n - i : f->pass;
            f->pass -= k;
            i += k;
            continue;
        }
        /* a line starts at i */
        const char *nl = line_end(in + i, n - i);
        size_t len = nl != NULL ? (size_t)(nl - (in + i)) + 1 : n - i;
        if (len > sizeof f->line)
            return -1;
        if (nl == NULL) {
            if (cap_feed_out(rd, in + run, i - run) != 0)
                return -1;
            memcpy(f->line, in + i, len);
            f->nline = len;
            return 0;
        }
        long long big = cap_header(f, in + i, len);
        if (big > 0 || cap_takes(f)) {
            if (cap_feed_out(rd, in + run, i - run) != 0 ||
                (big > 0 ? cap_marker(f, rd, big) : cap_take(f)) != 0)
                return -1;
            run = i + len;
        }
        i += len;
    }
    return cap_feed_out(rd, in + run, i - run);
}

void tm_redis_cap_init(struct tm_redis_cap *f, size_t limit)
{
    memset(f, 0, sizeof *f);
    f->limit = limit;
}

void tm_redis_cap_init_in(struct tm_redis_cap *f, size_t limit,
                          struct tm_rarena *a)
{
    assert(a != NULL);
    tm_redis_cap_init(f, limit);
    f->arena = a;
}

/* get_reply reads one reply, through the filter f when it is not NULL:
 * then it reads on until the filter is done with the bulk it drops (the
 * reader has the reply as soon as it has the reason in that bulk's
 * place, while the rest of its bytes are still coming). With an arena
 * a, the reply is built in a, and the reader is back to malloc'd
 * replies on return: the reader parses one reply per call, so nothing
 * of a later reply is built meanwhile. While the filter fills a string
 * of a (see struct tm_redis_cap), the socket is read straight into the
 * string's place, and only TM_RCONN_TAIL bytes past a large one into
 * buf. */
static int get_reply(struct tm_rconn *c, struct tm_redis_cap *f,
                     struct tm_rarena *a, redisReply **out)
{
    void *r = NULL;
    char *buf = NULL;
    int rc = -1;
    redisReplyObjectFunctions *fn = c->reader->fn;
    *out = NULL;
    if (c->err)
        return -1;
    assert(c->reader->reply == NULL && c->reader->privdata == NULL);
    if (a != NULL) {
        c->reader->fn = &tm_rarena_fns;
        c->reader->privdata = a;
    }
    int64_t deadline = tm_now_ms() + c->timeout_ms;
    if (c->outlen > 0 && flush(c, deadline) != 0)
        goto out;
    buf = tm_malloc(TM_RCONN_CHUNK);
    for (;;) {
        if (r == NULL && redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            tm_rconn_set_err(c, REDIS_ERR_PROTOCOL, "%s", c->reader->errstr);
            goto out;
        }
        if (r != NULL && (f == NULL || f->drop == 0))
            break;
        char *at = NULL;
        size_t room = f != NULL ? tm_redis_cap_room(f, &at) : 0;
        size_t tail = room > 0 && f->str_len >= TM_RCONN_CHUNK
                          ? TM_RCONN_TAIL
                          : TM_RCONN_CHUNK;
        ssize_t n = room > 0 ? read_into(c, at, room, buf, tail, deadline)
                             : read_some(c, buf, TM_RCONN_CHUNK, deadline);
        if (n < 0)
            goto out;
        if (room > 0) {
            /* the string's payload went to its place, the rest to buf */
            size_t k = (size_t)n < room ? (size_t)n : room;
            tm_redis_cap_filled(f, k);
            n -= (ssize_t)k;
        }
        if (n == 0) {
            continue;
        } else if (f == NULL) {
            if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
                tm_rconn_set_err(c, REDIS_ERR_OOM, "out of memory");
                goto out;
            }
        } else if (tm_redis_cap_feed(f, c->reader, buf, (size_t)n) != 0) {
            tm_rconn_set_err(c, REDIS_ERR_PROTOCOL,
                             "reply line over %d bytes, bulk string not "
                             "ended by CRLF, or out of memory",
                             TM_REDIS_CAP_LINE_MAX);
            goto out;
        }
    }
    /* through the filter, a reply ends where it is back at a line start,
     * every string it took out of the stream placed in the reply */
    assert(f == NULL || (f->pass == 0 && f->drop == 0 && f->nline == 0 &&
                         f->str == NULL));
    assert(a == NULL || !tm_rarena_queued(a));
    *out = r;
    r = NULL;
    rc = 0;
out:
    if (a != NULL) {
        /* a reply left half-built on a failure is the arena's: the
         * reader (closed with the connection) must not free it */
        c->reader->reply = NULL;
        c->reader->fn = fn;
        c->reader->privdata = NULL;
        tm_rarena_unqueue(a);
    }
    tm_rarena_reply_free(r, a);
    tm_free(buf);
    return rc;
}

int tm_rconn_send(struct tm_rconn *c)
{
    if (c->err)
        return -1;
    return c->outlen > 0 ? flush(c, tm_now_ms() + c->timeout_ms) : 0;
}

int tm_rconn_get_reply(struct tm_rconn *c, redisReply **out)
{
    return get_reply(c, NULL, NULL, out);
}

static int get_reply_capped(struct tm_rconn *c, size_t limit,
                            struct tm_rarena *a, redisReply **out)
{
    /* the filter starts at a reply boundary: nothing read ahead */
    if (c->reader->pos < c->reader->len)
        return get_reply(c, NULL, a, out);
    struct tm_redis_cap *f = tm_malloc(sizeof *f);
    if (a != NULL)
        tm_redis_cap_init_in(f, limit, a);
    else
        tm_redis_cap_init(f, limit);
    int rc = get_reply(c, f, a, out);
    tm_free(f);
    return rc;
}

int tm_rconn_get_reply_capped(struct tm_rconn *c, size_t limit,
                              redisReply **out)
{
    return get_reply_capped(c, limit, NULL, out);
}

int tm_rconn_get_reply_in(struct tm_rconn *c, size_t limit,
                          struct tm_rarena *a, redisReply **out)
{
    return limit > 0 ? get_reply_capped(c, limit, a, out)
                     : get_reply(c, NULL, a, out);
}

redisReply *tm_rconn_command_argv(struct tm_rconn *c, int argc,
                                  const char **argv, const size_t *lens)
{
    redisReply *r = NULL;
    if (tm_rconn_append_argv(c, argc, argv, lens) != 0 ||
        tm_rconn_get_reply(c, &r) != 0)
        return NULL;
    return r;
}

redisReply *tm_rconn_command(struct tm_rconn *c, const char *fmt, ...)
{
    char *cmd = NULL;
    redisReply *r = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    if (queue(c, cmd, len) != 0 || tm_rconn_get_reply(c, &r) != 0)
        return NULL;
    return r;
}
