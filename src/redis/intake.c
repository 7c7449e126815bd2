/* intake.c - Redis intake: a lane's fetch, in its order (pause state,
 * peek, then for each task with room the entries it is owed, then new
 * entries of all of them in one read), the lane's connection and its
 * tasks' groups. The top of the intake: the owed entries are read by
 * scripts (claim.c), the new ones by XREADGROUP with its read ahead
 * (readahead.c), the pause state by pause.c; what every read shares (a
 * reply made a batch, a failed read) is read.c's, below them all.
 *
 * No read ever holds a body over max_payload. Every reply is read through
 * tm_rconn_get_reply_capped, which drops a bulk string over max_payload
 * as it comes off the socket and leaves its reason in its place (hiredis
 * reads a whole reply, and RESP gives an entry's size only in the header
 * of its bulk string: the filter acts there). The claim scripts (due
 * retries, reclaim, history) strip such bodies inside Redis already, so
 * they do not even cross the connection, and stop their reply at
 * TM_REDIS_READ_BYTES. New entries come from plain XREADGROUP (fast; one
 * reply holds at most COUNT entries of max_payload each, the bound the
 * messages queued in the daemon have anyway). An oversized entry becomes
 * an invalid message with its reason, dead-lettered at once; the
 * dead-letter script copies its body inside Redis. */
#include "redis/redis.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* lane_connect opens the lane's connection to the node of slot (the
 * one its blocking read goes to) and learns its CLIENT ID (a poke
 * unblocks it by that). */
static int lane_connect(struct tm_redis *rb, struct tm_redis_lane *l,
                        unsigned slot)
{
    size_t ni = tm_redis_slot_node(rb, slot, l->errstr, sizeof l->errstr);
    struct tm_rconn *c = ni == TM_REDIS_NO_NODE
                             ? NULL
                             : tm_redis_link_get(rb, &l->link, ni, l->errstr,
                                                 sizeof l->errstr);
    if (c == NULL) {
        if (l->was_up || atomic_load(&rb->base.up))
            tm_log_warn(SRC, "intake of group '%s': %s; reconnecting",
                        l->group, l->errstr);
        l->was_up = 0;
        tm_redis_mark_down(rb);
        return -1;
    }
    if (l->link.client_id[ni] == 0) {
        redisReply *id = tm_rconn_command(c, "CLIENT ID");
        l->link.client_id[ni] = id != NULL &&
                                        id->type == REDIS_REPLY_INTEGER
                                    ? id->integer
                                    : -1;
        if (id != NULL)
            freeReplyObject(id);
    }
    atomic_store(&l->block_node, (int)ni);
    atomic_store(&l->client_id, l->link.client_id[ni]);
    return 0;
}

/* task_ready makes sure of the task's group on this connection. */
static int task_ready(struct tm_redis *rb, struct tm_redis_task *rt)
{
    struct tm_redis_lane *l = rt->lane;
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    if (rt->group_gen == l->link.gen)
        return 0;
    int made = tm_redis_ensure_group(rb, &l->link, rt, rt->errstr,
                                     sizeof rt->errstr, &dead);
    if (made < 0) {
        tm_redis_intake_failed(rb, rt, "XGROUP CREATE");
        return -1;
    }
    if (made == 1 && rt->group_seen)
        tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                     "group '%s' was gone from '%s' (the stream or its "
                     "group was deleted); created it again, at the "
                     "stream's start", t->group, t->queue);
    rt->group_seen = 1;
    rt->group_gen = l->link.gen;
    if (!rt->was_up)
        tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                     "consuming stream '%s' as %s/%s", t->queue, t->group,
                     rb->consumer);
    rt->was_up = 1;
    return 0;
}

