/* flow.c - flow control of the intake: the room concurrency leaves a
 * task, and the rate_limit tokens each read takes (from this daemon's
 * bucket, or the broker's shared one), with the count of waits. Used by
 * the intake threads (intake.c), each for its own tasks. */
#include "daemon_private.h"

#include <assert.h>

#include "util/util.h"

/* tm_flow_cap is how many messages of t may be in flight (read and not yet
 * settled) in its generation: prefetch, or concurrency less the messages
 * of the task's other generations (a reload's replaced one, finishing
 * what it holds) when that is lower. Messages over it are not read: they
 * wait in the broker. Since a message is in flight from its read until
 * its settlement, and only the newest generation reads (a reload stops
 * the old intake before the new one starts), at most concurrency of
 * them run at once across generations, whatever the pools and their
 * sizes. *by_conc says concurrency is the cap (2: the other generations
 * leave t no room). */
long tm_flow_cap(const struct tm_task *t, int *by_conc)
{
    long cap = (long)t->cfg->prefetch;
    *by_conc = 0;
    if (t->cfg->concurrency == 0)
        return cap;
    /* the shared count first: a message leaves t's own count before the
     * shared one (tm_flow_out), so others is never under the truth */
    long long shared = atomic_load(&t->flow.conc->inflight);
    long long own = atomic_load(&t->stats.inflight);
    long long others = shared > own ? shared - own : 0;
    long conc = (long)t->cfg->concurrency - (long)others;
    if (conc < cap) {
        cap = conc;
        *by_conc = others > 0 && conc - (long)own <= 0 ? 2 : 1;
    }
    return cap;
}

void tm_flow_in(struct tm_task *t, long long n)
{
    atomic_fetch_add(&t->flow.conc->inflight, n);
    atomic_fetch_add(&t->stats.inflight, n);
}

void tm_flow_out(struct tm_task *t)
{
    atomic_fetch_sub(&t->stats.inflight, 1);
    atomic_fetch_sub(&t->flow.conc->inflight, 1);
}

void tm_flow_share(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_conc *c;
        long j = g->prev != NULL ? g->snap_from[i] : -1;
        if (j >= 0) {
            c = g->prev->tasks[j].flow.conc;
            atomic_fetch_add(&c->refs, 1);
        } else {
            c = tm_calloc(1, sizeof *c);
            atomic_init(&c->inflight, 0);
            atomic_init(&c->refs, 1);
        }
        g->tasks[i].flow.conc = c;
    }
}

/* conc_out takes what t still counts in flight out of its shared count,
 * once: called when nothing counts t's messages out any more. */
static void conc_out(struct tm_task *t)
{
    if (t->flow.conc == NULL || t->flow.conc_out)
        return;
    t->flow.conc_out = 1;
    atomic_fetch_sub(&t->flow.conc->inflight,
                     atomic_load(&t->stats.inflight));
}

/* Once tm_gen_stop returned, g's settle thread has ended and its intake
 * too: its own counts no longer move. What they still hold are messages
 * it gave up on (abandoned at shutdown_timeout, or whose settlement
 * failed), left to be delivered again: they stop taking the successor's
 * concurrency, even while an abandoned call has not returned. */
void tm_flow_stopped(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++)
        conc_out(&g->tasks[i]);
}

/* At tm_gen_free nothing of g runs any more; a generation freed without
 * tm_flow_stopped (one that did not start) leaves the shared counts
 * here, so that they stay the sum of the live generations' own counts. */
void tm_flow_unshare(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        struct tm_conc *c = t->flow.conc;
        conc_out(t);
        t->flow.conc = NULL;
        if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1)
            tm_free(c);
    }
}

/* tm_flow_held records whether the last look held t's intake back by
 * rate_limit or concurrency; a wait is counted once, when it starts
 * (taskmill_rate_limited_total). Held-back messages stay in the broker:
 * not read, so no attempt is spent and nothing fails. */
void tm_flow_held(struct tm_task *t, int held)
{
    if (held && !t->flow.held)
        atomic_fetch_add_explicit(&t->stats.rate_limited, 1,
                                  memory_order_relaxed);
    t->flow.held = held;
}

/* tm_flow_take_local takes up to room tokens of t's rate_limit from this
 * daemon's bucket (brokers that keep none) and returns how many the next
 * read may take; all of room without a rate_limit. When it returns 0,
 * *wait is how long until the next token. */
size_t tm_flow_take_local(struct tm_task *t, size_t room, int64_t *wait)
{
    *wait = 0;
    if (t->cfg->rate_count == 0)
        return room;
    assert(t->flow.granted == 0);
    size_t got = tm_bucket_take(&t->flow.bucket, t->cfg, tm_now_ms(), room,
                                wait);
    t->flow.granted = got;
    return got;
}

/* tm_flow_used_local gives the tokens a read left unused back to the local
 * bucket; used is what the read took. */
void tm_flow_used_local(struct tm_task *t, size_t used)
{
    if (t->cfg->rate_count == 0)
        return;
    assert(used <= t->flow.granted);
    tm_bucket_give(&t->flow.bucket, t->cfg, t->flow.granted - used);
    t->flow.granted = 0;
}


