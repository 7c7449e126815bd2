/* intake.c - the intake threads, one per lane of the broker (the
 * adapter groups its tasks into lanes, see struct
 * tm_broker_consume_ops), reading from the broker and handing messages to
 * the pool. */
#include "daemon_private.h"

#include "otel/otel.h"

#include <assert.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* wait_ms waits until ms pass, the generation stops, or room is made. */
static void wait_ms(struct tm_gen *g, int64_t ms)
{
    pthread_mutex_lock(&g->mu);
    if (!atomic_load(&g->stopping))
        tm_cond_wait_ns(&g->cv, &g->mu, ms * 1000000LL);
    pthread_mutex_unlock(&g->mu);
}

/* struct tm_runs is a lane's scratch for handing what one read brought
 * to the pool at once: the runs of messages to run, and their answers. */
struct tm_runs {
    struct tm_msg **runs;
    size_t *lens;
    size_t *accepted;
    size_t n, cap;
};

static void runs_push(struct tm_runs *r, struct tm_msg *m, size_t len)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->runs = tm_realloc(r->runs, r->cap * sizeof *r->runs);
        r->lens = tm_realloc(r->lens, r->cap * sizeof *r->lens);
        r->accepted = tm_realloc(r->accepted, r->cap * sizeof *r->accepted);
    }
    r->runs[r->n] = m;
    r->lens[r->n] = len;
    r->n++;
}

static void runs_free(struct tm_runs *r)
{
    tm_free(r->runs);
    tm_free(r->lens);
    tm_free(r->accepted);
}

/* collect_runs prepares batch (of one task) for the pool: it counts it in
 * flight and adds its runs of messages to r. Duplicates (m->duplicate:
 * the broker found their dedup key done) are not run: they go to the
 * settle thread at once, with outcome duplicate; the pool gets the runs
 * of messages between them. */
static void collect_runs(struct tm_gen *g, struct tm_batch *batch,
                         struct tm_runs *r)
{
    struct tm_task *t = &g->tasks[batch->msgs[0].task_index];
    struct tm_otel *o = g->d->otel;
    double ratio = tm_otel_ratio(o);
    for (size_t i = 0; i < batch->n; i++) {
        batch->msgs[i].task = t;
        tm_msg_trace_begin(&batch->msgs[i], o != NULL, ratio);
    }
    size_t total = batch->n;
    tm_flow_in(t, (long long)total);
    size_t i = 0;
    while (i < total) {
        struct tm_msg *m = &batch->msgs[i];
        if (m->duplicate) {
            m->outcome = TM_OUT_DUPLICATE;
            m->next = NULL;
            tm_settle_pool_done(g, m);
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < total && !batch->msgs[j].duplicate)
            j++;
        runs_push(r, m, j - i);
        i = j;
    }
}

/* submit_runs hands r's runs to the pool, in one call when the pool
 * takes several, and leaves what it refused (it is draining)
 * unacknowledged. Empties r. */
static void submit_runs(struct tm_gen *g, struct tm_runs *r)
{
    struct tm_pool *p = g->pool;
    if (r->n == 0)
        return;
    if (p->ops->submit_runs != NULL && r->n > 1) {
        p->ops->submit_runs(p, r->runs, r->lens, r->n, r->accepted);
    } else {
        for (size_t i = 0; i < r->n; i++)
            r->accepted[i] = p->ops->submit(p, r->runs[i], r->lens[i]);
    }
    for (size_t i = 0; i < r->n; i++) {
        for (size_t k = r->accepted[i]; k < r->lens[i]; k++) {
            struct tm_msg *m = &r->runs[i][k];
            tm_flow_out(m->task);
            tm_msg_release(m);
        }
    }
    r->n = 0;
}

/* tm_intake_submit hands one batch (of one task) to the pool. */
void tm_intake_submit(struct tm_gen *g, struct tm_batch *batch)
{
    struct tm_msg *first[1];
    size_t lens[1], accepted[1];
    struct tm_runs r = { first, lens, accepted, 0, 1 };
    /* a batch without duplicates is one run: no allocation */
    int plain = 1;
    for (size_t i = 0; i < batch->n && plain; i++)
        plain = !batch->msgs[i].duplicate;
    if (plain) {
        collect_runs(g, batch, &r);
        submit_runs(g, &r);
        return;
    }
    struct tm_runs grown = {0};
    collect_runs(g, batch, &grown);
    submit_runs(g, &grown);
    runs_free(&grown);
}

/* How long one blocking read of a lane may wait: the broker ends it
 * early when there is work (a poke), and wake() ends it at stop. */
#define TM_LANE_BLOCK_MS 30000

/* struct tm_intake_lane is one lane's intake thread (brokers with lanes:
 * one thread reads the tasks of a lane, see struct
 * tm_broker_consume_ops). */
struct tm_intake_lane {
    struct tm_gen *g;
    size_t index;
    pthread_t thread;
    int started;
};

/* lane_held is how many messages task t holds against its room on a
 * lane: those in flight, less those whose settlement the settle thread is
 * sending. A lane's broker (Redis) thus keeps reading while a batch's
 * acknowledgement is on its way: one acknowledgement batch at most over
 * the cap stays pending in the broker, for one round trip. inflight is
 * read first: a message leaves acking before inflight, so it is never
 * counted out twice (see acking_add in settle.c). */
