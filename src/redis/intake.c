/* intake.c - Redis intake: a lane's fetch, in its order (pause state,
 * peek, then for each task with room the entries it is owed, then new
 * entries of all of them in one read), and what every read shares: a
 * reply's entries made a batch, the batch's release, the handling of a
 * failed read, the lane's connection and its tasks' groups. The owed
 * entries are read by scripts (claim.c), the new ones by XREADGROUP
 * with its read ahead (readahead.c).
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
#include "redis/arena.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

static void free_batch(struct tm_batch *b)
{
    struct tm_redis_held *h = b->owner;
    tm_rarena_reply_free(h->reply, h->arena);
    tm_rarena_unref(h->arena);
    tm_free(h);
    tm_free(b);
}

/* cb_release_reply runs on whichever thread settles a batch's last
 * message (the settle thread, mostly). The batch leaves the task's held
 * list at once: none of its ids is this process's any more. The reply
 * tree was allocated by the task's intake thread, entry by entry; freeing
 * it there again is much cheaper for malloc than freeing it across
 * threads, so the batch goes on the task's garbage stack, which the
 * intake empties before its next read. The stack links batches through
 * their first message. */
static void cb_release_reply(struct tm_batch *b)
{
    struct tm_redis_task *rt = b->msgs[0].bctx;
    struct tm_redis_held *h = b->owner;
    pthread_mutex_lock(&rt->held_mu);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        rt->held = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    pthread_mutex_unlock(&rt->held_mu);
    struct tm_msg *head = &b->msgs[0];
    struct tm_msg *old = atomic_load_explicit(&rt->garbage,
                                              memory_order_relaxed);
    do {
        head->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &rt->garbage, &old, head, memory_order_release,
        memory_order_relaxed));
}

/* tm_redis_collect frees the batches settled since the last read. */
void tm_redis_collect(struct tm_redis_task *rt)
{
    struct tm_msg *m = atomic_exchange_explicit(&rt->garbage, NULL,
                                                memory_order_acquire);
    while (m != NULL) {
        struct tm_msg *next = m->next;
        free_batch(m->batch);
        m = next;
    }
}

/* fill_msg points m at one entry: [id, [field, value, ...]] as Redis
 * reads it, or [id, fields, reason or nil, deliveries] as the take
 * scripts return it (reason: the body was stripped). */
static int fill_msg(struct tm_msg *m, const redisReply *e)
{
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    m->id = e->element[0]->str;
    m->id_len = e->element[0]->len;
    m->attempt = 1;
    if (e->elements >= 4 && e->element[3]->type == REDIS_REPLY_INTEGER &&
        e->element[3]->integer > 0)
        m->attempt = (unsigned)e->element[3]->integer;
    if (e->elements >= 3 && e->element[2]->type == REDIS_REPLY_STRING) {
        m->invalid = e->element[2]->str;
        return 0;
    }
    const redisReply *f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY) {
        m->invalid = "the entry has no fields";
        return 0;
    }
    int has_body = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (!has_body && k->len == 4 && memcmp(k->str, "body", 4) == 0) {
            has_body = 1;
            if (v->len > sizeof TM_REDIS_OVERSIZE - 1 &&
                memcmp(v->str, TM_REDIS_OVERSIZE,
                       sizeof TM_REDIS_OVERSIZE - 1) == 0)
                /* dropped by the capped read: the reason is left */
                m->invalid = v->str + sizeof TM_REDIS_OVERSIZE - 1;
            else {
                m->body = v->str;
                m->body_len = v->len;
            }
        } else {
            tm_redis_meta_field(m, k, v);
        }
    }
    if (!has_body)
        m->invalid = "the entry has no body field";
    return 0;
}

/* tm_redis_entries_batch makes a batch of the entries array, owning reply
 * (built in arena, which the batch then holds a reference to, or malloc'd when
 * arena is NULL), and puts it on the task's held list. Entries that are
 * not well-formed are skipped. Returns NULL (reply freed) when empty. */
