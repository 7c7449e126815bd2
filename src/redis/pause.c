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
 * Every lane reads the keys of its tasks (one MGET per 1024 tasks of one
 * slot, all pipelined) before its first read and then every
 * TM_REDIS_PAUSE_POLL_MS, and no blocking read of the lane lasts longer
 * than that, so every daemon stops reading a paused task within about two
 * periods, whoever paused it. The cost is one round trip per lane and
 * node per period, whatever the traffic, and an idle lane's read ending
 * once a period. A daemon that pauses a task itself (admin API) tells its
 * lanes at once (pause_note).
 */
#include "redis/redis.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* A lane whose readable tasks are all paused looks at its poke this
 * often while it waits. */
#define TM_REDIS_PAUSE_NAP_MS 50

/* Keys per MGET of a pause read: 500 idle tasks cost 1 command a
 * period, not 500. */
#define TM_REDIS_PAUSE_CHUNK 1024

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
    /* one MGET per TM_REDIS_PAUSE_CHUNK tasks of one lane key, pipelined:
     * a lane's tasks are ordered by lane key, and the tasks of one key
     * share a slot in cluster mode (the key is the slot there, 0
     * elsewhere), so each multi-key read stays in one slot. A blocking
     * lane has one key; the polling lane one per slot it reads. */
    size_t ncmd = 0;
    for (size_t i = 0; i < l->ntasks; i++)
        if (i == 0 ||
            rb->tasks[l->tasks[i]].lane_key !=
                rb->tasks[l->tasks[i - 1]].lane_key ||
            i % TM_REDIS_PAUSE_CHUNK == 0)
            ncmd++;
    struct tm_redis_cmd *cmds = tm_calloc(ncmd, sizeof *cmds);
    size_t *from = tm_calloc(ncmd, sizeof *from);
    const char **argv = tm_calloc(l->ntasks + ncmd, sizeof *argv);
    size_t k = 0, a = 0;
    for (size_t i = 0; i < l->ntasks; i++) {
        const struct tm_redis_task *rt = &rb->tasks[l->tasks[i]];
        if (i == 0 || rt->lane_key != rb->tasks[l->tasks[i - 1]].lane_key ||
            i % TM_REDIS_PAUSE_CHUNK == 0) {
            assert(k < ncmd);
            from[k] = i;
            cmds[k].slot = rt->slot;
            cmds[k].argv = &argv[a];
            cmds[k].argc = 1;
            argv[a++] = "MGET";
            k++;
        }
        argv[a++] = rt->pause_key;
        cmds[k - 1].argc++;
    }
    assert(k == ncmd);
    int rc = tm_redis_link_pipe(rb, &l->link, cmds, ncmd, first->errstr,
                                sizeof first->errstr);
    for (size_t c = 0; c < ncmd; c++)
        if (cmds[c].reply != NULL)
            read_chunk(rb, l, from[c], (size_t)cmds[c].argc - 1,
                       cmds[c].reply);
    tm_redis_cmds_free(cmds, ncmd);
    tm_free(argv);
    tm_free(from);
    tm_free(cmds);
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
    char at[24];
    char *key = tm_redis_pause_key(t);
    tm_snprintf(at, sizeof at, "%lld", (long long)tm_wall_ms());
    const char *argv[] = {paused ? "SET" : "DEL", key, at};
    redisReply *r = tm_redis_cli_command(rb, paused ? 3 : 2, argv, NULL, 1,
                                         0);
    if (r != NULL)
        freeReplyObject(r);
    tm_free(key);
    return r != NULL ? 0 : -1;
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