static long lane_held(struct tm_task *t)
{
    long long in = atomic_load(&t->stats.inflight);
    long long ack = atomic_load(&t->acking);
    return in > ack ? (long)(in - ack) : 0;
}

/* lane_room fills room[] for the lane's tasks (prefetch, or concurrency
 * when lower, less what they hold (lane_held), through the circuit
 * breaker); *hold is the
 * shortest wait a circuit asked for (the lane looks again then). A task
 * left with no room is marked
 * waiting_room, so that the settle thread, making room after the look,
 * pokes the lane (room_made). */
static void lane_room(struct tm_gen *g, size_t lane, size_t *room,
                      int64_t *hold)
{
    struct tm_broker *b = g->broker;
    *hold = TM_LANE_BLOCK_MS;
    for (size_t i = 0; i < g->ntasks; i++) {
        struct tm_task *t = &g->tasks[i];
        room[i] = 0;
        if (b->ops->consume->lane_of(b, i) != lane)
            continue;
        int by_conc;
        long cap = tm_flow_cap(t, &by_conc);
        long r = cap - lane_held(t);
        if (r <= 0) {
            /* flag first, then look again: room made after the flag is
             * seen here or pokes the lane */
            atomic_store(&t->waiting_room, 1);
            r = cap - lane_held(t);
            if (r <= 0) {
                tm_flow_held(t, by_conc != 0);
                /* room the other generations make wakes them only */
                if (by_conc == 2 && *hold > TM_FLOW_OTHERS_MS)
                    *hold = TM_FLOW_OTHERS_MS;
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
    }
}

static void set_subscribed(struct tm_gen *g, size_t lane, int on)
{
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->broker->ops->consume->lane_of(g->broker, i) == lane)
            atomic_store(&g->tasks[i].subscribed, on);
}

/* take_ahead hands the pool what lane's broker read ahead, if anything:
 * a fetch with every room 0 (room is all 0) reads nothing new. */
static void take_ahead(struct tm_gen *g, size_t lane, const size_t *room,
                       struct tm_batch **out, size_t n_out,
                       struct tm_runs *runs)
{
    struct tm_broker *b = g->broker;
    int n = b->ops->consume->fetch_lane(b, lane, room, 0, out, n_out);
    for (int i = 0; i < n; i++)
        collect_runs(g, out[i], runs);
    submit_runs(g, runs);
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
    struct tm_runs runs = {0};

    while (!atomic_load(&g->stopping)) {
        int64_t hold;
        lane_room(g, ln->index, room, &hold);
        int with_room = tm_flow_lane_rate(g, ln->index, room, &hold, &f);
        if (with_room < 0) {
            set_subscribed(g, ln->index, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff, TM_RECONNECT_MIN_MS, TM_RECONNECT_MAX_MS);
            continue;
        }
        if (with_room == 0) {
            /* nothing may be read: what was read ahead is taken in (it
             * counts against the room it was sized from; unread, it
             * would be held by nobody), then wait for room (the settle
             * thread signals it), the circuit, the stop, or the next
             * token (no asking the broker before it is due) */
            take_ahead(g, ln->index, room, out, n_out, &runs);
            wait_ms(g, hold < 100 || f.waiting ? hold : 100);
            continue;
        }
        int n = b->ops->consume->fetch_lane(b, ln->index, room, (int)hold, out,
                                   n_out);
        tm_flow_lane_used(g, ln->index, out, n);
        if (n < 0) {
            set_subscribed(g, ln->index, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff, TM_RECONNECT_MIN_MS, TM_RECONNECT_MAX_MS);
            continue;
        }
        backoff = TM_RECONNECT_MIN_MS;
        set_subscribed(g, ln->index, 1);
        /* every task's batch of this read goes to the pool at once */
        for (int i = 0; i < n; i++)
            collect_runs(g, out[i], &runs);
        submit_runs(g, &runs);
    }
    /* a last fetch, with no room, takes in a read the broker sent ahead
     * before the stop: its messages run (a reload) or are left to the
     * broker with the other unstarted ones (a pool that drains refuses
     * them) */
    memset(room, 0, n_out * sizeof *room);
    take_ahead(g, ln->index, room, out, n_out, &runs);
    runs_free(&runs);
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
    assert(b->ops->consume->fetch_lane != NULL);
    g->nlanes = b->ops->consume->lanes(b);
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
}

/* tm_intake_stop stops reading new messages; what was read runs on. */
void tm_intake_stop(struct tm_gen *g)
{
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->consume->wake(g->broker);
    tm_intake_join(g);
}

/* tm_intake_join joins the intake threads of a generation told to stop. */
void tm_intake_join(struct tm_gen *g)
{
    for (size_t l = 0; l < g->nlanes; l++)
        if (g->lanes[l].started) {
            pthread_join(g->lanes[l].thread, NULL);
            g->lanes[l].started = 0;
        }
    tm_free(g->lanes);
    g->lanes = NULL;
    g->nlanes = 0;
}

