/* intake.c - the intake threads: one per task, or one per lane for a
 * broker with lanes, reading from the broker and handing messages to the
 * pool. */
#include "daemon_private.h"

#include <assert.h>

#include "log.h"
#include "util.h"

/* How long one blocking broker read may wait before intake looks at its
 * stop flag again. */
#define TM_FETCH_BLOCK_MS 250

/* wait_ms waits until ms pass, the generation stops, or room is made. */
static void wait_ms(struct tm_gen *g, int64_t ms)
{
    pthread_mutex_lock(&g->mu);
    if (!atomic_load(&g->stopping))
        tm_cond_wait_ns(&g->cv, &g->mu, ms * 1000000LL);
    pthread_mutex_unlock(&g->mu);
}

int64_t tm_backoff_jitter(int64_t ms)
{
    return ms + (int64_t)(tm_rand64() % (uint64_t)(ms / 2 + 1));
}

/* tm_backoff_next doubles a reconnect delay up to its cap. */
int64_t tm_backoff_next(int64_t ms)
{
    return ms * 2 > TM_RECONNECT_MAX_MS ? TM_RECONNECT_MAX_MS : ms * 2;
}

/* Tokens of a bucket the broker keeps (shared by the daemons) are held
 * at most about this long unused: they go back with the next request
 * after it, and a read made while they are held waits at most this. */
#define TM_FLOW_HOLD_MS 1000

/* flow_cap is how many messages of t may be in flight (read and not yet
 * settled): prefetch, or concurrency when that is lower. Messages over it
 * are not read: they wait in the broker. Since a message is in flight
 * from its read until its settlement, at most concurrency of them run at
 * once, whatever the pool and its size. *by_conc says concurrency is the
 * cap. */
static long flow_cap(const struct tm_task *t, int *by_conc)
{
    long cap = (long)t->cfg->prefetch;
    *by_conc = 0;
    if (t->cfg->concurrency > 0 && (long)t->cfg->concurrency < cap) {
        cap = (long)t->cfg->concurrency;
        *by_conc = 1;
    }
    return cap;
}

/* flow_held records whether the last look held t's intake back by
 * rate_limit or concurrency; a wait is counted once, when it starts
 * (taskmill_rate_limited_total). Held-back messages stay in the broker:
 * not read, so no attempt is spent and nothing fails. */
static void flow_held(struct tm_task *t, int held)
{
    if (held && !t->flow.held)
        atomic_fetch_add_explicit(&t->stats.rate_limited, 1,
                                  memory_order_relaxed);
    t->flow.held = held;
}

/* flow_take_local takes up to room tokens of t's rate_limit from this
 * daemon's bucket (brokers that keep none) and returns how many the next
 * read may take; all of room without a rate_limit. When it returns 0,
 * *wait is how long until the next token. */
static size_t flow_take_local(struct tm_task *t, size_t room, int64_t *wait)
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

/* flow_used_local gives the tokens a read left unused back to the local
 * bucket; used is what the read took. */
static void flow_used_local(struct tm_task *t, size_t used)
{
    if (t->cfg->rate_count == 0)
        return;
    assert(used <= t->flow.granted);
    tm_bucket_give(&t->flow.bucket, t->cfg, t->flow.granted - used);
    t->flow.granted = 0;
}

static void *intake_main(void *arg)
{
    struct tm_task *t = arg;
    struct tm_gen *g = t->gen;
    struct tm_broker *b = g->broker;
    int64_t backoff = TM_RECONNECT_MIN_MS;
    int by_conc;
    long cap = flow_cap(t, &by_conc);

    while (!atomic_load(&g->stopping)) {
        long room = cap - (long)atomic_load(&t->stats.inflight);
        if (room <= 0) {
            atomic_store(&t->waiting_room, 1);
            room = cap - (long)atomic_load(&t->stats.inflight);
            if (room <= 0) {
                flow_held(t, by_conc);
                wait_ms(g, 100);
            }
            atomic_store(&t->waiting_room, 0);
            continue;
        }
        /* an open circuit breaker holds the task's messages in the broker */
        int64_t hold = tm_circuit_gate(&t->circuit, t->cfg,
                                       atomic_load(&t->stats.inflight), &room);
        if (hold > 0) {
            wait_ms(g, hold);
            continue;
        }
        /* rate_limit: this daemon's bucket (the only intake with fetch
         * is of brokers that keep no bucket) */
        int64_t wait;
        size_t max = flow_take_local(t, (size_t)room, &wait);
        flow_held(t, max == 0);
        int block = TM_FETCH_BLOCK_MS;
        if (max == 0 && wait < block)
            block = (int)wait;
        /* with no token the read takes nothing: it only keeps the
         * connection served (heartbeats) until the next token is due */
        struct tm_batch *batch = NULL;
        int n = b->ops->fetch(b, t->index, max, block, &batch);
        flow_used_local(t, n > 0 && batch != NULL ? batch->n : 0);
        if (n < 0) {
            atomic_store(&t->subscribed, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff);
            continue;
        }
        backoff = TM_RECONNECT_MIN_MS;
        atomic_store(&t->subscribed, 1);
        if (n == 0 || batch == NULL)
            continue;
        for (size_t i = 0; i < batch->n; i++)
            batch->msgs[i].task = t;
        size_t total = batch->n;
        atomic_fetch_add(&t->stats.inflight, (long long)total);
        size_t acc = g->pool->ops->submit(g->pool, batch->msgs, total);
        for (size_t i = acc; i < total; i++) {
            /* the pool is draining: leave these unacknowledged */
            atomic_fetch_sub(&t->stats.inflight, 1);
            tm_msg_release(&batch->msgs[i]);
        }
    }
    return NULL;
}

