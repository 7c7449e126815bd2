/* fleet.c - the fleet on Redis: each daemon's announcement under a key
 * with an expiry and an index of them, and the fleet's history in one
 * hash per minute and per hour (docs/redis.md, The fleet). Every key has
 * the hash tag {taskmill.fleet}: one cluster slot for all of them. */
#include "redis/redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define TAG "{taskmill.fleet}"
#define KEY_DAEMON TAG ".daemon."
#define KEY_INDEX TAG ".daemons"
#define KEY_MINUTE TAG ".minute."
#define KEY_HOUR TAG ".hour."
/* The index forgets a name not announced for this long (each daemon's
 * own key says whether it is alive; this only bounds the index). */
#define INDEX_KEEP_MS (10 * 60 * 1000)
/* How long the history buckets stay: a minute's for 25 h (the 24 h
 * range), an hour's for 8 d (the 7 d range). */
#define MINUTE_KEEP_MS (25LL * 3600 * 1000)
#define HOUR_KEEP_MS (8LL * 24 * 3600 * 1000)

static const char kind_field[TM_HK_N] = {'s', 'f', 'd', 'r'};

static unsigned fleet_slot(void)
{
    return tm_redis_key_slot(TAG, strlen(TAG));
}

/* pipe runs the n commands on the settle link of rb (a broker of the
 * fleet thread's or the API worker's own: no settle thread uses it). */
static int pipe_run(struct tm_redis *rb, struct tm_redis_cmd *cmds, size_t n)
{
    char eb[512];
    if (tm_redis_link_pipe(rb, &rb->settle, cmds, n, eb, sizeof eb) != 0) {
        tm_broker_set_error(&rb->base, EIO, "fleet: %s", eb);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = cmds[i].reply;
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            tm_broker_set_error(&rb->base, EIO, "fleet: %s: %s",
                                cmds[i].argv[0],
                                r != NULL ? r->str : "no reply");
            return -1;
        }
    }
    return 0;
}

/* pipe_once runs the n commands, frees their replies and key (the
 * daemon's key they name), and returns pipe_run's result. */
static int pipe_once(struct tm_redis *rb, struct tm_redis_cmd *cmds,
                     size_t n, char *key)
{
    int rc = pipe_run(rb, cmds, n);
    tm_redis_cmds_free(cmds, n);
    tm_free(key);
    return rc;
}

int tm_redis_fleet_announce(struct tm_broker *b, const char *instance,
                            const char *json, size_t len)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    unsigned slot = fleet_slot();
    char *key = tm_asprintf(KEY_DAEMON "%s", instance);
    char now[32], old[32], ttl[32], keep[32];
    int64_t wall = tm_wall_ms();
    tm_snprintf(now, sizeof now, "%lld", (long long)wall);
    tm_snprintf(old, sizeof old, "%lld", (long long)(wall - INDEX_KEEP_MS));
    tm_snprintf(ttl, sizeof ttl, "%d", TM_FLEET_TTL_MS);
    tm_snprintf(keep, sizeof keep, "%d", INDEX_KEEP_MS);
    const char *set[] = {"SET", key, json, "PX", ttl};
    size_t set_lens[] = {3, strlen(key), len, 2, strlen(ttl)};
    const char *zadd[] = {"ZADD", KEY_INDEX, now, instance};
    const char *trim[] = {"ZREMRANGEBYSCORE", KEY_INDEX, "-inf", old};
    const char *exp[] = {"PEXPIRE", KEY_INDEX, keep};
    struct tm_redis_cmd cmds[] = {
        {slot, 5, set, set_lens, NULL},
        {slot, 4, zadd, NULL, NULL},
        {slot, 4, trim, NULL, NULL},
        {slot, 3, exp, NULL, NULL},
    };
    return pipe_once(rb, cmds, 4, key);
}

int tm_redis_fleet_leave(struct tm_broker *b, const char *instance)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    unsigned slot = fleet_slot();
    char *key = tm_asprintf(KEY_DAEMON "%s", instance);
    const char *del[] = {"DEL", key};
    const char *zrem[] = {"ZREM", KEY_INDEX, instance};
    struct tm_redis_cmd cmds[] = {
        {slot, 2, del, NULL, NULL},
        {slot, 3, zrem, NULL, NULL},
    };
    return pipe_once(rb, cmds, 2, key);
}