struct tm_batch *tm_redis_entries_batch(struct tm_redis_task *rt,
                                        redisReply *reply,
                                        struct tm_rarena *arena,
                                        const redisReply *entries,
                                        size_t task_index)
{
    size_t n = 0;
    for (size_t i = 0; i < entries->elements; i++)
        if (entries->element[i]->type == REDIS_REPLY_ARRAY)
            n++;
    if (n == 0) {
        tm_rarena_reply_free(reply, arena);
        return NULL;
    }
    struct tm_batch *b = tm_batch_new(n);
    struct tm_redis_held *h = tm_calloc(1, sizeof *h + n);
    h->reply = reply;
    h->arena = arena;
    if (arena != NULL)
        tm_rarena_ref(arena);
    h->batch = b;
    h->seq = rt->reads++;
    b->owner = h;
    b->release = cb_release_reply;
    size_t k = 0;
    int64_t now = tm_now_ns();
    for (size_t i = 0; i < entries->elements && k < n; i++) {
        struct tm_msg *m = &b->msgs[k];
        if (fill_msg(m, entries->element[i]) != 0)
            continue;
        m->task_index = task_index;
        m->bctx = rt;
        m->t_recv_ns = now;
        k++;
    }
    if (k == 0) {
        free_batch(b);
        return NULL;
    }
    if (k < n) {
        /* malformed entries were skipped: shrink the count */
        atomic_store(&b->refs, (unsigned)k);
        b->n = k;
    }
    pthread_mutex_lock(&rt->held_mu);
    h->next = rt->held;
    if (rt->held != NULL)
        rt->held->prev = h;
    rt->held = h;
    pthread_mutex_unlock(&rt->held_mu);
    return b;
}

/* tm_redis_intake_failed closes the lane's connection after a failure of task
 * rt's read (the lane reconnects on its next fetch). */
void tm_redis_intake_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                            const char *what)
{
    struct tm_redis_lane *l = rt->lane;
    if (rt->was_up || atomic_load(&rb->base.up))
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "%s: %s; reconnecting", what, rt->errstr);
    rt->was_up = 0;
    l->was_up = 0;
    tm_redis_mark_down(rb);
    atomic_store(&l->client_id, 0);
    tm_redis_link_close(rb, &l->link);
}

/* tm_redis_group_lost says whether err refused a read because a stream or
 * group it reads is gone: NOGROUP, or a blocked read ended by the deletion of
 * its stream (the connection is fine in both cases). */
int tm_redis_group_lost(const char *err)
{
    return strstr(err, "NOGROUP") != NULL ||
           (strncmp(err, "UNBLOCKED", 9) == 0 &&
            strstr(err, TM_REDIS_KEY_GONE) != NULL);
}

/* tm_redis_regroup handles a read of the tasks ti[0 .. k) refused by
 * tm_redis_group_lost: which of their groups is gone the error may not say
 * (NOGROUP names the first stream it found without one, an ended block none),
 * so each of them is made sure of again before the next read, and task_ready
 * warns for the ones it had to create again. */
void tm_redis_regroup(struct tm_redis *rb, struct tm_redis_lane *l,
                      const char *err, const size_t *ti, size_t k)
{
    for (size_t i = 0; i < k; i++)
        rb->tasks[ti[i]].group_gen = l->link.gen - 1;
    tm_log_write(TM_LOG_DEBUG, SRC, rb->tasks[ti[0]].cfg->name, NULL,
                 "read of %zu stream(s) refused: %s; making sure of their "
                 "groups again", k, err);
}

/* tm_redis_read_failed handles a failed read of task rt alone: a deleted
 * stream or group is created again on the next call (0; task_ready warns);
 * anything else is a lost connection or a broker refusing the read (-1:
 * reconnect with backoff). */
int tm_redis_read_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                         const char *what)
{
    if (tm_redis_group_lost(rt->errstr)) {
        size_t ti = (size_t)(rt - rb->tasks);
        tm_redis_regroup(rb, rt->lane, rt->errstr, &ti, 1);
        return 0;
    }
    tm_redis_intake_failed(rb, rt, what);
    return -1;
}

/* tm_redis_intake_command runs one command on the intake connection, reading
 * its reply capped at max_payload, built in arena (NULL: malloc'd). Returns
 * the reply, or NULL with the reason in rt->errstr (and *dead = 1 when
 * the connection is unusable); an error reply is returned as NULL too. */
redisReply *tm_redis_intake_command(struct tm_redis_task *rt, int argc,
                                    const char **argv, struct tm_rarena *arena,
                                    int64_t timeout_ms, int *dead)
{
    struct tm_redis_lane *l = rt->lane;
    /* no reply of a read ahead is due before this one's */
    assert(!l->ahead);
    return tm_redis_link_run_in(l->rb, &l->link, rt->slot, argc, argv, NULL,
                                rt->cfg->max_payload, arena, timeout_ms,
                                rt->errstr, sizeof rt->errstr, dead);
}

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
