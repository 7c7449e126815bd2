/* settle.c - the settle thread: finished messages to the broker, task
 * counters, and counters carried across a reload. */
#include "daemon_private.h"

#include "otel/otel.h"

#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

/* How often failed settlements are tried again. */
#define TM_RESETTLE_MS 500

/* ---- completion stack ------------------------------------------------- */

void tm_settle_pool_done(void *ctx, struct tm_msg *list)
{
    struct tm_gen *g = ctx;
    if (list == NULL)
        return;
    struct tm_msg *tail = list;
    while (tail->next != NULL)
        tail = tail->next;
    struct tm_msg *old = atomic_load_explicit(&g->done_head,
                                              memory_order_relaxed);
    do {
        tail->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &g->done_head, &old, list, memory_order_release,
        memory_order_relaxed));
    if (old == NULL) {
        /* the stack was empty: the settle thread may be asleep */
        uint64_t one = 1;
        if (write(g->done_fd, &one, sizeof one) < 0) {
            /* the counter is saturated: it is awake anyway */
        }
    }
}

/* ---- settle thread ---------------------------------------------------- */

/* hist_note counts one of kind (TM_HK_N: none) in t's history, in the
 * minute now (task/history.h: what each kind counts). */
static void hist_note(struct tm_task *t, enum tm_hist_kind kind)
{
    if (t->hist == NULL || kind == TM_HK_N)
        return;
    unsigned add[TM_HK_N] = {0};
    add[kind] = 1;
    tm_hist_note(t->hist, tm_wall_ms(), add);
}

static void stats_record(struct tm_task *t, const struct tm_msg *m)
{
    static const double bounds[] = {
#define TM_HIST_VALUE(b) b,
        TM_HIST_BOUNDS(TM_HIST_VALUE)
#undef TM_HIST_VALUE
    };
    /* The settle thread is the only writer of these counters: a relaxed
     * load and store each, no locked instruction, no allocation. */
#define TM_BUMP(ctr, by)                                                   \
    atomic_store_explicit(                                                 \
        (ctr), atomic_load_explicit((ctr), memory_order_relaxed) + (by),   \
        memory_order_relaxed)
    struct tm_task_stats *s = &t->stats;
    TM_BUMP(&s->outcomes[m->outcome], 1);
    hist_note(t, m->outcome == TM_OUT_SUCCESS ? TM_HK_SUCCESS
                 : m->outcome == TM_OUT_DUPLICATE ? TM_HK_N
                                                  : TM_HK_FAILED);
    /* the attempt ended when it ran out, or when it was read (an invalid
     * body never runs) */
    int64_t ended = m->t_end_ns != 0 ? m->t_end_ns : m->t_recv_ns;
    tm_rate_note(&s->win->rate, ended != 0 ? ended : tm_now_ns());
    if ((m->outcome == TM_OUT_INVALID || m->outcome == TM_OUT_DUPLICATE) &&
        m->t_start_ns == 0)
        return;
    int64_t ns = m->t_end_ns - m->t_start_ns;
    tm_durwin_note(&s->win->durs, ns);
    double sec = (double)ns / 1e9;
    size_t b = 0;
    while (b < TM_HIST_N && sec > bounds[b])
        b++;
    TM_BUMP(&s->hist[b], 1);
    TM_BUMP(&s->dur_sum_us, (unsigned long long)(ns > 0 ? ns / 1000 : 0));
#undef TM_BUMP
}

static void report(const struct tm_task *t, const struct tm_msg *m)
{
    /* m->error starts with the outcome (tm_msg_name_outcome) */
    const char *err = m->error != NULL ? m->error : "";
    switch (m->settle) {
    case TM_SETTLE_RETRY:
        tm_log_write(TM_LOG_WARNING, "task", t->cfg->name, m->id,
                     "attempt %u %s; retry in %lld ms", m->attempt, err,
                     (long long)m->retry_delay_ms);
        break;
    case TM_SETTLE_DEAD:
        if (m->outcome == TM_OUT_INVALID)
            /* never ran: the dead letter records 0 attempts, and so
             * does the log */
            tm_log_write(TM_LOG_WARNING, "task", t->cfg->name, m->id,
                         "%s; not run (0 attempts), dead-lettered to '%s'",
                         err, t->cfg->dead_letter);
        else
            tm_log_write(TM_LOG_WARNING, "task", t->cfg->name, m->id,
                         "attempt %u %s; dead-lettered to '%s'", m->attempt,
                         err, t->cfg->dead_letter);
        break;
    default:
        break;
    }
}