int tm_redis_fleet_list(struct tm_broker *b, char ***out, size_t *n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    unsigned slot = fleet_slot();
    char eb[512], last[16];
    int dead = 0;
    *out = NULL;
    *n = 0;
    tm_snprintf(last, sizeof last, "%d", TM_FLEET_MAX - 1);
    const char *zr[] = {"ZRANGE", KEY_INDEX, "0", last};
    redisReply *names = tm_redis_link_run(rb, &rb->settle, slot, 4, zr, NULL,
                                          0, 0, eb, sizeof eb, &dead);
    if (names == NULL || names->type != REDIS_REPLY_ARRAY) {
        tm_broker_set_error(b, EIO, "fleet: ZRANGE: %s",
                            names == NULL ? eb : "not an array");
        freeReplyObject(names);
        return -1;
    }
    size_t k = names->elements;
    if (k == 0) {
        freeReplyObject(names);
        return 0;
    }
    const char **argv = tm_calloc(k + 1, sizeof *argv);
    size_t *lens = tm_calloc(k + 1, sizeof *lens);
    char **keys = tm_calloc(k, sizeof *keys);
    argv[0] = "MGET";
    lens[0] = 4;
    for (size_t i = 0; i < k; i++) {
        const redisReply *e = names->element[i];
        keys[i] = e->type == REDIS_REPLY_STRING
                      ? tm_asprintf(KEY_DAEMON "%.*s", (int)e->len, e->str)
                      : tm_strdup(KEY_DAEMON);
        argv[i + 1] = keys[i];
        lens[i + 1] = strlen(keys[i]);
    }
    freeReplyObject(names);
    /* an announcement over the bound is dropped by the reader (nil) */
    redisReply *vals = tm_redis_link_run(rb, &rb->settle, slot, (int)k + 1,
                                         argv, lens, TM_FLEET_ANNOUNCE_MAX,
                                         0, eb, sizeof eb, &dead);
    int rc = -1;
    if (vals == NULL || vals->type != REDIS_REPLY_ARRAY) {
        tm_broker_set_error(b, EIO, "fleet: MGET: %s",
                            vals == NULL ? eb : "not an array");
        goto out;
    }
    char **v = tm_calloc(vals->elements + 1, sizeof *v);
    size_t m = 0;
    for (size_t i = 0; i < vals->elements; i++) {
        const redisReply *e = vals->element[i];
        if (e->type == REDIS_REPLY_STRING && e->len <= TM_FLEET_ANNOUNCE_MAX)
            v[m++] = tm_strndup(e->str, e->len);
    }
    *out = v;
    *n = m;
    rc = 0;
out:
    freeReplyObject(vals);
    for (size_t i = 0; i < k; i++)
        tm_free(keys[i]);
    tm_free(keys);
    tm_free(argv);
    tm_free(lens);
    return rc;
}

/* struct strs keeps the argument strings of a pipeline being built. */
struct strs {
    char **v;
    size_t n, cap;
};