/* flow_lane_local caps room for a rate-limited task of a lane whose
 * broker keeps no bucket: tokens from this daemon's. */
static void flow_lane_local(struct tm_task *t, size_t *room,
                            struct tm_lane_flow *f, size_t i)
{
    f->want[i] = *room;
    f->got[i] = tm_flow_take_local(t, *room, &f->wait[i]);
}

/* flow_lane_want decides what task t asks of the broker's bucket before
 * a read with room: nothing while the tokens it holds cover the room,
 * else enough to hold a burst (one request serves many reads when the
 * limit is far above the rate). Tokens held longer than TM_FLOW_HOLD_MS
 * (the task is idle) are given back with the request. */
static void flow_lane_want(struct tm_task *t, size_t room, int64_t now,
                           struct tm_lane_flow *f, size_t i)
{
    struct tm_flow *fl = &t->flow;
    size_t burst = tm_flow_burst(t->cfg);
    assert(fl->have <= burst);
    if (fl->have > 0 && now - fl->have_ms >= TM_FLOW_HOLD_MS) {
        fl->back += fl->have;
        fl->have = 0;
    }
    if (room > fl->have)
        f->want[i] = burst - fl->have;
    f->back[i] = fl->back;
}

/* tm_flow_lane_rate caps room[] of the lane's rate-limited tasks by their
 * tokens: held from the broker's buckets (rate_take, one call for the
 * lane, made only when a task's tokens do not cover its room), or taken
 * from this daemon's. A task left with none is held back and *hold
 * lowered to the wait for its next token (the lane sleeps until then, or
 * reads the other tasks until then); a read made while tokens are held
 * waits at most TM_FLOW_HOLD_MS. Returns how many tasks have room, or
 * -1 when the broker could not be asked (nothing taken). */
int tm_flow_lane_rate(struct tm_gen *g, size_t lane, size_t *room,
                      int64_t *hold, struct tm_lane_flow *f)
{
    struct tm_broker *b = g->broker;
    int ask = 0, with_room = 0, shared = b->ops->consume->rate_take != NULL;
    int64_t now = tm_now_ms();
    f->waiting = 0;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        f->want[i] = f->got[i] = f->back[i] = 0;
        f->wait[i] = 0;
        if (b->ops->consume->lane_of(b, i) != lane || t->cfg->rate_count == 0)
            continue;
        assert(t->flow.granted == 0);
        if (!shared) {
            flow_lane_local(t, &room[i], f, i);
            continue;
        }
        flow_lane_want(t, room[i], now, f, i);
        if (f->want[i] > 0 || f->back[i] > 0)
            ask = 1;
    }
    if (ask && b->ops->consume->rate_take(b, lane, f->want, f->back,
                                          f->got, f->wait) != 0)
        return -1;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        if (b->ops->consume->lane_of(b, i) != lane)
            continue;
        if (t->cfg->rate_count == 0) {
            if (room[i] > 0)
                tm_flow_held(t, 0);
        } else {
            struct tm_flow *fl = &t->flow;
            size_t tokens = f->got[i];
            if (shared) {
                assert(f->got[i] <= f->want[i]);
                fl->back = 0; /* given back (ask), or none owed */
                if (fl->have == 0)
                    fl->have_ms = now;
                fl->have += f->got[i];
                tokens = fl->have;
                if (tokens > 0 && *hold > TM_FLOW_HOLD_MS)
                    *hold = TM_FLOW_HOLD_MS;
            } else {
                fl->granted = f->got[i];
            }
            if (room[i] > 0) {
                tm_flow_held(t, tokens == 0);
                if (tokens == 0) {
                    f->waiting = 1;
                    if (f->wait[i] < *hold)
                        *hold = f->wait[i] > 0 ? f->wait[i] : 1;
                }
            }
            if (tokens < room[i])
                room[i] = tokens;
        }
        if (room[i] > 0)
            with_room++;
    }
    return with_room;
}

/* tm_flow_lane_used accounts the tokens of the lane's last read (n batches in
 * out, or n < 0: failed, and the tokens held count as used): the read
 * took one per message; those of this daemon's bucket that it left go
 * back at once, those of the broker's stay held for the next reads. */
void tm_flow_lane_used(struct tm_gen *g, size_t lane, struct tm_batch **out,
                       int n)
{
    struct tm_broker *b = g->broker;
    int shared = b->ops->consume->rate_take != NULL;
    for (int k = 0; k < n; k++) {
        struct tm_task *t = &g->tasks[out[k]->msgs[0].task_index];
        if (t->cfg->rate_count == 0)
            continue;
        size_t *tokens = shared ? &t->flow.have : &t->flow.granted;
        assert(out[k]->n <= *tokens);
        *tokens -= out[k]->n;
    }
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        if (b->ops->consume->lane_of(b, i) != lane || t->cfg->rate_count == 0)
            continue;
        if (n < 0)
            t->flow.have = t->flow.granted = 0;
        if (!shared)
            tm_flow_used_local(t, 0);
    }
}