static void room_made(struct tm_gen *g, struct tm_task *t)
{
    if (atomic_load_explicit(&t->waiting_room, memory_order_relaxed)) {
        pthread_mutex_lock(&g->mu);
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        /* a lane reading without this task: let it look again */
        if (g->broker->ops->consume->room_made != NULL)
            g->broker->ops->consume->room_made(g->broker, t->index);
    }
}

/* stats_late says whether m's outcome is counted only once the broker
 * settled it: a success with a dedup key, which the broker turns into a
 * duplicate when another copy's success was recorded first (counted
 * then, so that a key never counts two successes). */
static int stats_late(const struct tm_msg *m)
{
    return m->dedup_key != NULL && m->t_start_ns != 0 &&
           (m->outcome == TM_OUT_SUCCESS || m->outcome == TM_OUT_DUPLICATE);
}

/* run_span records the span of m's run, its outcome final (a success
 * the broker turned into a duplicate included). */
static void run_span(struct tm_gen *g, const struct tm_msg *m)
{
    const struct tm_cfg_task *c = m->task->cfg;
    int amqp = strcmp(g->broker->ops->kind, "amqp") == 0;
    tm_otel_run_span(g->d->otel, m, amqp ? "rabbitmq" : "redis", c->queue,
                     amqp ? NULL : c->group);
}

/* finish drops messages whose settlement is done (or was never needed). */
static void finish(struct tm_gen *g, struct tm_msg **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = v[i];
        struct tm_task *t = m->task;
        if (stats_late(m))
            stats_record(t, m);
        if (m->traced)
            run_span(g, m);
        tm_flow_out(t);
        tm_msg_release(m);
        room_made(g, t);
    }
}

/* acking_add counts the n messages v[0 .. n) as being settled (by = 1)
 * or no longer (by = -1), a task's run at a time; a task given room by
 * it (a lane counts what is being acknowledged as room, see lane_room in
 * intake.c) is told so. Only lanes read it: a broker without them (its
 * intake counts inflight whole) is left out. */
static void acking_add(struct tm_gen *g, struct tm_msg **v, size_t n,
                       long long by)
{
    if (g->broker->ops->consume->fetch_lane == NULL)
        return;
    size_t i = 0;
    while (i < n) {
        struct tm_task *t = v[i]->task;
        size_t j = i + 1;
        while (j < n && v[j]->task == t)
            j++;
        atomic_fetch_add(&t->acking, by * (long long)(j - i));
        if (by > 0)
            room_made(g, t);
        i = j;
    }
}

/* settle_list hands the list to the broker and keeps what failed. */
static void settle_list(struct tm_gen *g, struct tm_msg *list)
{
    size_t n = 0;
    for (struct tm_msg *m = list; m != NULL; m = m->next)
        n++;
    if (n == 0)
        return;
    if (n > g->scratch_cap) {
        g->scratch_cap = n * 2;
        g->scratch = tm_realloc(g->scratch, g->scratch_cap *
                                                sizeof *g->scratch);
    }
    n = 0;
    for (struct tm_msg *m = list; m != NULL; m = m->next)
        g->scratch[n++] = m;
    acking_add(g, g->scratch, n, 1);
    tm_beat_io_begin(&g->settle_beat);
    size_t failed = g->broker->ops->consume->settle(g->broker, g->scratch, n);
    tm_beat_io_end(&g->settle_beat);
    /* off acking before any leaves inflight (finish): a lane's look, which
     * reads inflight before acking, never sees a message counted out
     * twice */
    acking_add(g, g->scratch, n, -1);
    /* the ones that failed come first: keep them for the next try */
    for (size_t i = 0; i < failed; i++) {
        g->scratch[i]->next = g->unsettled;
        g->unsettled = g->scratch[i];
    }
    finish(g, g->scratch + failed, n - failed);
}

