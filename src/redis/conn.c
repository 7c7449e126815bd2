/* conn.c - Redis connections, timeouts, error translation, stream ids. */
#include "redis/redis.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* tm_redis_reply_error describes a failed command: the reply's error
 * text, or the
 * context's I/O error. Returns 1 when the connection is unusable. */
int tm_redis_reply_error(redisContext *c, redisReply *r, char *buf,
                       size_t size)
{
    if (r == NULL) {
        tm_snprintf(buf, size, "%s",
                    c != NULL && c->err ? c->errstr : "connection lost");
        if (buf[0] == '\0')
            tm_snprintf(buf, size, "connection lost");
        return 1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        tm_snprintf(buf, size, "%s", r->str);
        return 0;
    }
    tm_snprintf(buf, size, "unexpected reply type %d", r->type);
    return 0;
}

/* tm_redis_command runs one command given as argv and returns its reply, or
 * NULL with the reason in buf (and *dead = 1 when the connection is
 * unusable). An error reply is returned as NULL too. */
redisReply *tm_redis_command(redisContext *c, int argc, const char **argv,
                              const size_t *lens, char *buf, size_t size,
                              int *dead)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    *dead = 0;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = tm_redis_reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

redisContext *tm_redis_connect(struct tm_redis *rb, int64_t timeout_ms,
                                char *buf, size_t size)
{
    const struct tm_url *u = &rb->base.cfg->url;
    redisContext *c = redisConnectWithTimeout(
        u->host, u->port, tv_ms(TM_REDIS_CONNECT_TIMEOUT_MS));
    if (c == NULL) {
        tm_snprintf(buf, size, "cannot connect to %s: out of memory",
                    u->redacted);
        return NULL;
    }
    if (c->err) {
        tm_snprintf(buf, size, "cannot connect to %s: %s", u->redacted,
                    c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv_ms(timeout_ms));
    redisEnableKeepAlive(c);
    char eb[200];
    int dead;
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", NULL, NULL};
        int argc = 1;
        if (u->user != NULL && u->user[0] != '\0')
            argv[argc++] = u->user;
        argv[argc++] = u->password;
        redisReply *r = tm_redis_command(c, argc, argv, NULL, eb, sizeof eb,
                                         &dead);
        if (r == NULL) {
            tm_snprintf(buf, size, "%s: AUTH failed: %s", u->redacted, eb);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    if (u->db != 0) {
        char db[16];
        tm_snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        redisReply *r = tm_redis_command(c, 2, argv, NULL, eb, sizeof eb,
                                         &dead);
        if (r == NULL) {
            tm_snprintf(buf, size, "%s: SELECT %d failed: %s", u->redacted,
                        u->db, eb);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* tm_redis_close shuts the socket down before freeing the context: a child of
 * the fork pool holds a copy of every descriptor, which would otherwise
 * keep the connection open on the server. */
void tm_redis_close(redisContext *c)
{
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    redisFree(c);
}

void tm_redis_mark_up(struct tm_redis *rb)
{
    if (atomic_exchange(&rb->base.up, 1) == 0 && atomic_load(&rb->ever_up))
        atomic_fetch_add(&rb->base.reconnects, 1);
    atomic_store(&rb->ever_up, 1);
}

void tm_redis_mark_down(struct tm_redis *rb)
{
    atomic_store(&rb->base.up, 0);
}

/* tm_redis_ensure_group creates the task's consumer group at the start of the
 * stream (creating the stream too); an existing group is used as is. */
int tm_redis_ensure_group(redisContext *c, const struct tm_cfg_task *t,
                        char *buf, size_t size, int *dead)
{
    const char *argv[] = {"XGROUP", "CREATE", t->queue, t->group, "0",
                          "MKSTREAM"};
    redisReply *r = redisCommandArgv(c, 6, argv, NULL);
    *dead = 0;
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "BUSYGROUP", 9) == 0) {
        freeReplyObject(r);
        return 0;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = tm_redis_reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

int tm_redis_wc_ready(struct tm_redis *rb, char *buf, size_t size)
{
    if (rb->wc != NULL)
        return 0;
    rb->wc = tm_redis_connect(rb, TM_REDIS_COMMAND_TIMEOUT_MS, buf, size);
    if (rb->wc == NULL) {
        tm_redis_mark_down(rb);
        return -1;
    }
    return 0;
}

void tm_redis_wc_lost(struct tm_redis *rb, const char *what, const char *why)
{
    if (rb->wc_was_up)
        tm_log_warn(SRC, "%s: %s; reconnecting", what, why);
    rb->wc_was_up = 0;
    tm_redis_mark_down(rb);
    if (rb->wc != NULL) {
        tm_redis_close(rb->wc);
        rb->wc = NULL;
    }
}

/* tm_redis_reply_field finds key in a flat [key, value, ...] array. */
const redisReply *tm_redis_reply_field(const redisReply *a, const char *key)
{
    if (a == NULL || a->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(a->element[i]->str, key) == 0)
            return a->element[i + 1];
    return NULL;
}

/* ---- replies with a cap on bulk strings ---- */

/* Bytes read from the socket at a time. */
#define TM_REDIS_CAP_CHUNK 16384

static int cap_feed_out(redisReader *rd, const char *p, size_t n)
{
    return n > 0 && redisReaderFeed(rd, p, n) != REDIS_OK ? -1 : 0;
}

/* cap_line passes on one complete line (CRLF included), or for a bulk
 * header over the limit the marker in its place. */
static int cap_line(struct tm_redis_cap *f, redisReader *rd)
{
    if (f->line[0] != '$')
        return cap_feed_out(rd, f->line, f->nline);
    long long n = strtoll(f->line + 1, NULL, 10);
    if (n < 0 || (unsigned long long)n <= f->limit) {
        f->pass = n < 0 ? 0 : (size_t)n + 2;
        return cap_feed_out(rd, f->line, f->nline);
    }
    char text[128], head[32];
    int tl = tm_snprintf(text, sizeof text,
                         TM_REDIS_OVERSIZE "body of %lld bytes exceeds "
                         "max_payload of %zu\r\n", n, f->limit);
    int hl = tm_snprintf(head, sizeof head, "$%d\r\n", tl - 2);
    f->drop = (size_t)n + 2;
    if (cap_feed_out(rd, head, (size_t)hl) != 0)
        return -1;
    return cap_feed_out(rd, text, (size_t)tl);
}

int tm_redis_cap_feed(struct tm_redis_cap *f, redisReader *rd,
                      const char *in, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (f->drop > 0) {
            size_t k = n - i < f->drop ? n - i : f->drop;
            f->drop -= k;
            i += k;
            continue;
        }
        if (f->pass > 0) {
            size_t k = n - i < f->pass ? n - i : f->pass;
            if (cap_feed_out(rd, in + i, k) != 0)
                return -1;
            f->pass -= k;
            i += k;
            continue;
        }
        const char *nl = memchr(in + i, '\n', n - i);
        size_t take = nl != NULL ? (size_t)(nl - (in + i)) + 1 : n - i;
        if (f->nline + take > sizeof f->line)
            return -1;
        memcpy(f->line + f->nline, in + i, take);
        f->nline += take;
        i += take;
        if (nl == NULL)
            continue;
        if (cap_line(f, rd) != 0)
            return -1;
        f->nline = 0;
    }
    return 0;
}

void tm_redis_cap_init(struct tm_redis_cap *f, size_t limit)
{
    memset(f, 0, sizeof *f);
    f->limit = limit;
}

int tm_redis_get_reply_capped(redisContext *c, size_t limit,
                              redisReply **out)
{
    void *r = NULL;
    int done = 0;
    *out = NULL;
    /* the filter starts at a reply boundary: nothing read ahead */
    if (c->reader->pos < c->reader->len) {
        if (redisGetReply(c, &r) != REDIS_OK)
            return -1;
        *out = r;
        return 0;
    }
    do {
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return -1;
    } while (!done);
    struct tm_redis_cap *f = tm_calloc(1, sizeof *f);
    char *buf = tm_malloc(TM_REDIS_CAP_CHUNK);
    int rc = -1;
    tm_redis_cap_init(f, limit);
    /* read until the reply is whole, and the filter done with the bulk
     * it drops: the reader has the reply as soon as it has the reason in
     * that bulk's place, while the rest of its bytes are still coming */
    while (r == NULL || f->drop > 0) {
        if (r == NULL && redisReaderGetReply(c->reader, &r) != REDIS_OK) {
            c->err = REDIS_ERR_PROTOCOL;
            tm_snprintf(c->errstr, sizeof c->errstr, "%s",
                        c->reader->errstr);
            goto out;
        }
        if (r != NULL && f->drop == 0)
            break;
        ssize_t n = read(c->fd, buf, TM_REDIS_CAP_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            char eb[TM_STRERRNO_BUF];
            c->err = n == 0 ? REDIS_ERR_EOF : REDIS_ERR_IO;
            if (n == 0)
                tm_snprintf(c->errstr, sizeof c->errstr,
                            "Server closed the connection");
            else
                tm_snprintf(c->errstr, sizeof c->errstr, "%s",
                            tm_strerror(e, eb, sizeof eb));
            goto out;
        }
        if (tm_redis_cap_feed(f, c->reader, buf, (size_t)n) != 0) {
            c->err = REDIS_ERR_PROTOCOL;
            tm_snprintf(c->errstr, sizeof c->errstr,
                        "reply line over %d bytes, or out of memory",
                        TM_REDIS_CAP_LINE_MAX);
            goto out;
        }
    }
    /* a reply ends where the filter is back at a line start */
    assert(f->pass == 0 && f->drop == 0 && f->nline == 0);
    *out = r;
    r = NULL;
    rc = 0;
out:
    if (r != NULL)
        freeReplyObject(r);
    tm_free(buf);
    tm_free(f);
    return rc;
}
