/* readahead.c - Redis intake's reads of new entries: XREADGROUP of a
 * lane's streams, one blocking read (or, on a polling lane, a read per
 * slot and a sleep), and the read ahead, sent before the reply before
 * it is taken apart, when that reply came back full and the tasks have
 * room for both (see struct tm_redis_lane). One reply is built in one
 * arena, each stream's part of it a batch. */
#include "redis/redis.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "redis/arena.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* read_batches makes a batch of each stream's part of reply r (built in
 * arena) of a read of the tasks ti[0 .. k), into out (at most nout);
 * the parts leave r (each batch owns its part). Returns the count. */
static size_t read_batches(struct tm_redis *rb, redisReply *r,
                           struct tm_rarena *arena, const size_t *ti,
                           size_t k, struct tm_batch **out, size_t nout)
{
    size_t nb = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0; /* nil: the block timed out */
    for (size_t e = 0; e < r->elements && nb < nout; e++) {
        redisReply *pair = r->element[e];
        if (pair->type != REDIS_REPLY_ARRAY || pair->elements != 2 ||
            pair->element[0]->type != REDIS_REPLY_STRING ||
            pair->element[1]->type != REDIS_REPLY_ARRAY)
            continue;
        size_t i = 0;
        while (i < k &&
               strcmp(rb->tasks[ti[i]].cfg->queue, pair->element[0]->str) != 0)
            i++;
        if (i == k)
            continue;
        /* the stream's part leaves the reply: its batch owns it */
        r->element[e] = NULL;
        struct tm_batch *bt = tm_redis_entries_batch(
            &rb->tasks[ti[i]], pair, arena, pair->element[1], ti[i]);
        if (bt != NULL)
            out[nb++] = bt;
    }
    return nb;
}

/* stream_got is how many entries reply r (of XREADGROUP) brought for
 * stream queue. */
static size_t stream_got(const redisReply *r, const char *queue)
{
    for (size_t e = 0; e < r->elements; e++) {
        const redisReply *pair = r->element[e];
        if (pair != NULL && pair->type == REDIS_REPLY_ARRAY &&
            pair->elements == 2 &&
            pair->element[0]->type == REDIS_REPLY_STRING &&
            pair->element[1]->type == REDIS_REPLY_ARRAY &&
            strcmp(pair->element[0]->str, queue) == 0)
            return pair->element[1]->elements;
    }
    return 0;
}

/* ahead_half is the most entries of task rt one read asks for on a lane
 * that reads ahead: half its prefetch, so that two reads are under way
 * while the pool has room for both (at least TM_REDIS_AHEAD_MIN). */
static size_t ahead_half(const struct tm_redis_task *rt)
{
    size_t half = ((size_t)rt->cfg->prefetch + 1) / 2;
    return half < TM_REDIS_AHEAD_MIN ? TM_REDIS_AHEAD_MIN : half;
}

/* ahead_least is the fewest entries of task rt a read ahead asks for: a
 * quarter of ahead_half, at least TM_REDIS_AHEAD_MIN (a small read costs
 * Redis and the daemon nearly what a full one does). */
static size_t ahead_least(const struct tm_redis_task *rt)
{
    size_t q = ahead_half(rt) / 4;
    return q < TM_REDIS_AHEAD_MIN ? TM_REDIS_AHEAD_MIN : q;
}

/* ahead_count is the COUNT of a read that may go ahead after reply r, a
 * read of count entries of the tasks ti[0 .. k) whose rooms were room[0
 * .. k) before it; 0 when none may go now (see struct tm_redis_lane).
 * Each task's room left after r's entries bounds it, so that what is
 * read, queued and in flight stays within the task's prefetch; and
 * ahead_half; below ahead_least, none goes. */
static size_t ahead_count(struct tm_redis *rb, struct tm_redis_lane *l,
                          const redisReply *r, const size_t *ti,
                          const size_t *room, size_t k, size_t count)
{
    if (!l->ahead_ok || r->type != REDIS_REPLY_ARRAY ||
        atomic_load(&l->stopping) || atomic_load(&l->poke))
        return 0;
    int64_t now = tm_now_ms();
    if (now >= l->next_peek_ms || now >= atomic_load(&l->next_pause_ms) ||
        (rb->cluster && atomic_load(&rb->map_stale)))
        return 0;
    size_t n = TM_REDIS_ACK_CHUNK;
    int full = 0;
    for (size_t j = 0; j < k; j++) {
        struct tm_redis_task *rt = &rb->tasks[ti[j]];
        if (!rt->history_done || atomic_load(&rt->paused) ||
            tm_redis_next_look(rt) <= now)
            return 0;
        size_t got = stream_got(r, rt->cfg->queue);
        if (got >= count)
            full = 1;
        if (got >= room[j])
            return 0;
        size_t left = room[j] - got, half = ahead_half(rt);
        if (left > half)
            left = half;
        if (left < ahead_least(rt))
            return 0;
        if (left < n)
            n = left;
    }
    return full ? n : 0;
}