/* How long one blocking read of a lane may wait: the broker ends it
 * early when there is work (a poke), and wake() ends it at stop. */
#define TM_LANE_BLOCK_MS 30000

/* struct tm_intake_lane is one lane's intake thread (brokers with lanes:
 * one thread reads the tasks of a lane, see struct tm_broker_ops). */
struct tm_intake_lane {
    struct tm_gen *g;
    size_t index;
    pthread_t thread;
    int started;
};

/* lane_room fills room[] for the lane's tasks (prefetch, or concurrency
 * when lower, less inflight, through the circuit breaker) and says how many have room; *hold is the
 * shortest wait a circuit asked for (the lane looks again then). A task
 * left with no room is marked waiting_room, so that the settle thread,
 * making room after the look, pokes the lane (room_made). */
static size_t lane_room(struct tm_gen *g, size_t lane, size_t *room,
                        int64_t *hold)
{
    struct tm_broker *b = g->broker;
    size_t with_room = 0;
    *hold = TM_LANE_BLOCK_MS;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        room[i] = 0;
        if (b->ops->lane_of(b, i) != lane)
            continue;
        int by_conc;
        long cap = flow_cap(t, &by_conc);
        long r = cap - (long)atomic_load(&t->stats.inflight);
        if (r <= 0) {
            /* flag first, then look again: room made after the flag is
             * seen here or pokes the lane */
            atomic_store(&t->waiting_room, 1);
            r = cap - (long)atomic_load(&t->stats.inflight);
            if (r <= 0) {
                flow_held(t, by_conc);
                continue;
            }
        }
        atomic_store(&t->waiting_room, 0);
        int64_t h = tm_circuit_gate(&t->circuit, t->cfg,
                                    atomic_load(&t->stats.inflight), &r);
        if (h > 0) {
            if (h < *hold)
                *hold = h;
            continue;
        }
        if (r <= 0)
            continue;
        room[i] = (size_t)r;
        with_room++;
    }
    return with_room;
}

/* struct tm_lane_flow is a lane thread's scratch for rate_limit, by task
 * index. */
struct tm_lane_flow {
    size_t *want, *back, *got;
    int64_t *wait;
    int waiting;        /* a task waits for its next token */
};

/* flow_lane_local caps room for a rate-limited task of a lane whose
 * broker keeps no bucket: tokens from this daemon's. */
