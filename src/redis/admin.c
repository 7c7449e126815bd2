/* admin.c - Redis CLI and monitoring operations: publish, dead letters,
 * queue depths. */
#include "redis/redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* Replay one dead-letter entry: XADD the body to the stream, XDEL it
 * from the dead-letter stream. KEYS: stream, dlq. ARGV: dlq id, body. */
static const char replay_script[] =
    "local id = redis.call('XADD', KEYS[1], '*', 'body', ARGV[2])\n"
    "redis.call('XDEL', KEYS[2], ARGV[1])\n"
    "return id\n";


/* Command timeout of the depth connection: a slow answer only delays the
 * next refresh of /metrics, never a task. */
#define TM_REDIS_DEPTH_TIMEOUT_MS 2000

/* The depth connection is separate from the intake and settle ones, so
 * that monitoring reads never queue behind them or delay them. One per
 * process (struct tm_redis has no room for it), opened on first use by
 * the broker that uses it; the mutex serves one caller at a time. */
static struct {
    pthread_mutex_t mu;
    struct tm_rconn *c;
    const struct tm_redis *owner;
} rb_depth_conn = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL};

/* group_counts finds the task's group in an XINFO GROUPS reply and sets
 * *depth from its lag (entries not yet delivered to the group; Redis 7.0
 * and later, nil when Redis cannot compute it) and *pending. Returns 0
 * when the group is not there. */
static int group_counts(const redisReply *groups, const char *group,
                        long long *depth, long long *pending)
{
    for (size_t i = 0; i < groups->elements; i++) {
        const redisReply *g = groups->element[i];
        const redisReply *name = tm_redis_reply_field(g, "name");
        if (name == NULL || name->type != REDIS_REPLY_STRING ||
            strcmp(name->str, group) != 0)
            continue;
        const redisReply *lag = tm_redis_reply_field(g, "lag");
        const redisReply *pend = tm_redis_reply_field(g, "pending");
        if (lag != NULL && lag->type == REDIS_REPLY_INTEGER)
            *depth = lag->integer;
        if (pend != NULL && pend->type == REDIS_REPLY_INTEGER)
            *pending = pend->integer;
        return 1;
    }
    return 0;
}

int tm_redis_depth(struct tm_broker *b, size_t ti, long long *depth,
                    long long *pending, long long *dlq_depth)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    redisReply *r[3] = {NULL, NULL, NULL};
    char eb[256];
    int rc = -1;
    pthread_mutex_lock(&rb_depth_conn.mu);
    if (rb_depth_conn.c != NULL &&
        (ti == TM_BROKER_DEPTH_CLOSE || rb_depth_conn.owner != rb)) {
        tm_rconn_close(rb_depth_conn.c);
        rb_depth_conn.c = NULL;
        rb_depth_conn.owner = NULL;
    }
    if (ti == TM_BROKER_DEPTH_CLOSE) {
        rc = 0;
        goto out;
    }
    *depth = *pending = *dlq_depth = -1;
    if (ti >= rb->ntasks)
        goto out;
    if (rb_depth_conn.c == NULL) {
        rb_depth_conn.c = tm_redis_connect(rb, TM_REDIS_DEPTH_TIMEOUT_MS, eb,
                                           sizeof eb);
        if (rb_depth_conn.c == NULL) {
            tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth: %s", eb);
            goto out;
        }
        rb_depth_conn.owner = rb;
    }
    struct tm_rconn *c = rb_depth_conn.c;
    const struct tm_cfg_task *t = rb->tasks[ti].cfg;
    /* one round trip for the three reads */
    tm_rconn_append(c, "XINFO GROUPS %s", t->queue);
    tm_rconn_append(c, "XLEN %s", t->queue);
    tm_rconn_append(c, "XLEN %s", t->dead_letter);
    for (int i = 0; i < 3; i++) {
        redisReply *reply = NULL;
        if (tm_rconn_get_reply(c, &reply) != 0) {
            tm_redis_reply_error(c, NULL, eb, sizeof eb);
            tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL, "depth: %s", eb);
            tm_rconn_close(c);
            rb_depth_conn.c = NULL;
            rb_depth_conn.owner = NULL;
            goto out;
        }
        r[i] = reply;
    }
    long long len = r[1]->type == REDIS_REPLY_INTEGER ? r[1]->integer : -1;
    if (r[0]->type == REDIS_REPLY_ARRAY) {
        if (!group_counts(r[0], t->group, depth, pending)) {
            /* no group yet: nothing was delivered to it */
            *depth = len;
            *pending = 0;
        }
    } else if (r[0]->type == REDIS_REPLY_ERROR && len == 0) {
        /* no such key: an empty queue */
        *depth = 0;
        *pending = 0;
    }
    if (r[2]->type == REDIS_REPLY_INTEGER)
        *dlq_depth = r[2]->integer;
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        if (r[i] != NULL)
            freeReplyObject(r[i]);
    pthread_mutex_unlock(&rb_depth_conn.mu);
    return rc;
}