/* xread_argv fills argv with XREADGROUP of new entries of the tasks ti[0
 * .. k) of lane l, COUNT cnt, BLOCK block (NULL: none); returns argc. */
static size_t xread_argv(const struct tm_redis *rb,
                         const struct tm_redis_lane *l, const char **argv,
                         const char *cnt, const char *block, const size_t *ti,
                         size_t k)
{
    size_t argc = 0;
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = l->group;
    argv[argc++] = rb->consumer;
    argv[argc++] = "COUNT";
    argv[argc++] = cnt;
    if (block != NULL) {
        argv[argc++] = "BLOCK";
        argv[argc++] = block;
    }
    argv[argc++] = "STREAMS";
    /* the k streams, then k times ">" */
    for (size_t i = 0; i < k; i++) {
        argv[argc + i] = rb->tasks[ti[i]].cfg->queue;
        argv[argc + k + i] = ">";
    }
    return argc + 2 * k;
}

/* send_ahead sends the read ahead of count entries of the tasks ti[0 ..
 * k) (no BLOCK) on the lane's connection, without waiting for its
 * reply. When it cannot be sent, nothing goes ahead: a connection
 * error shows at its next use. */
static void send_ahead(struct tm_redis *rb, struct tm_redis_lane *l,
                       const size_t *ti, size_t k, size_t count)
{
    assert(!l->ahead && k > 0 && k <= l->ntasks);
    char eb[256];
    size_t ni = tm_redis_slot_node(rb, rb->tasks[ti[0]].slot, eb, sizeof eb);
    if (ni >= TM_REDIS_MAX_NODES || l->link.c[ni] == NULL)
        return;
    struct tm_rconn *c = l->link.c[ni];
    char cnt[24];
    tm_snprintf(cnt, sizeof cnt, "%zu", count);
    size_t argc = xread_argv(rb, l, l->ahead_argv, cnt, NULL, ti, k);
    if (tm_rconn_append_argv(c, (int)argc, l->ahead_argv, NULL) != 0 ||
        tm_rconn_send(c) != 0)
        return;
    l->ahead = 1;
    l->ahead_node = ni;
    l->ahead_gen = l->link.gen;
    l->ahead_count = count;
    l->ahead_k = k;
    memcpy(l->ahead_ti, ti, k * sizeof *ti);
}

/* tm_redis_read_new reads new entries of the tasks l->argti[from .. from + k),
 * all of one lane key (one slot in a cluster), at most the least of
 * their rooms each (and of ahead_half on a lane that reads ahead),
 * waiting up to block_ms for the first one (< 0: not at all). Each
 * stream's part of the reply becomes one batch. When the reply came
 * back full, the next read may go ahead before its entries are taken
 * apart. */
int tm_redis_read_new(struct tm_redis *rb, struct tm_redis_lane *l,
                      size_t from, size_t k, int64_t block_ms,
                      struct tm_batch **out, size_t nout)
{
    char cnt[24], block[24];
    size_t count = TM_REDIS_ACK_CHUNK;
    for (size_t i = 0; i < k; i++)
        if (l->argmax[from + i] < count)
            count = l->argmax[from + i];
    if (l->ahead_ok)
        for (size_t i = 0; i < k; i++) {
            size_t half = ahead_half(&rb->tasks[l->argti[from + i]]);
            if (count > half)
                count = half;
        }
    tm_snprintf(cnt, sizeof cnt, "%zu", count);
    tm_snprintf(block, sizeof block, "%lld", (long long)block_ms);
    const char **argv = l->argv;
    size_t argc = xread_argv(rb, l, argv, cnt, block_ms >= 0 ? block : NULL,
                             &l->argti[from], k);
    struct tm_redis_task *first = &rb->tasks[l->argti[from]];
    int dead = 0;
    /* the reply is built in one arena: each stream's batch holds a
     * reference to it, the last one settled frees it */
    struct tm_rarena *arena = tm_rarena_new();
    redisReply *r = tm_redis_intake_command(first, (int)argc, argv, arena,
                                            block_ms >= 0
                                       ? block_ms + TM_REDIS_BLOCK_SLACK_MS
                                       : 0,
                                            &dead);
    if (r == NULL) {
        tm_rarena_unref(arena);
        if (dead) {
            tm_redis_intake_failed(rb, first, "XREADGROUP");
            return -1;
        }
        if (tm_redis_group_lost(first->errstr)) {
            /* of any stream of the read, not necessarily first's */
            tm_redis_regroup(rb, l, first->errstr, &l->argti[from], k);
            return 0;
        }
        return tm_redis_read_failed(rb, first, "XREADGROUP");
    }
    size_t next = ahead_count(rb, l, r, &l->argti[from], &l->argroom[from],
                              k, count);
    if (next > 0)
        send_ahead(rb, l, &l->argti[from], k, next);
    size_t nb = read_batches(rb, r, arena, &l->argti[from], k, out, nout);
    tm_rarena_reply_free(r, arena);
    tm_rarena_unref(arena);
    if (nb == 0)
        tm_rarena_trim(); /* idle: the blocks kept for busy reads go */
    return (int)nb;
}