/* fetch_lane reads what lane li may take now (see tm_redis_fetch_lane). */
static int fetch_lane(struct tm_broker *b, size_t li, const size_t *room,
                      int timeout_ms, struct tm_batch **out, size_t nout)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(li < rb->nlanes);
    struct tm_redis_lane *l = &rb->lanes[li];
    size_t nb = 0;
    /* a first look after a (re)connect returns without blocking, so that
     * the caller learns at once that the lane's tasks are subscribed */
    int fresh = !l->was_up;
    for (size_t i = 0; i < l->ntasks; i++)
        tm_redis_collect(&rb->tasks[l->tasks[i]]);
    /* a read sent ahead is the first reply on the connection; at a stop
     * it is taken in like any other (its entries run at a reload, or
     * are left with the other unstarted ones at a shutdown) */
    if (l->ahead) {
        int n = tm_redis_take_ahead(rb, l, room, out, nout);
        if (n != 0 || l->ahead)
            return n;
    }
    /* from here on the connection carries one command at a time */
    assert(!l->ahead);
    /* at a stop nothing new is read (the caller's last fetch after
     * wake() only takes in what went ahead), nor with no room at all */
    int any_room = 0;
    for (size_t i = 0; i < l->ntasks && !any_room; i++)
        any_room = room[l->tasks[i]] > 0;
    if (atomic_load(&l->stopping) || !any_room)
        return 0;
    /* a blocking lane reads one slot (or the one server): its node's
     * connection, and the id a poke unblocks it by */
    if (!l->poll && lane_connect(rb, l, rb->tasks[l->tasks[0]].slot) != 0)
        return -1;
    /* the pause state first: nothing of a paused task is read */
    if (tm_redis_pause_poll(rb, l) != 0) {
        tm_redis_intake_failed(rb, &rb->tasks[l->tasks[0]],
                               "pause state read");
        return -1;
    }
    if (tm_now_ms() >= l->next_peek_ms) {
        for (size_t i = 0; i < l->ntasks; i++)
            if (task_ready(rb, &rb->tasks[l->tasks[i]]) != 0)
                return -1;
        if (tm_redis_peek(rb, l) != 0)
            return -1;
        l->peeked = 1;
        l->next_peek_ms = tm_now_ms() + l->peek_period_ms;
    }

    /* steps 1-3 for each task with room; their batches first */
    size_t k = 0;
    int waiting = 0, paused = 0;
    int64_t now = tm_now_ms();
    int64_t until = now + (timeout_ms > 0 ? timeout_ms : 1);
    for (size_t i = 0; i < l->ntasks && nb < nout; i++) {
        size_t ti = l->tasks[i];
        struct tm_redis_task *rt = &rb->tasks[ti];
        size_t max = room[ti] < TM_REDIS_ACK_CHUNK ? room[ti]
                                                    : TM_REDIS_ACK_CHUNK;
        if (max > 0 && atomic_load(&rt->paused)) {
            paused = 1; /* nothing is read: retries, reclaim, new */
            continue;
        }
        if (max == 0) {
            waiting = 1;
            continue;
        }
        if (task_ready(rb, rt) != 0)
            return nb > 0 ? (int)nb : -1;
        int n = tm_redis_take_owed(rb, b, rt, ti, max, &out[nb]);
        if (n < 0)
            return nb > 0 ? (int)nb : -1;
        if (n > 0) {
            nb++;
            continue;
        }
        int64_t t_look = tm_redis_next_look(rt);
        if (t_look < until)
            until = t_look;
        /* each read's COUNT is the least room among its streams, so
         * that no task gets more than its prefetch allows */
        l->argmax[k] = max;
        l->argroom[k] = room[ti];
        l->argti[k++] = ti;
    }
    /* the connection works: every task with room was looked at */
    tm_redis_mark_up(rb);
    l->was_up = 1;
    if (nb == 0 && k == 0 && !fresh && paused)
        tm_redis_pause_wait(l, until); /* every task with room paused */
    if (nb > 0 || k == 0 || fresh)
        return (int)nb;

    /* 4. new entries of every task with room, in one read that waits
     * until the next look a task needs at most, or a poke (a polling
     * lane: a read per slot, then a sleep) */
    if (waiting && until > now + TM_REDIS_ROOM_BLOCK_MS)
        until = now + TM_REDIS_ROOM_BLOCK_MS;
    if (until > l->next_peek_ms)
        until = l->next_peek_ms;
    /* and no longer than the next read of the pause state */
    if (until > atomic_load(&l->next_pause_ms))
        until = atomic_load(&l->next_pause_ms);
    int64_t bl = until - now > 1 ? until - now : 1;
    atomic_store(&l->block_end_ms, now + bl);
    atomic_store(&l->in_block, 1);
    if (atomic_exchange(&l->poke, 0)) {
        atomic_store(&l->in_block, 0);
        return 0; /* poked: the caller looks at the room again */
    }
    int n = l->poll ? tm_redis_poll_new(rb, l, k, now + bl, out, nout)
                    : tm_redis_read_new(rb, l, 0, k, bl, out, nout);
    atomic_store(&l->in_block, 0);
    atomic_store(&l->block_end_ms, LLONG_MAX);
    return n;
}

int tm_redis_fetch_lane(struct tm_broker *b, size_t li, const size_t *room,
                        int timeout_ms, struct tm_batch **out, size_t nout)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    int n = fetch_lane(b, li, room, timeout_ms, out, nout);
    if (n > 0)
        tm_redis_dedup_check(rb, &rb->lanes[li], out, (size_t)n);
    return n;
}
