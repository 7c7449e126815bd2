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

/* tm_redis_reply_error describes a failed command: the reply's error
 * text, or the
 * context's I/O error. Returns 1 when the connection is unusable. */
int tm_redis_reply_error(struct tm_rconn *c, redisReply *r, char *buf,
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
redisReply *tm_redis_command(struct tm_rconn *c, int argc,
                             const char **argv, const size_t *lens,
                             char *buf, size_t size, int *dead)
{
    redisReply *r = tm_rconn_command_argv(c, argc, argv, lens);
    *dead = 0;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = tm_redis_reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

struct tm_rconn *tm_redis_connect(struct tm_redis *rb, int64_t timeout_ms,
                                  char *buf, size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    const struct tm_url *u = &cfg->url;
    struct tm_rconn_opts o = {
        .host = u->host,
        .port = u->port,
        .connect_timeout_ms = TM_REDIS_CONNECT_TIMEOUT_MS,
        .timeout_ms = timeout_ms,
        .tls = u->tls,
        .ca_file = cfg->tls.ca_file,
        .cert_file = cfg->tls.cert_file,
        .key_file = cfg->tls.key_file,
        .server_name = cfg->tls.server_name,
        .verify = cfg->tls.verify,
    };
    char why[256];
    struct tm_rconn *c = tm_rconn_open(&o, why, sizeof why);
    if (c == NULL) {
        tm_snprintf(buf, size, "cannot connect to %s: %s", u->redacted, why);
        return NULL;
    }
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
            tm_rconn_close(c);
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
            tm_rconn_close(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
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
int tm_redis_ensure_group(struct tm_rconn *c, const struct tm_cfg_task *t,
                          char *buf, size_t size, int *dead)
{
    const char *argv[] = {"XGROUP", "CREATE", t->queue, t->group, "0",
                          "MKSTREAM"};
    redisReply *r = tm_rconn_command_argv(c, 6, argv, NULL);
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
        tm_rconn_close(rb->wc);
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