/* tm_redis_take_ahead reads the reply of the lane's read ahead: its entries
 * become batches in out (their count returned), and when more may come
 * at once, the next read goes ahead first. room is this fetch's. A
 * reply that brought nothing, or an error (a redirect, a group gone),
 * leaves the fetch to its usual reads (0); -1: the connection was lost
 * (its entries are pending here, as those of any read lost). */
int tm_redis_take_ahead(struct tm_redis *rb, struct tm_redis_lane *l,
                        const size_t *room, struct tm_batch **out,
                        size_t nout)
{
    assert(l->ahead);
    l->ahead = 0;
    size_t k = l->ahead_k;
    struct tm_redis_task *first = &rb->tasks[l->ahead_ti[0]];
    struct tm_rconn *c = l->link.c[l->ahead_node];
    /* nothing else uses the connection meanwhile, so it is still the
     * one the read went on */
    assert(c != NULL && l->link.gen == l->ahead_gen);
    struct tm_rarena *arena = tm_rarena_new();
    redisReply *r = NULL;
    if (tm_rconn_get_reply_in(c, first->cfg->max_payload, arena, &r) != 0) {
        tm_rarena_unref(arena);
        tm_redis_reply_error(c, NULL, first->errstr, sizeof first->errstr);
        tm_redis_intake_failed(rb, first, "XREADGROUP (read ahead)");
        return -1;
    }
    if (atomic_load(&l->stopping))
        tm_log_write(TM_LOG_DEBUG, SRC, first->cfg->name, NULL,
                     "a read ahead was in flight at the stop: taken in");
    for (size_t j = 0; j < k; j++) {
        l->argti[j] = l->ahead_ti[j];
        l->argroom[j] = room[l->ahead_ti[j]];
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (tm_redis_group_lost(r->str))
            tm_redis_regroup(rb, l, r->str, l->argti, k);
        tm_rarena_reply_free(r, arena);
        tm_rarena_unref(arena);
        return 0;
    }
    size_t next = ahead_count(rb, l, r, l->argti, l->argroom, k,
                              l->ahead_count);
    if (next > 0)
        send_ahead(rb, l, l->argti, k, next);
    size_t nb = read_batches(rb, r, arena, l->argti, k, out, nout);
    tm_rarena_reply_free(r, arena);
    tm_rarena_unref(arena);
    return (int)nb;
}

void tm_redis_ahead_end(struct tm_redis *rb, struct tm_redis_lane *l)
{
    if (!l->ahead)
        return;
    l->ahead = 0;
    struct tm_rconn *c = l->link.c[l->ahead_node];
    if (c == NULL || l->link.gen != l->ahead_gen)
        return;
    redisReply *r = NULL;
    if (tm_rconn_get_reply_capped(
            c, rb->tasks[l->ahead_ti[0]].cfg->max_payload, &r) == 0)
        freeReplyObject(r);
}

/* tm_redis_poll_new reads new entries of the k selected tasks of a polling
 * lane, one non-blocking read per lane key, then, when none came, sleeps until
 * until at the latest, or less while idle (see struct tm_redis_lane), or
 * a poke. */
int tm_redis_poll_new(struct tm_redis *rb, struct tm_redis_lane *l, size_t k,
                      int64_t until, struct tm_batch **out, size_t nout)
{
    int nb = 0;
    size_t from = 0;
    while (from < k && (size_t)nb < nout) {
        size_t n = 1;
        unsigned key = rb->tasks[l->argti[from]].lane_key;
        while (from + n < k && rb->tasks[l->argti[from + n]].lane_key == key)
            n++;
        int got =
            tm_redis_read_new(rb, l, from, n, -1, out + nb, nout - (size_t)nb);
        if (got < 0)
            return nb > 0 ? nb : -1;
        nb += got;
        from += n;
    }
    if (nb > 0) {
        l->idle_ms = 0;
        return nb;
    }
    l->idle_ms = l->idle_ms <= 0 ? 10
                 : l->idle_ms * 2 < TM_REDIS_POLL_MAX_MS ? l->idle_ms * 2
                                                        : TM_REDIS_POLL_MAX_MS;
    int64_t end = tm_now_ms() + l->idle_ms;
    if (until < end)
        end = until;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t left = end - tm_now_ms();
    if (left <= 0)
        return 0;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    /* a poke sets poke, then signals under mu: checked under mu here, it
     * cannot fall between the check and the wait */
    pthread_mutex_lock(&l->mu);
    while (!atomic_load(&l->poke) &&
           pthread_cond_timedwait(&l->cv, &l->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&l->mu);
    return 0;
}