static void settle_batch(struct tm_gen *g, struct tm_msg *list)
{
    /* the stack is newest first: reverse it */
    struct tm_msg *rev = NULL;
    while (list != NULL) {
        struct tm_msg *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    for (struct tm_msg *m = rev; m != NULL; m = m->next) {
        struct tm_task *t = m->task;
        tm_policy_settle(m, t->cfg);
        tm_msg_name_outcome(m);
        if (m->outcome == TM_OUT_NONE)
            continue;
        if (!stats_late(m))
            stats_record(t, m);
        if (m->outcome != TM_OUT_DUPLICATE) /* not run: says nothing */
            tm_circuit_note(&t->circuit, t->cfg, m->outcome);
        if (m->settle == TM_SETTLE_RETRY) {
            atomic_fetch_add_explicit(&t->stats.retries, 1,
                                      memory_order_relaxed);
            hist_note(t, TM_HK_RETRIED);
        } else if (m->settle == TM_SETTLE_DEAD) {
            atomic_fetch_add_explicit(&t->stats.dead_lettered, 1,
                                      memory_order_relaxed);
            hist_note(t, TM_HK_DEAD);
        }
        report(t, m);
    }
    settle_list(g, rev);
}

/* tm_settle_carry adds src to dst (dst = NULL: copy), counter by counter;
 * sub, when given, is taken off. Only the settle thread of dst's
 * generation writes dst, so plain load + store is enough. */
void tm_settle_carry(struct tm_task_stats *dst,
                           const struct tm_task_stats *src,
                           const struct tm_task_stats *sub)
{
#define TM_CARRY(f)                                                        \
    atomic_store_explicit(                                                 \
        &dst->f,                                                           \
        atomic_load_explicit(&dst->f, memory_order_relaxed) +              \
            atomic_load_explicit(&src->f, memory_order_relaxed) -          \
            (sub != NULL ? atomic_load_explicit(&sub->f,                   \
                                                memory_order_relaxed)      \
                         : 0),                                             \
        memory_order_relaxed)
    for (int o = 0; o < TM_OUT_COUNT; o++)
        TM_CARRY(outcomes[o]);
    for (int b = 0; b <= TM_HIST_N; b++)
        TM_CARRY(hist[b]);
    TM_CARRY(retries);
    TM_CARRY(dead_lettered);
    TM_CARRY(replies_refused);
    TM_CARRY(dur_sum_us);
#undef TM_CARRY
    /* written by the intake threads, which may run during a fold: added,
     * not stored */
    atomic_fetch_add_explicit(
        &dst->rate_limited,
        atomic_load_explicit(&src->rate_limited, memory_order_relaxed) -
            (sub != NULL ? atomic_load_explicit(&sub->rate_limited,
                                                memory_order_relaxed)
                         : 0),
        memory_order_relaxed);
}

/* fold adds what the previous generation counted after this one started,
 * once it has stopped: counters never go back across a reload. */
static void fold(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->snap_from[i] >= 0)
            tm_settle_carry(&g->tasks[i].stats,
                           &g->prev->tasks[g->snap_from[i]].stats,
                           &g->snap[i]);
    atomic_store(&g->folded, 1);
}

void *tm_settle_main(void *arg)
{
    struct tm_gen *g = arg;
    struct tm_broker *b = g->broker;
    int64_t last_resettle = 0, next_tick = 0;
    int64_t tick_ms =
        b->ops->consume->tick_ms != NULL ? b->ops->consume->tick_ms(b) : 1000;
    if (tick_ms > 1000)
        tick_ms = 1000;
    tm_beat_start(&g->settle_beat);
    for (;;) {
        tm_beat_tick(&g->settle_beat);
        struct pollfd pfd = {.fd = g->done_fd, .events = POLLIN};
        int timeout = g->unsettled != NULL ? TM_RESETTLE_MS : (int)tick_ms;
        if (atomic_load_explicit(&g->done_head, memory_order_acquire) ==
            NULL)
            poll(&pfd, 1, timeout);
        uint64_t cnt;
        if (read(g->done_fd, &cnt, sizeof cnt) < 0) {
            /* EAGAIN: nothing signalled */
        }
        struct tm_msg *list = atomic_exchange_explicit(
            &g->done_head, NULL, memory_order_acquire);
        if (list != NULL)
            settle_batch(g, list);
        if (g->prev != NULL && !atomic_load(&g->folded) &&
            atomic_load(&g->prev_done))
            fold(g);
        int64_t now = tm_now_ms();
        if (b->ops->consume->tick != NULL && now >= next_tick &&
            !atomic_load(&g->stopping)) {
            next_tick = now + tick_ms;
            tm_beat_io_begin(&g->settle_beat);
            b->ops->consume->tick(b);
            tm_beat_io_end(&g->settle_beat);
        }
        if (g->unsettled != NULL && now - last_resettle >= TM_RESETTLE_MS) {
            last_resettle = now;
            struct tm_msg *again = g->unsettled;
            g->unsettled = NULL;
            settle_list(g, again);
        }
        if (atomic_load(&g->settle_stop) &&
            atomic_load(&g->done_head) == NULL) {
            if (g->unsettled == NULL)
                break;
            if (tm_now_ns() >= g->settle_deadline_ns) {
                size_t left = 0;
                for (struct tm_msg *m = g->unsettled; m; m = m->next)
                    left++;
                tm_log_err(TM_DAEMON_SRC, "%zu finished messages could not be "
                           "acknowledged before the deadline; the broker "
                           "will deliver them again", left);
                break;
            }
        }
    }
    tm_beat_stop(&g->settle_beat);
    return NULL;
}

