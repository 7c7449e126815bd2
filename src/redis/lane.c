/* lane.c - Redis intake lanes: which tasks each lane reads, and pokes
 * that end a lane's blocking read early. */
#include "redis/redis.h"

#include <assert.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* tm_redis_claim_period is how often a task's entries are checked: a
 * quarter of claim_idle, between 50 ms and 5 s. */
int64_t tm_redis_claim_period(const struct tm_cfg_task *t)
{
    int64_t p = t->claim_idle_ms / 4;
    return p < 50 ? 50 : p > 5000 ? 5000 : p;
}

/* reads_queue says whether lane l reads queue already. */
static int reads_queue(const struct tm_redis *rb,
                       const struct tm_redis_lane *l, const char *queue)
{
    for (size_t j = 0; j < l->ntasks; j++)
        if (strcmp(rb->tasks[l->tasks[j]].cfg->queue, queue) == 0)
            return 1;
    return 0;
}

/* lane_for finds the lane for task rt: a blocking lane of its group and
 * lane key that does not read its queue yet; in a cluster whose group
 * has its TM_REDIS_CLUSTER_LANES blocking lanes already, the group's
 * polling lane. NULL when a new lane is needed (*poll: a polling one). */
static struct tm_redis_lane *lane_for(struct tm_redis *rb,
                                      const struct tm_redis_task *rt,
                                      int *poll)
{
    const char *group = rt->cfg->group, *queue = rt->cfg->queue;
    size_t blocking = 0;
    struct tm_redis_lane *polling = NULL;
    *poll = 0;
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        if (strcmp(l->group, group) != 0)
            continue;
        if (l->poll) {
            polling = l;
            continue;
        }
        blocking++;
        if (l->key == rt->lane_key && !reads_queue(rb, l, queue))
            return l;
    }
    if (!rb->cluster || blocking < TM_REDIS_CLUSTER_LANES)
        return NULL;
    /* a queue read twice in one group gets a blocking lane of its own */
    if (polling != NULL && reads_queue(rb, polling, queue))
        return NULL;
    *poll = polling == NULL;
    return polling;
}

/* order_by_key fills rb->by_key: every task index, by lane key (a
 * slot in a cluster), stable (insertion sort, once at start). */
static void order_by_key(struct tm_redis *rb)
{
    rb->by_key = tm_calloc(rb->ntasks ? rb->ntasks : 1, sizeof *rb->by_key);
    for (size_t i = 0; i < rb->ntasks; i++) {
        size_t j = i;
        while (j > 0 &&
               rb->tasks[rb->by_key[j - 1]].lane_key > rb->tasks[i].lane_key) {
            rb->by_key[j] = rb->by_key[j - 1];
            j--;
        }
        rb->by_key[j] = i;
    }
}

/* sort_by_key orders a polling lane's tasks as rb->by_key has them, so
 * that the tasks of one slot are next to each other. */
static void sort_by_key(const struct tm_redis *rb, struct tm_redis_lane *l)
{
    size_t n = 0;
    for (size_t k = 0; k < rb->ntasks; k++)
        if (rb->tasks[rb->by_key[k]].lane == l)
            l->tasks[n++] = rb->by_key[k];
    assert(n == l->ntasks);
}