static void flow_lane_local(struct tm_task *t, size_t *room,
                            struct tm_lane_flow *f, size_t i)
{
    f->want[i] = *room;
    f->got[i] = flow_take_local(t, *room, &f->wait[i]);
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

/* lane_rate caps room[] of the lane's rate-limited tasks by their
 * tokens: held from the broker's buckets (rate_take, one call for the
 * lane, made only when a task's tokens do not cover its room), or taken
 * from this daemon's. A task left with none is held back and *hold
 * lowered to the wait for its next token (the lane sleeps until then, or
 * reads the other tasks until then); a read made while tokens are held
 * waits at most TM_FLOW_HOLD_MS. Returns how many tasks have room, or
 * -1 when the broker could not be asked (nothing taken). */
static int lane_rate(struct tm_gen *g, size_t lane, size_t *room,
                     int64_t *hold, struct tm_lane_flow *f)
{
    struct tm_broker *b = g->broker;
    int ask = 0, with_room = 0, shared = b->ops->rate_take != NULL;
    int64_t now = tm_now_ms();
    f->waiting = 0;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        f->want[i] = f->got[i] = f->back[i] = 0;
        f->wait[i] = 0;
        if (b->ops->lane_of(b, i) != lane || t->cfg->rate_count == 0)
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
    if (ask && b->ops->rate_take(b, lane, f->want, f->back, f->got,
                                 f->wait) != 0)
        return -1;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        if (b->ops->lane_of(b, i) != lane)
            continue;
        if (t->cfg->rate_count == 0) {
            if (room[i] > 0)
                flow_held(t, 0);
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
                flow_held(t, tokens == 0);
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

/* lane_used accounts the tokens of the lane's last read (n batches in
 * out, or n < 0: failed, and the tokens held count as used): the read
 * took one per message; those of this daemon's bucket that it left go
 * back at once, those of the broker's stay held for the next reads. */
static void lane_used(struct tm_gen *g, size_t lane, struct tm_batch **out,
                      int n)
{
    struct tm_broker *b = g->broker;
    int shared = b->ops->rate_take != NULL;
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
        if (b->ops->lane_of(b, i) != lane || t->cfg->rate_count == 0)
            continue;
        if (n < 0)
            t->flow.have = t->flow.granted = 0;
        if (!shared)
            flow_used_local(t, 0);
    }
}

/* submit_batch hands one batch to the pool. */
static void submit_batch(struct tm_gen *g, struct tm_batch *batch)
{
    struct tm_task *t = &g->tasks[batch->msgs[0].task_index];
    for (size_t i = 0; i < batch->n; i++)
        batch->msgs[i].task = t;
    size_t total = batch->n;
    atomic_fetch_add(&t->stats.inflight, (long long)total);
    size_t acc = g->pool->ops->submit(g->pool, batch->msgs, total);
    for (size_t i = acc; i < total; i++) {
        /* the pool is draining: leave these unacknowledged */
        atomic_fetch_sub(&t->stats.inflight, 1);
        tm_msg_release(&batch->msgs[i]);
    }
}

static void set_subscribed(struct tm_gen *g, size_t lane, int on)
{
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->broker->ops->lane_of(g->broker, i) == lane)
            atomic_store(&g->tasks[i].subscribed, on);
}

static void *lane_main(void *arg)
{
    struct tm_intake_lane *ln = arg;
    struct tm_gen *g = ln->g;
    struct tm_broker *b = g->broker;
    int64_t backoff = TM_RECONNECT_MIN_MS;
    size_t n_out = g->ntasks ? g->ntasks : 1;
    size_t *room = tm_calloc(n_out, sizeof *room);
    struct tm_batch **out = tm_calloc(n_out, sizeof *out);
    struct tm_lane_flow f = {
        .want = tm_calloc(n_out, sizeof *f.want),
        .back = tm_calloc(n_out, sizeof *f.back),
        .got = tm_calloc(n_out, sizeof *f.got),
        .wait = tm_calloc(n_out, sizeof *f.wait),
    };

    while (!atomic_load(&g->stopping)) {
        int64_t hold;
        lane_room(g, ln->index, room, &hold);
        int with_room = lane_rate(g, ln->index, room, &hold, &f);
        if (with_room < 0) {
            set_subscribed(g, ln->index, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff);
            continue;
        }
        if (with_room == 0) {
            /* nothing may be read: wait for room (the settle thread
             * signals it), the circuit, the stop, or the next token (no
             * asking the broker before it is due) */
            wait_ms(g, hold < 100 || f.waiting ? hold : 100);
            continue;
        }
        int n = b->ops->fetch_lane(b, ln->index, room, (int)hold, out,
                                   n_out);
        lane_used(g, ln->index, out, n);
        if (n < 0) {
            set_subscribed(g, ln->index, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff);
            continue;
        }
        backoff = TM_RECONNECT_MIN_MS;
        set_subscribed(g, ln->index, 1);
        for (int i = 0; i < n; i++)
            submit_batch(g, out[i]);
    }
    tm_free(room);
    tm_free(out);
    tm_free(f.want);
    tm_free(f.back);
    tm_free(f.got);
    tm_free(f.wait);
    return NULL;
}

void tm_intake_start(struct tm_gen *g)
{
    struct tm_broker *b = g->broker;
    atomic_store(&g->stopping, 0);
    if (b->ops->fetch_lane != NULL) {
        g->nlanes = b->ops->lanes(b);
        g->lanes = tm_calloc(g->nlanes ? g->nlanes : 1, sizeof *g->lanes);
        for (size_t l = 0; l < g->nlanes; l++) {
            g->lanes[l].g = g;
            g->lanes[l].index = l;
            if (pthread_create(&g->lanes[l].thread, NULL, lane_main,
                               &g->lanes[l]) == 0)
                g->lanes[l].started = 1;
            else
                tm_log_err(TM_DAEMON_SRC, "cannot start intake lane %zu", l);
        }
        return;
    }
    for (size_t i = 0; i < g->ntasks; i++) {
        if (pthread_create(&g->tasks[i].intake, NULL, intake_main,
                           &g->tasks[i]) == 0)
            g->tasks[i].intake_started = 1;
        else
            tm_log_err(TM_DAEMON_SRC, "task '%s': cannot start its intake thread",
                       g->tasks[i].cfg->name);
    }
}

/* tm_intake_stop stops reading new messages; what was read runs on. */
void tm_intake_stop(struct tm_gen *g)
{
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->wake(g->broker);
    tm_intake_join(g);
}

/* tm_intake_join joins the intake threads of a generation told to stop. */
void tm_intake_join(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->tasks[i].intake_started) {
            pthread_join(g->tasks[i].intake, NULL);
            g->tasks[i].intake_started = 0;
        }
    for (size_t l = 0; l < g->nlanes; l++)
        if (g->lanes[l].started) {
            pthread_join(g->lanes[l].thread, NULL);
            g->lanes[l].started = 0;
        }
    tm_free(g->lanes);
    g->lanes = NULL;
    g->nlanes = 0;
}

