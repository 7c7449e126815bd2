/* lane.c - Redis intake lanes: which tasks each lane reads, and pokes
 * that end a lane's blocking read early. */
#include "redis/redis.h"

#include <assert.h>
#include <limits.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* lane_for finds the lane of a group that does not read queue yet; NULL
 * when there is none. */
static struct tm_redis_lane *lane_for(struct tm_redis *rb, const char *group,
                                      const char *queue)
{
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        if (strcmp(l->group, group) != 0)
            continue;
        size_t j = 0;
        while (j < l->ntasks &&
               strcmp(rb->tasks[l->tasks[j]].cfg->queue, queue) != 0)
            j++;
        if (j == l->ntasks)
            return l;
    }
    return NULL;
}

void tm_redis_lanes_init(struct tm_redis *rb)
{
    /* at most one lane per task; the array never moves once filled */
    rb->lanes = tm_calloc(rb->ntasks ? rb->ntasks : 1, sizeof *rb->lanes);
    rb->nlanes = 0;
    for (size_t i = 0; i < rb->ntasks; i++) {
        struct tm_redis_task *rt = &rb->tasks[i];
        struct tm_redis_lane *l = lane_for(rb, rt->cfg->group,
                                           rt->cfg->queue);
        if (l == NULL) {
            l = &rb->lanes[rb->nlanes++];
            l->rb = rb;
            l->group = rt->cfg->group;
            l->tasks = tm_calloc(rb->ntasks, sizeof *l->tasks);
            l->conn_gen = 1;
            atomic_store(&l->block_end_ms, LLONG_MAX);
        }
        l->tasks[l->ntasks++] = i;
        rt->lane = l;
        /* not made sure of on any connection yet */
        rt->group_gen = 0;
    }
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        l->argv = tm_calloc(9 + 2 * l->ntasks, sizeof *l->argv);
        l->argti = tm_calloc(l->ntasks, sizeof *l->argti);
        l->peek_argv = tm_calloc(4 + 3 * l->ntasks, sizeof *l->peek_argv);
        l->peek_num = tm_calloc(l->ntasks, sizeof *l->peek_num);
        l->peek_period_ms = INT64_MAX;
        for (size_t j = 0; j < l->ntasks; j++) {
            int64_t p = tm_redis_claim_period(rb->tasks[l->tasks[j]].cfg);
            if (p < l->peek_period_ms)
                l->peek_period_ms = p;
        }
    }
}

void tm_redis_lanes_free(struct tm_redis *rb)
{
    for (size_t i = 0; i < rb->nlanes; i++) {
        struct tm_redis_lane *l = &rb->lanes[i];
        tm_rconn_close(l->rc);
        tm_free(l->tasks);
        tm_free(l->argv);
        tm_free(l->argti);
        tm_free(l->peek_argv);
        tm_free(l->peek_num);
    }
    tm_free(rb->lanes);
    rb->lanes = NULL;
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
    long long id = atomic_load(&l->client_id);
    if (id <= 0)
        return;
    pthread_mutex_lock(&rb->wake_mu);
    if (rb->wake_c == NULL)
        rb->wake_c = tm_redis_connect(rb, 1000, eb, sizeof eb);
    if (rb->wake_c != NULL) {
        redisReply *r = tm_rconn_command(rb->wake_c, "CLIENT UNBLOCK %lld",
                                         id);
        if (r != NULL) {
            freeReplyObject(r);
        } else {
            tm_rconn_close(rb->wake_c);
            rb->wake_c = NULL;
        }
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
        atomic_store(&l->poke, 1);
        if (atomic_load(&l->in_block))
            unblock(l);
    }
}