void tm_redis_lanes_init(struct tm_redis *rb)
{
    /* at most one lane per task; the array never moves once filled */
    order_by_key(rb);
    rb->lanes = tm_calloc(rb->ntasks ? rb->ntasks : 1, sizeof *rb->lanes);
    rb->nlanes = 0;
    for (size_t i = 0; i < rb->ntasks; i++) {
        struct tm_redis_task *rt = &rb->tasks[i];
        int poll;
        struct tm_redis_lane *l = lane_for(rb, rt, &poll);
        if (l == NULL) {
            l = &rb->lanes[rb->nlanes++];
            l->rb = rb;
            l->group = rt->cfg->group;
            l->poll = poll;
            l->key = rt->lane_key;
            l->tasks = tm_calloc(rb->ntasks, sizeof *l->tasks);
            tm_redis_link_init(&l->link, TM_REDIS_COMMAND_TIMEOUT_MS);
            atomic_store(&l->block_node, -1);
            pthread_mutex_init(&l->mu, NULL);
            pthread_condattr_t ca;
            pthread_condattr_init(&ca);
            pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
            pthread_cond_init(&l->cv, &ca);
            pthread_condattr_destroy(&ca);
            atomic_store(&l->block_end_ms, LLONG_MAX);
        }
        l->tasks[l->ntasks++] = i;
        rt->lane = l;
        /* not made sure of on any connection yet (link.gen starts at 0
         * and only grows) */
        rt->group_gen = (unsigned)-1;
    }
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        if (l->poll)
            sort_by_key(rb, l);
        l->argv = tm_calloc(9 + 2 * l->ntasks, sizeof *l->argv);
        l->argti = tm_calloc(l->ntasks, sizeof *l->argti);
        l->argmax = tm_calloc(l->ntasks, sizeof *l->argmax);
        l->argroom = tm_calloc(l->ntasks, sizeof *l->argroom);
        l->ahead_ti = tm_calloc(l->ntasks, sizeof *l->ahead_ti);
        l->ahead_argv = tm_calloc(7 + 2 * l->ntasks, sizeof *l->ahead_argv);
        /* rate_limit and dedup_ttl use the connection between two
         * fetches (tokens before, look-ups after): no read ahead */
        l->ahead_ok = !l->poll;
        for (size_t j = 0; j < l->ntasks; j++) {
            const struct tm_cfg_task *t = rb->tasks[l->tasks[j]].cfg;
            if (t->rate_count > 0 || t->dedup_ttl_ms > 0)
                l->ahead_ok = 0;
        }
        l->peek_argv = tm_calloc(6 + 3 * l->ntasks, sizeof *l->peek_argv);
        l->peek_num = tm_calloc(l->ntasks, sizeof *l->peek_num);
        /* each task's pending list is looked at once per claim
         * period (the shortest of the lane) while a peek covers every
         * task, else once per claim_idle, a peek covering
         * TM_REDIS_PEEK_TASKS of them: an idle lane's peeks cost about
         * ntasks / claim_idle commands a second */
        int64_t period = INT64_MAX, idle = INT64_MAX;
        for (size_t j = 0; j < l->ntasks; j++) {
            const struct tm_cfg_task *t = rb->tasks[l->tasks[j]].cfg;
            int64_t p = tm_redis_claim_period(t);
            if (p < period)
                period = p;
            if (t->claim_idle_ms < idle)
                idle = t->claim_idle_ms;
        }
        if (l->ntasks > TM_REDIS_PEEK_TASKS) {
            period = idle * TM_REDIS_PEEK_TASKS / (int64_t)l->ntasks;
            if (period < 50)
                period = 50;
        }
        l->peek_period_ms = period;
    }
}

void tm_redis_lanes_free(struct tm_redis *rb)
{
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        tm_redis_link_close(rb, &l->link);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        tm_free(l->tasks);
        tm_free(l->argv);
        tm_free(l->argti);
        tm_free(l->argmax);
        tm_free(l->argroom);
        tm_free(l->ahead_ti);
        tm_free(l->ahead_argv);
        tm_free(l->peek_argv);
        tm_free(l->peek_num);
    }
    tm_free(rb->lanes);
    rb->lanes = NULL;
    tm_free(rb->by_key);
    rb->by_key = NULL;
    rb->nlanes = 0;
}

size_t tm_redis_nlanes(struct tm_broker *b)
{
    return ((struct tm_redis *)b)->nlanes;
}

size_t tm_redis_lane_of(struct tm_broker *b, size_t ti)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(ti < rb->ntasks);
    return (size_t)(rb->tasks[ti].lane - rb->lanes);
}

/* unblock ends the lane's blocking read (CLIENT UNBLOCK, as if its BLOCK
 * time ran out) on the adapter's wake connection, opened on first use
 * and kept. A read that has not reached the server yet is not found:
 * then it ends by its BLOCK time, which is bounded for this reason (see
 * struct tm_redis_lane). */
static void unblock(struct tm_redis_lane *l)
{
    struct tm_redis *rb = l->rb;
    char eb[256];
    if (l->poll) {
        /* a polling lane sleeps on its condition variable */
        pthread_mutex_lock(&l->mu);
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        return;
    }
    long long id = atomic_load(&l->client_id);
    int ni = atomic_load(&l->block_node);
    if (id <= 0 || ni < 0)
        return;
    pthread_mutex_lock(&rb->wake_mu);
    struct tm_rconn *c = tm_redis_link_get(rb, &rb->wake, (size_t)ni, eb,
                                           sizeof eb);
    if (c != NULL) {
        redisReply *r = tm_rconn_command(c, "CLIENT UNBLOCK %lld", id);
        if (r != NULL)
            freeReplyObject(r);
        else
            tm_redis_link_drop(rb, &rb->wake, (size_t)ni);
    }
    pthread_mutex_unlock(&rb->wake_mu);
}

void tm_redis_lane_poke(struct tm_redis_lane *l)
{
    if (atomic_exchange(&l->poke, 1) == 0 && atomic_load(&l->in_block))
        unblock(l);
}

void tm_redis_room_made(struct tm_broker *b, size_t ti)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(ti < rb->ntasks);
    tm_redis_lane_poke(rb->tasks[ti].lane);
}

void tm_redis_wake(struct tm_broker *b)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    /* at a stop every blocked read is ended, whether or not a poke is
     * pending already: a poke whose unblock came too early would leave
     * the read blocked, and reading, until its BLOCK time */
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        atomic_store(&l->stopping, 1);
        atomic_store(&l->poke, 1);
        if (atomic_load(&l->in_block))
            unblock(l);
    }
}