static redisReply *cli_command(struct tm_redis *rb, int argc,
                               const char **argv, const size_t *lens)
{
    char eb[256];
    if (tm_redis_wc_ready(rb, eb, sizeof eb) != 0) {
        tm_broker_set_error(&rb->base, ECONNREFUSED, "%s", eb);
        return NULL;
    }
    int dead;
    redisReply *r = tm_redis_command(rb->wc, argc, argv, lens, eb, sizeof eb,
                               &dead);
    if (r == NULL)
        tm_broker_set_error(&rb->base, dead ? EIO : EINVAL, "%s %s: %s",
                            argv[0], argc > 1 ? argv[1] : "", eb);
    return r;
}

int tm_redis_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority, char *id,
                      size_t idlen)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    (void)priority; /* refused by the config loader on Redis */
    const char *argv[] = {"XADD", t->queue, "*", "body", body};
    size_t lens[] = {4, strlen(t->queue), 1, 4, len};
    redisReply *r = cli_command(rb, 5, argv, lens);
    if (r == NULL)
        return -1;
    tm_snprintf(id, idlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return 0;
}

static char *field_dup(const redisReply *f, const char *key)
{
    if (f == NULL || f->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (f->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(f->element[i]->str, key) == 0 &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            return tm_strndup(f->element[i + 1]->str,
                              f->element[i + 1]->len);
    }
    return NULL;
}

static void entry_to_dlq(const redisReply *e, struct tm_dlq_entry *d)
{
    d->id = tm_strdup(e->element[0]->str);
    const redisReply *f = e->element[1];
    d->origin_id = field_dup(f, "origin_id");
    d->task = field_dup(f, "task");
    d->error = field_dup(f, "error");
    d->body = field_dup(f, "body");
    char *s = field_dup(f, "attempts");
    d->attempts = s != NULL ? strtol(s, NULL, 10) : 0;
    tm_free(s);
    s = field_dup(f, "failed_at");
    d->failed_at = s != NULL ? strtoll(s, NULL, 10) : 0;
    tm_free(s);
}

int tm_redis_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *argv[] = {"XREVRANGE", t->dead_letter, "+", "-", "COUNT",
                          count};
    redisReply *r = cli_command(rb, 6, argv, NULL);
    *out = NULL;
    *n = 0;
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        struct tm_dlq_entry *e = tm_calloc(r->elements, sizeof *e);
        size_t k = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *x = r->element[i];
            if (x->type == REDIS_REPLY_ARRAY && x->elements == 2)
                entry_to_dlq(x, &e[k++]);
        }
        *out = e;
        *n = k;
    }
    freeReplyObject(r);
    return 0;
}

long tm_redis_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    long moved = 0;
    /* replay up to the newest entry there is now: a message that fails
     * again is dead-lettered again, and must not be replayed twice by the
     * same command */
    char last[TM_REDIS_ID_MAX], from[TM_REDIS_ID_MAX + 1];
    if (id != NULL) {
        tm_snprintf(last, sizeof last, "%s", id);
        tm_snprintf(from, sizeof from, "%s", id);
    } else {
        const char *largv[] = {"XREVRANGE", t->dead_letter, "+", "-",
                               "COUNT", "1"};
        redisReply *r = cli_command(rb, 6, largv, NULL);
        if (r == NULL)
            return -1;
        int empty = r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
                    r->element[0]->type != REDIS_REPLY_ARRAY;
        if (!empty)
            tm_snprintf(last, sizeof last, "%s",
                        r->element[0]->element[0]->str);
        freeReplyObject(r);
        if (empty)
            return 0;
        tm_snprintf(from, sizeof from, "-");
    }
    for (;;) {
        const char *argv[] = {"XRANGE", t->dead_letter, from, last, "COUNT",
                              "100"};
        redisReply *r = cli_command(rb, 6, argv, NULL);
        if (r == NULL)
            return -1;
        size_t got = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
        for (size_t i = 0; i < got; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
                continue;
            /* the body as stored, every byte of it */
            const redisReply *body =
                tm_redis_reply_field(e->element[1], "body");
            const char *sargv[] = {"EVAL", replay_script, "2", t->queue,
                                   t->dead_letter, e->element[0]->str,
                                   body != NULL ? body->str : ""};
            size_t lens[7];
            for (size_t k = 0; k < 6; k++)
                lens[k] = strlen(sargv[k]);
            lens[6] = body != NULL ? body->len : 0;
            redisReply *x = cli_command(rb, 7, sargv, lens);
            if (x == NULL) {
                freeReplyObject(r);
                return -1;
            }
            freeReplyObject(x);
            moved++;
            /* the next page starts after this entry */
            tm_snprintf(from, sizeof from, "(%s", e->element[0]->str);
        }
        freeReplyObject(r);
        if (id != NULL || got < 100)
            break;
    }
    return moved;
}

long tm_redis_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    if (id != NULL) {
        const char *argv[] = {"XDEL", t->dead_letter, id};
        redisReply *r = cli_command(rb, 3, argv, NULL);
        if (r == NULL)
            return -1;
        long n = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
        freeReplyObject(r);
        return n;
    }
    const char *largv[] = {"XLEN", t->dead_letter};
    redisReply *r = cli_command(rb, 2, largv, NULL);
    if (r == NULL)
        return -1;
    long n = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
    freeReplyObject(r);
    const char *dargv[] = {"DEL", t->dead_letter};
    r = cli_command(rb, 2, dargv, NULL);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return n;
}
