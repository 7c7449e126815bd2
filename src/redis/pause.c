/* pause.c - Redis pause state: one key per task, read by every lane that
 * reads the task, set and deleted by `taskmill pause|resume` and the admin
 * API.
 *
 * The key "<queue>.paused.<group>" exists while the task is paused (its
 * value is the epoch ms of the pause, for people). It is per group, like
 * the retry set: two tasks reading one stream in different groups are
 * paused apart. It lives in Redis, so a daemon started later, or
 * restarted, honours it from its first read.
 *
 * Every lane reads the keys of its tasks (one MGET per 256 tasks)
 * before its first read and then every TM_REDIS_PAUSE_POLL_MS, and no
 * blocking read of the lane lasts longer than that, so every daemon
 * stops reading a paused task within about two periods, whoever paused
 * it. The cost is one round trip per lane per period, whatever the
 * traffic, and an idle lane's read ending once a period. A daemon that
 * pauses a task itself (admin API) tells its lanes at once (pause_note).
 */
#include "redis/redis.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* A lane whose readable tasks are all paused looks at its poke this
 * often while it waits. */
#define TM_REDIS_PAUSE_NAP_MS 50

/* Keys per MGET of a pause read: 500 idle tasks cost 2 commands a
 * period, not 500. */
#define TM_REDIS_PAUSE_CHUNK 256

char *tm_redis_pause_key(const struct tm_cfg_task *t)
{
    size_t n = strlen(t->queue) + strlen(t->group) + sizeof ".paused.";
    char *k = tm_malloc(n);
    tm_snprintf(k, n, "%s.paused.%s", t->queue, t->group);
    return k;
}

/* set_paused records task rt's state as its lane read it, logging a
 * change. */
static void set_paused(struct tm_redis_task *rt, int paused)
{
    int was = atomic_exchange(&rt->paused, paused);
    if (was != paused)
        tm_log_write(TM_LOG_INFO, SRC, rt->cfg->name, NULL,
                     paused ? "paused: reading nothing from stream '%s' "
                              "until resumed"
                            : "resumed: reading stream '%s' again",
                     rt->cfg->queue);
}

/* read_chunk reads the state of tasks l->tasks[from, from + n) from one
 * MGET reply r (an array of n values, nil while not paused). */
static void read_chunk(struct tm_redis *rb, struct tm_redis_lane *l,
                       size_t from, size_t n, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n) {
        const struct tm_redis_task *rt = &rb->tasks[l->tasks[from]];
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "reading '%s': %s", rt->pause_key,
                     r->type == REDIS_REPLY_ERROR ? r->str
                                                  : "unexpected reply");
        return;
    }
    for (size_t i = 0; i < n; i++)
        set_paused(&rb->tasks[l->tasks[from + i]],
                   r->element[i]->type != REDIS_REPLY_NIL);
}

int tm_redis_pause_poll(struct tm_redis *rb, struct tm_redis_lane *l)
{
    int64_t now = tm_now_ms();
    if (now < atomic_load(&l->next_pause_ms))
        return 0;
    struct tm_redis_task *first = &rb->tasks[l->tasks[0]];
    const char *argv[1 + TM_REDIS_PAUSE_CHUNK];
    int rc = 0;
    /* one MGET per TM_REDIS_PAUSE_CHUNK tasks, pipelined: a lane's keys
     * share one slot in cluster mode (lanes are per slot there), so
     * the multi-key read is allowed in every mode */
    size_t sent = 0;
    argv[0] = "MGET";
    while (sent < l->ntasks) {
        size_t n = l->ntasks - sent;
        if (n > TM_REDIS_PAUSE_CHUNK)
            n = TM_REDIS_PAUSE_CHUNK;
        for (size_t i = 0; i < n; i++)
            argv[1 + i] = rb->tasks[l->tasks[sent + i]].pause_key;
        if (tm_rconn_append_argv(l->rc, (int)(1 + n), argv, NULL) != 0)
            break;
        sent += n;
    }
    /* every reply is read, so that the connection stays in step */
    for (size_t done = 0; done < sent;) {
        size_t n = sent - done;
        if (n > TM_REDIS_PAUSE_CHUNK)
            n = TM_REDIS_PAUSE_CHUNK;
        redisReply *r = NULL;
        if (tm_rconn_get_reply(l->rc, &r) != 0) {
            tm_redis_reply_error(l->rc, NULL, first->errstr,
                                 sizeof first->errstr);
            rc = -1;
            break;
        }
        read_chunk(rb, l, done, n, r);
        freeReplyObject(r);
        done += n;
    }
    if (rc == 0 && sent < l->ntasks) {
        tm_redis_reply_error(l->rc, NULL, first->errstr,
                             sizeof first->errstr);
        rc = -1;
    }
    /* after a failure the next look is at once, on the new connection */
    if (rc == 0)
        atomic_store(&l->next_pause_ms, now + TM_REDIS_PAUSE_POLL_MS);
    return rc;
}

void tm_redis_pause_wait(struct tm_redis_lane *l, int64_t until_ms)
{
    int64_t end = atomic_load(&l->next_pause_ms);
    if (until_ms < end)
        end = until_ms;
    while (!atomic_exchange(&l->poke, 0)) {
        int64_t left = end - tm_now_ms();
        if (left <= 0)
            break;
        if (left > TM_REDIS_PAUSE_NAP_MS)
            left = TM_REDIS_PAUSE_NAP_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = left * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int tm_redis_pause_set(struct tm_broker *b, const struct tm_cfg_task *t,
                       int paused)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256], at[24];
    int rc = -1, dead = 0;
    char *key = tm_redis_pause_key(t);
    tm_snprintf(at, sizeof at, "%lld", (long long)tm_wall_ms());
    const char *argv[] = {paused ? "SET" : "DEL", key, at};
    if (tm_redis_wc_ready(rb, eb, sizeof eb) != 0) {
        tm_broker_set_error(b, ECONNREFUSED, "%s", eb);
        goto out;
    }
    redisReply *r = tm_redis_command(rb->wc, paused ? 3 : 2, argv, NULL, eb,
                                     sizeof eb, &dead);
    if (r == NULL) {
        tm_broker_set_error(b, dead ? EIO : EINVAL, "%s %s: %s", argv[0],
                            key, eb);
        goto out;
    }
    freeReplyObject(r);
    rc = 0;
out:
    tm_free(key);
    return rc;
}

int tm_redis_paused(struct tm_broker *b, size_t ti)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    return ti < rb->ntasks ? atomic_load(&rb->tasks[ti].paused) : 0;
}

void tm_redis_pause_note(struct tm_broker *b, size_t ti, int paused)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    if (ti >= rb->ntasks)
        return;
    struct tm_redis_lane *l = rb->tasks[ti].lane;
    /* the lane reads the key again at once, and takes the new state
     * (paused) from there, like every other daemon */
    (void)paused;
    atomic_store(&l->next_pause_ms, 0);
    tm_redis_lane_poke(l);
}