static char *strs_add(struct strs *s, char *owned)
{
    if (s->n == s->cap) {
        s->cap = s->cap > 0 ? 2 * s->cap : 64;
        s->v = tm_realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = owned;
    return owned;
}

static void strs_free(struct strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        tm_free(s->v[i]);
    tm_free(s->v);
}

/* struct cmdv is a pipeline being built: each command's argv in one
 * allocation of its own. */
struct cmdv {
    struct tm_redis_cmd *c;
    size_t n, cap;
};

static void cmdv_add(struct cmdv *v, unsigned slot, int argc,
                     const char *const *argv)
{
    if (v->n == v->cap) {
        v->cap = v->cap > 0 ? 2 * v->cap : 64;
        v->c = tm_realloc(v->c, v->cap * sizeof *v->c);
    }
    const char **a = tm_calloc((size_t)argc, sizeof *a);
    memcpy(a, argv, (size_t)argc * sizeof *a);
    v->c[v->n++] = (struct tm_redis_cmd){slot, argc, a, NULL, NULL};
}

static void cmdv_free(struct cmdv *v)
{
    for (size_t i = 0; i < v->n; i++)
        tm_free((void *)v->c[i].argv);
    tm_redis_cmds_free(v->c, v->n);
    tm_free(v->c);
}

/* bucket_seen says whether key b is among the first n of seen (and adds
 * it when not). */
static int bucket_seen(int64_t *seen, size_t *n, int64_t b)
{
    for (size_t i = 0; i < *n; i++)
        if (seen[i] == b)
            return 1;
    seen[(*n)++] = b;
    return 0;
}

int tm_redis_fleet_hist_flush(struct tm_broker *b,
                              const struct tm_fleet_count *c, size_t n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    unsigned slot = fleet_slot();
    struct strs s = {0};
    struct cmdv v = {0};
    /* the buckets touched, for their expiry: minutes and hours */
    int64_t *mins = tm_calloc(n + 1, sizeof *mins);
    int64_t *hours = tm_calloc(n + 1, sizeof *hours);
    size_t nmin = 0, nhour = 0;
    for (size_t i = 0; i < n; i++) {
        char *mk = strs_add(&s, tm_asprintf(KEY_MINUTE "%lld",
                                            (long long)c[i].minute));
        char *hk = strs_add(&s, tm_asprintf(KEY_HOUR "%lld",
                                            (long long)(c[i].minute / 60)));
        for (int k = 0; k < TM_HK_N; k++) {
            if (c[i].n[k] == 0)
                continue;
            char *by = strs_add(&s, tm_asprintf("%u", c[i].n[k]));
            char *tf = strs_add(&s, tm_asprintf("%c:%s", kind_field[k],
                                                c[i].task));
            char *all = strs_add(&s, tm_asprintf("%c", kind_field[k]));
            const char *a1[] = {"HINCRBY", mk, tf, by};
            const char *a2[] = {"HINCRBY", mk, all, by};
            const char *a3[] = {"HINCRBY", hk, tf, by};
            const char *a4[] = {"HINCRBY", hk, all, by};
            cmdv_add(&v, slot, 4, a1);
            cmdv_add(&v, slot, 4, a2);
            cmdv_add(&v, slot, 4, a3);
            cmdv_add(&v, slot, 4, a4);
        }
        if (!bucket_seen(mins, &nmin, c[i].minute)) {
            char *ms = strs_add(&s, tm_asprintf("%lld", MINUTE_KEEP_MS));
            const char *e[] = {"PEXPIRE", mk, ms};
            cmdv_add(&v, slot, 3, e);
        }
        if (!bucket_seen(hours, &nhour, c[i].minute / 60)) {
            char *ms = strs_add(&s, tm_asprintf("%lld", HOUR_KEEP_MS));
            const char *e[] = {"PEXPIRE", hk, ms};
            cmdv_add(&v, slot, 3, e);
        }
    }
    int rc = v.n > 0 ? pipe_run(rb, v.c, v.n) : 0;
    cmdv_free(&v);
    strs_free(&s);
    tm_free(mins);
    tm_free(hours);
    return rc;
}

int tm_redis_fleet_hist_read(struct tm_broker *b, const char *task,
                             int hourly, int64_t first, size_t n,
                             uint64_t (*out)[TM_HK_N])
{
    struct tm_redis *rb = (struct tm_redis *)b;
    unsigned slot = fleet_slot();
    struct strs s = {0};
    struct cmdv v = {0};
    const char *f[TM_HK_N];
    for (int k = 0; k < TM_HK_N; k++)
        f[k] = strs_add(&s, task != NULL
                                ? tm_asprintf("%c:%s", kind_field[k], task)
                                : tm_asprintf("%c", kind_field[k]));
    for (size_t i = 0; i < n; i++) {
        char *key = strs_add(&s, tm_asprintf("%s%lld",
                                             hourly ? KEY_HOUR : KEY_MINUTE,
                                             (long long)(first + (int64_t)i)));
        const char *a[] = {"HMGET", key, f[0], f[1], f[2], f[3]};
        cmdv_add(&v, slot, 2 + TM_HK_N, a);
    }
    int rc = n > 0 ? pipe_run(rb, v.c, v.n) : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const redisReply *r = v.c[i].reply;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != TM_HK_N)
            continue;
        for (int k = 0; k < TM_HK_N; k++) {
            const redisReply *e = r->element[k];
            if (e->type == REDIS_REPLY_STRING)
                out[i][k] += strtoull(e->str, NULL, 10);
        }
    }
    cmdv_free(&v);
    strs_free(&s);
    return rc;
}
