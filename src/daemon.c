/* daemon.c - lifecycle, signals, intake threads and the settle thread. */
#include "daemon.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "util.h"

#define SRC "daemon"

/* How long one blocking broker read may wait before intake looks at its
 * stop flag again. */
#define TM_FETCH_BLOCK_MS 250
/* Reconnect backoff: first delay and cap. */
#define TM_RECONNECT_MIN_MS 100
#define TM_RECONNECT_MAX_MS 5000
/* A loop that has not ticked for this long is considered wedged. */
#define TM_ALIVE_MS 10000
/* How often failed settlements are tried again. */
#define TM_RESETTLE_MS 500

/* ---- plugins -------------------------------------------------------- */

/* same_task says whether a task's configuration is unchanged, so that a
 * reload may keep its plugin, task data and all, running. */
static int same_task(const struct tm_cfg_task *a, const struct tm_cfg_task *b)
{
    return strcmp(a->name, b->name) == 0 &&
           strcmp(a->plugin_path, b->plugin_path) == 0 &&
           strcmp(a->queue, b->queue) == 0 &&
           strcmp(a->group, b->group) == 0 && a->prefetch == b->prefetch &&
           a->timeout_ms == b->timeout_ms &&
           a->claim_idle_ms == b->claim_idle_ms && a->maxlen == b->maxlen &&
           a->on_error == b->on_error && a->max_retries == b->max_retries &&
           a->backoff_ms == b->backoff_ms &&
           a->max_backoff_ms == b->max_backoff_ms &&
           strcmp(a->dead_letter, b->dead_letter) == 0 &&
           a->max_payload == b->max_payload &&
           a->max_priority == b->max_priority && a->priority == b->priority &&
           strcmp(a->config_json, b->config_json) == 0;
}

/* load_tasks loads and initialises the plugins of cfg's tasks. With prev
 * (a reload), an unchanged task keeps prev's plugin, and a plugin file
 * that changed since prev loaded it is loaded from a fresh copy. */
static int load_tasks(const struct tm_cfg *cfg, struct tm_task *tasks,
                      const struct tm_gen *prev, char *err, size_t errlen)
{
    char reason[512];
    int rc = -1;
    /* whether each of prev's plugin files changed: one stat each */
    size_t nprev = prev != NULL ? prev->ntasks : 0;
    char *changed = tm_calloc(nprev ? nprev : 1, 1);
    for (size_t j = 0; j < nprev; j++)
        changed[j] = (char)tm_plugin_changed(prev->tasks[j].plugin);
    for (size_t i = 0; i < cfg->ntasks; i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        tasks[i].cfg = t;
        tasks[i].index = i;
        int fresh = 0;
        for (size_t j = 0; j < nprev; j++) {
            const struct tm_task *o = &prev->tasks[j];
            if (!changed[j] && same_task(o->cfg, t)) {
                tm_plugin_ref(o->plugin);
                tasks[i].plugin = o->plugin;
                break;
            }
            if (changed[j] && strcmp(o->plugin->path, t->plugin_path) == 0)
                fresh = 1;
        }
        if (tasks[i].plugin != NULL)
            continue;
        tasks[i].plugin = fresh ? tm_plugin_load_fresh(t->plugin_path, reason,
                                                       sizeof reason)
                                : tm_plugin_load(t->plugin_path, reason,
                                                 sizeof reason);
        if (tasks[i].plugin == NULL)
            goto fail;
        for (size_t j = 0; j < i; j++) {
            const struct tm_plugin *o = tasks[j].plugin;
            if (strcmp(o->desc.name, tasks[i].plugin->desc.name) == 0 &&
                strcmp(o->path, tasks[i].plugin->path) != 0) {
                tm_snprintf(reason, sizeof reason,
                            "%s: plugin name '%s' is already loaded from %s",
                            t->plugin_path, o->desc.name, o->path);
                goto fail;
            }
        }
        struct tm_task_env env = {
            .struct_size = sizeof env,
            .task = t->name,
            .queue = t->queue,
            .config_json = t->config_json,
            .host = tm_exec_host(),
        };
        if (tm_plugin_init(tasks[i].plugin, &env, reason,
                           sizeof reason) != 0)
            goto fail;
        continue;
    fail:
        tm_snprintf(err, errlen, "%s:%d:%d: tasks.%s.plugin: %s", cfg->path,
                    t->plugin_at.line, t->plugin_at.col, t->name, reason);
        goto out;
    }
    rc = 0;
out:
    tm_free(changed);
    return rc;
}

int tm_tasks_load(const struct tm_cfg *cfg, struct tm_task *tasks,
                  char *err, size_t errlen)
{
    return load_tasks(cfg, tasks, NULL, err, errlen);
}

void tm_tasks_unload(struct tm_task *tasks, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        tm_plugin_free(tasks[i].plugin);
        tasks[i].plugin = NULL;
    }
}

/* ---- readiness -------------------------------------------------------- */

int tm_daemon_ready(struct tm_daemon *d, char *why, size_t size)
{
    int st = atomic_load(&d->state);
    if (st == TM_STATE_STARTING) {
        tm_snprintf(why, size, "starting");
        return 0;
    }
    if (st == TM_STATE_STOPPING) {
        tm_snprintf(why, size, "stopping");
        return 0;
    }
    if (!atomic_load(&d->broker->up)) {
        tm_snprintf(why, size, "broker disconnected");
        return 0;
    }
    for (size_t i = 0; i < d->ntasks; i++) {
        if (!atomic_load(&d->tasks[i].subscribed)) {
            tm_snprintf(why, size, "task '%s' not subscribed",
                        d->tasks[i].cfg->name);
            return 0;
        }
    }
    if (!tm_daemon_alive(d)) {
        tm_snprintf(why, size, "consume loop not responsive");
        return 0;
    }
    return 1;
}

int tm_daemon_alive(struct tm_daemon *d)
{
    int64_t now = tm_now_ms();
    return now - atomic_load(&d->main_tick_ms) < TM_ALIVE_MS &&
           now - atomic_load(&d->settle_tick_ms) < TM_ALIVE_MS;
}

/* ---- completion stack ------------------------------------------------- */

static void cb_pool_done(void *ctx, struct tm_msg *list)
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
    /* the attempt ended when it ran out, or when it was read (an invalid
     * body never runs) */
    int64_t ended = m->t_end_ns != 0 ? m->t_end_ns : m->t_recv_ns;
    tm_rate_note(&s->rate, ended != 0 ? ended : tm_now_ns());
    if (m->outcome == TM_OUT_INVALID && m->t_start_ns == 0)
        return;
    int64_t ns = m->t_end_ns - m->t_start_ns;
    tm_durwin_note(&s->durs, ns);
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
    const char *err = m->error != NULL ? m->error : "";
    const char *out = tm_outcome_label(m->outcome);
    switch (m->settle) {
    case TM_SETTLE_RETRY:
        tm_log_write(TM_LOG_WARNING, "task", t->cfg->name, m->id,
                     "attempt %u %s: %s; retry in %lld ms", m->attempt, out,
                     err, (long long)m->retry_delay_ms);
        break;
    case TM_SETTLE_DEAD:
        tm_log_write(TM_LOG_WARNING, "task", t->cfg->name, m->id,
                     "attempt %u %s: %s; dead-lettered to '%s'", m->attempt,
                     out, err, t->cfg->dead_letter);
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
    }
}

/* finish drops messages whose settlement is done (or was never needed). */
static void finish(struct tm_gen *g, struct tm_msg **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = v[i];
        struct tm_task *t = m->task;
        atomic_fetch_sub_explicit(&t->stats.inflight, 1,
                                  memory_order_relaxed);
        tm_msg_release(m);
        room_made(g, t);
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
    size_t failed = g->broker->ops->settle(g->broker, g->scratch, n);
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
        if (m->outcome == TM_OUT_NONE)
            continue;
        stats_record(t, m);
        tm_circuit_note(&t->circuit, t->cfg, m->outcome);
        if (m->settle == TM_SETTLE_RETRY)
            atomic_fetch_add_explicit(&t->stats.retries, 1,
                                      memory_order_relaxed);
        else if (m->settle == TM_SETTLE_DEAD)
            atomic_fetch_add_explicit(&t->stats.dead_lettered, 1,
                                      memory_order_relaxed);
        report(t, m);
    }
    settle_list(g, rev);
}

/* carry_counters adds src to dst (dst = NULL: copy), counter by counter;
 * sub, when given, is taken off. Only the settle thread of dst's
 * generation writes dst, so plain load + store is enough. */
static void carry_counters(struct tm_task_stats *dst,
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
    TM_CARRY(dur_sum_us);
#undef TM_CARRY
}

/* fold adds what the previous generation counted after this one started,
 * once it has stopped: counters never go back across a reload. */
static void fold(struct tm_gen *g)
{
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->snap_from[i] >= 0)
            carry_counters(&g->tasks[i].stats,
                           &g->prev->tasks[g->snap_from[i]].stats,
                           &g->snap[i]);
    atomic_store(&g->folded, 1);
}

static void *settle_main(void *arg)
{
    struct tm_gen *g = arg;
    struct tm_daemon *d = g->d;
    struct tm_broker *b = g->broker;
    int64_t last_resettle = 0, next_tick = 0;
    int64_t tick_ms = b->ops->tick_ms != NULL ? b->ops->tick_ms(b) : 1000;
    if (tick_ms > 1000)
        tick_ms = 1000;
    for (;;) {
        if (d->gen == g)
            atomic_store(&d->settle_tick_ms, tm_now_ms());
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
        if (b->ops->tick != NULL && now >= next_tick &&
            !atomic_load(&g->stopping)) {
            next_tick = now + tick_ms;
            b->ops->tick(b);
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
                tm_log_err(SRC, "%zu finished messages could not be "
                           "acknowledged before the deadline; the broker "
                           "will deliver them again", left);
                break;
            }
        }
    }
    return NULL;
}

/* ---- intake threads ----------------------------------------------------- */

/* wait_ms waits until ms pass, the generation stops, or room is made. */
static void wait_ms(struct tm_gen *g, int64_t ms)
{
    pthread_mutex_lock(&g->mu);
    if (!atomic_load(&g->stopping))
        tm_cond_wait_ns(&g->cv, &g->mu, ms * 1000000LL);
    pthread_mutex_unlock(&g->mu);
}

static int64_t jittered(int64_t ms)
{
    return ms + (int64_t)(tm_rand64() % (uint64_t)(ms / 2 + 1));
}

/* next_backoff doubles a reconnect delay up to its cap. */
static int64_t next_backoff(int64_t ms)
{
    return ms * 2 > TM_RECONNECT_MAX_MS ? TM_RECONNECT_MAX_MS : ms * 2;
}

static void *intake_main(void *arg)
{
    struct tm_task *t = arg;
    struct tm_gen *g = t->gen;
    struct tm_broker *b = g->broker;
    int64_t backoff = TM_RECONNECT_MIN_MS;
    long prefetch = (long)t->cfg->prefetch;

    while (!atomic_load(&g->stopping)) {
        long room = prefetch - (long)atomic_load(&t->stats.inflight);
        if (room <= 0) {
            atomic_store(&t->waiting_room, 1);
            room = prefetch - (long)atomic_load(&t->stats.inflight);
            if (room <= 0)
                wait_ms(g, 100);
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
        struct tm_batch *batch = NULL;
        int n = b->ops->fetch(b, t->index, (size_t)room, TM_FETCH_BLOCK_MS,
                              &batch);
        if (n < 0) {
            atomic_store(&t->subscribed, 0);
            wait_ms(g, jittered(backoff));
            backoff = next_backoff(backoff);
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

/* ---- generations -------------------------------------------------------- */

/* gen_free releases what gen_create made; the generation is stopped. */
static void gen_free(struct tm_gen *g)
{
    if (g == NULL)
        return;
    if (g->pool != NULL)
        g->pool->ops->destroy(g->pool);
    while (g->unsettled != NULL) {
        /* whatever settlement failed is left for redelivery */
        struct tm_msg *m = g->unsettled;
        g->unsettled = m->next;
        tm_msg_release(m);
    }
    if (g->broker != NULL)
        g->broker->ops->destroy(g->broker);
    if (g->done_fd >= 0)
        close(g->done_fd);
    tm_tasks_unload(g->tasks, g->ntasks);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    tm_free(g->tasks);
    tm_free(g->task_ptrs);
    tm_free(g->scratch);
    tm_free(g->snap);
    tm_free(g->snap_from);
    tm_cfg_free(g->cfg);
    tm_free(g);
}

/* gen_create loads a generation for cfg (taken over, also on failure):
 * plugins, broker adapter, pool (not started). With prev, unchanged tasks
 * keep their plugins and every task keeps its counters. Returns NULL with
 * one line in err. */
static struct tm_gen *gen_create(struct tm_daemon *d, struct tm_cfg *cfg,
                                 struct tm_gen *prev, char *err,
                                 size_t errlen)
{
    struct tm_gen *g = tm_calloc(1, sizeof *g);
    g->d = d;
    g->id = ++d->gens;
    g->cfg = cfg;
    g->ntasks = cfg->ntasks;
    g->done_fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->tasks = tm_calloc(g->ntasks, sizeof *g->tasks);
    g->task_ptrs = tm_calloc(g->ntasks, sizeof *g->task_ptrs);
    for (size_t i = 0; i < g->ntasks; i++) {
        g->tasks[i].gen = g;
        g->task_ptrs[i] = &g->tasks[i];
    }
    if (load_tasks(cfg, g->tasks, prev, err, errlen) != 0)
        goto fail;
    g->broker = tm_broker_new(cfg, err, errlen);
    if (g->broker == NULL)
        goto fail;
    g->broker->resumed = prev != NULL;
    const struct tm_pool_ops *pops = tm_pool_ops_for(cfg->pool_kind);
    if (pops == NULL) {
        tm_snprintf(err, errlen, "pool kind not supported by this build");
        goto fail;
    }
    g->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g->done_fd < 0) {
        char eb[TM_STRERRNO_BUF];
        tm_snprintf(err, errlen, "eventfd: %s",
                    tm_strerror(errno, eb, sizeof eb));
        goto fail;
    }
    g->pool = pops->create(cfg, g->task_ptrs, g->ntasks, cb_pool_done, g);
    if (prev != NULL) {
        g->prev = prev;
        g->snap = tm_calloc(g->ntasks, sizeof *g->snap);
        g->snap_from = tm_calloc(g->ntasks, sizeof *g->snap_from);
        for (size_t i = 0; i < g->ntasks; i++) {
            g->snap_from[i] = -1;
            for (size_t j = 0; j < prev->ntasks; j++) {
                if (strcmp(prev->tasks[j].cfg->name,
                           g->tasks[i].cfg->name) != 0)
                    continue;
                /* snap holds what was copied; the rest is folded later */
                const struct tm_task_stats *old = &prev->tasks[j].stats;
                carry_counters(&g->snap[i], old, NULL);
                carry_counters(&g->tasks[i].stats, &g->snap[i], NULL);
                g->tasks[i].stats.rate = old->rate;
                g->tasks[i].stats.durs = old->durs;
                g->snap_from[i] = (long)j;
            }
        }
    }
    return g;
fail:
    gen_free(g);
    return NULL;
}

static void start_intakes(struct tm_gen *g)
{
    atomic_store(&g->stopping, 0);
    for (size_t i = 0; i < g->ntasks; i++) {
        if (pthread_create(&g->tasks[i].intake, NULL, intake_main,
                           &g->tasks[i]) == 0)
            g->tasks[i].intake_started = 1;
        else
            tm_log_err(SRC, "task '%s': cannot start its intake thread",
                       g->tasks[i].cfg->name);
    }
}

/* stop_intakes stops reading new messages; what was read runs on. */
static void stop_intakes(struct tm_gen *g)
{
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->wake(g->broker);
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->tasks[i].intake_started) {
            pthread_join(g->tasks[i].intake, NULL);
            g->tasks[i].intake_started = 0;
        }
}

/* gen_start starts the pool, the settle thread and the intake threads. */
static int gen_start(struct tm_gen *g)
{
    if (g->pool->ops->start(g->pool) != 0) {
        tm_log_err(SRC, "cannot start the %s pool", g->pool->ops->kind);
        return -1;
    }
    if (pthread_create(&g->settle_thread, NULL, settle_main, g) != 0) {
        tm_log_err(SRC, "cannot start the settle thread");
        g->pool->ops->drain(g->pool, tm_now_ns());
        return -1;
    }
    g->settle_started = 1;
    start_intakes(g);
    return 0;
}

static long long gen_inflight(const struct tm_gen *g)
{
    long long n = 0;
    for (size_t i = 0; i < g->ntasks; i++)
        n += atomic_load(&g->tasks[i].stats.inflight);
    return n;
}

/*
 * gen_stop stops a started generation: intake first, then running work
 * until deadline_ns, then settlement. With finish_queued (a reload), the
 * messages it already holds run too; otherwise (shutdown) those not yet
 * started are left unacknowledged. Returns 0 when everything finished and
 * was settled, -1 when work was abandoned.
 */
static int gen_stop(struct tm_gen *g, int64_t deadline, int finish_queued)
{
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->wake(g->broker);
    int drained = 0;
    if (finish_queued) {
        stop_intakes(g);
        while (gen_inflight(g) > 0 && tm_now_ns() < deadline)
            tm_sleep_ms(10);
        drained = g->pool->ops->drain(g->pool, deadline);
    } else {
        drained = g->pool->ops->drain(g->pool, deadline);
        for (size_t i = 0; i < g->ntasks; i++)
            if (g->tasks[i].intake_started)
                pthread_join(g->tasks[i].intake, NULL);
    }
    for (size_t i = 0; i < g->ntasks; i++)
        g->tasks[i].intake_started = 0;
    if (drained != 0) {
        atomic_store(&tm_exec_abandon, 1);
        tm_log_err(SRC, "shutdown_timeout of %lld ms reached with tasks "
                   "still running; they are abandoned and will be "
                   "delivered again", (long long)g->cfg->shutdown_timeout_ms);
    }
    /* finished messages still get acknowledged, within a short grace */
    g->settle_deadline_ns = (drained == 0 ? deadline : tm_now_ns()) +
                            2000000000LL;
    atomic_store(&g->settle_stop, 1);
    uint64_t one = 1;
    if (write(g->done_fd, &one, sizeof one) < 0) {
        /* already signalled */
    }
    if (g->settle_started) {
        pthread_join(g->settle_thread, NULL);
        g->settle_started = 0;
    }
    return drained == 0 && g->unsettled == NULL ? 0 : -1;
}

/* publish makes g the generation HTTP and the main loop see. */
static void publish(struct tm_daemon *d, struct tm_gen *g)
{
    pthread_rwlock_wrlock(&d->gen_lock);
    d->gen = g;
    d->cfg = g->cfg;
    d->tasks = g->tasks;
    d->ntasks = g->ntasks;
    d->broker = g->broker;
    d->pool = g->pool;
    pthread_rwlock_unlock(&d->gen_lock);
}

/* ---- reload ------------------------------------------------------------- */

struct retire {
    struct tm_gen *old;
    struct tm_gen *next;
};

/* retire_main stops the replaced generation, lets the new one fold its
 * counters in, then frees it. */
static void *retire_main(void *arg)
{
    struct retire *r = arg;
    struct tm_daemon *d = r->old->d;
    int64_t deadline = tm_now_ns() +
                       r->old->cfg->shutdown_timeout_ms * 1000000LL;
    int rc = gen_stop(r->old, deadline, /* finish_queued = */ 1);
    /* what the old pool and broker counted after the swap */
    atomic_fetch_add(&d->restarts_before,
                     atomic_load(&r->old->pool->restarts) -
                         r->old->restarts_at_swap);
    atomic_fetch_add(&d->reconnects_before,
                     atomic_load(&r->old->broker->reconnects) -
                         r->old->reconnects_at_swap);
    atomic_store(&r->next->prev_done, 1);
    uint64_t one = 1;
    if (write(r->next->done_fd, &one, sizeof one) < 0) {
        /* awake anyway */
    }
    while (!atomic_load(&r->next->folded) && !atomic_load(&r->next->stopping))
        tm_sleep_ms(5);
    tm_log_info(SRC, "configuration %u retired%s", r->old->id,
                rc == 0 ? "" : " (some work abandoned, to be redelivered)");
    if (atomic_load(&r->next->folded)) {
        gen_free(r->old);
    }
    /* else the daemon is stopping before the new generation could take
     * the counters over; the process exits with the old one unfreed */
    tm_free(r);
    atomic_store(&d->retiring, 0);
    return NULL;
}

/* global_changes names keys a reload cannot apply; returns 0 when none. */
static int global_changes(const struct tm_cfg *a, const struct tm_cfg *b,
                          char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
#define TM_DIFF(cond, key)                                                 \
    do {                                                                   \
        if (cond)                                                          \
            n += tm_snprintf(buf + n, size - n, "%s%s", n ? ", " : "", key); \
    } while (0)
#define TM_STRNE(x, y) \
    (((x) == NULL) != ((y) == NULL) || ((x) != NULL && strcmp((x), (y)) != 0))
    TM_DIFF(TM_STRNE(a->broker_url, b->broker_url) ||
                TM_STRNE(a->url.password, b->url.password),
            "broker");
    TM_DIFF(a->pool_kind != b->pool_kind, "pool.kind");
    TM_DIFF(a->pool_size != b->pool_size, "pool.size");
    TM_DIFF(a->max_tasks_per_child != b->max_tasks_per_child,
            "pool.max_tasks_per_child");
    TM_DIFF(TM_STRNE(a->instance, b->instance), "instance");
    TM_DIFF(TM_STRNE(a->http_listen, b->http_listen), "http.listen");
    TM_DIFF(TM_STRNE(a->http_token, b->http_token), "http.token");
    TM_DIFF(a->plugin_watch != b->plugin_watch, "plugin_watch");
    TM_DIFF(TM_STRNE(a->plugin_dir, b->plugin_dir), "plugin_dir");
#undef TM_STRNE
#undef TM_DIFF
    return n > 0;
}

static void reload(struct tm_daemon *d)
{
    char err[1024];
    if (atomic_load(&d->retiring)) {
        /* one retirement at a time: try again on the next tick */
        atomic_store(&d->reload, 1);
        return;
    }
    struct tm_cfg *cfg = tm_cfg_load(d->config_path, err, sizeof err);
    if (cfg == NULL) {
        tm_log_err(SRC, "reload refused, the running configuration stays: "
                   "%s", err);
        return;
    }
    struct tm_gen *old = d->gen;
    char keys[256];
    if (global_changes(old->cfg, cfg, keys, sizeof keys)) {
        tm_log_err(SRC, "reload refused, the running configuration stays: "
                   "%s changed, which needs a restart", keys);
        tm_cfg_free(cfg);
        return;
    }
    tm_log_setup(cfg->log_level, cfg->log_format);
    struct tm_gen *g = gen_create(d, cfg, old, err, sizeof err);
    if (g == NULL) {
        tm_log_err(SRC, "reload refused, the running configuration stays: "
                   "%s", err);
        return;
    }
    /* the old intake stops before the new one starts, so that what
     * arrives from now on runs on the new configuration; what the old
     * one holds runs on to the end, on its own code */
    stop_intakes(old);
    if (gen_start(g) != 0) {
        tm_log_err(SRC, "reload refused, the running configuration stays: "
                   "the new configuration did not start");
        gen_stop(g, tm_now_ns(), 0);
        gen_free(g);
        start_intakes(old);
        return;
    }
    size_t added = 0, kept = 0, changed = 0, removed = 0;
    for (size_t i = 0; i < g->ntasks; i++) {
        long j = g->snap_from[i];
        if (j < 0)
            added++;
        else if (g->tasks[i].plugin == old->tasks[j].plugin)
            kept++;
        else
            changed++;
    }
    for (size_t j = 0; j < old->ntasks; j++) {
        int found = 0;
        for (size_t i = 0; i < g->ntasks; i++)
            if (g->snap_from[i] == (long)j)
                found = 1;
        removed += !found;
    }
    old->restarts_at_swap = atomic_load(&old->pool->restarts);
    old->reconnects_at_swap = atomic_load(&old->broker->reconnects);
    atomic_fetch_add(&d->restarts_before, old->restarts_at_swap);
    atomic_fetch_add(&d->reconnects_before, old->reconnects_at_swap);
    publish(d, g);
    tm_log_info(SRC, "reloaded %s as configuration %u: %zu task(s) added, "
                "%zu changed, %zu removed, %zu unchanged", d->config_path,
                g->id, added, changed, removed, kept);
    atomic_store(&d->retiring, 1);
    struct retire *r = tm_calloc(1, sizeof *r);
    r->old = old;
    r->next = g;
    pthread_t th;
    if (pthread_create(&th, NULL, retire_main, r) != 0) {
        retire_main(r);
        return;
    }
    pthread_detach(th);
}

/* ---- plugin_watch ------------------------------------------------------- */

/* watch_main asks for a reload when a .so file in plugin_dir is written,
 * replaced, added or removed; bursts (a copy, then a rename) are merged. */
static void *watch_main(void *arg)
{
    struct tm_daemon *d = arg;
    int fd = inotify_init1(IN_CLOEXEC);
    if (fd < 0 ||
        inotify_add_watch(fd, d->cfg->plugin_dir,
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE |
                              IN_DELETE | IN_MOVED_FROM | IN_ATTRIB) < 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_err(SRC, "plugin_watch: cannot watch %s: %s",
                   d->cfg->plugin_dir, tm_strerror(errno, eb, sizeof eb));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    tm_log_info(SRC, "plugin_watch: watching %s", d->cfg->plugin_dir);
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        int hit = 0;
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)(void *)p;
            size_t len = e->len ? strlen(e->name) : 0;
            if (len > 3 && strcmp(e->name + len - 3, ".so") == 0)
                hit = 1;
            p += sizeof *e + e->len;
        }
        if (!hit)
            continue;
        /* let the rest of an install land before reloading */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        while (poll(&pfd, 1, 300) > 0 && read(fd, buf, sizeof buf) > 0) {
        }
        tm_log_info(SRC, "plugin_watch: plugins changed in %s; reloading",
                    d->cfg->plugin_dir);
        atomic_store(&d->reload, 1);
        pthread_mutex_lock(&d->stop_mu);
        pthread_cond_broadcast(&d->stop_cv);
        pthread_mutex_unlock(&d->stop_mu);
    }
    close(fd);
    return NULL;
}

/* The daemon lives in static storage: the detached signal thread may still
 * look at it while the process exits. */
static struct tm_daemon the_daemon;

static const char *signame(int sig)
{
    switch (sig) {
    case SIGTERM:
        return "SIGTERM";
    case SIGINT:
        return "SIGINT";
    case SIGHUP:
        return "SIGHUP";
    default:
        return "signal";
    }
}

/* ---- signals ------------------------------------------------------------ */

static void *signal_main(void *arg)
{
    struct tm_daemon *d = arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            tm_log_info(SRC, "SIGHUP: reloading the configuration");
            atomic_store(&d->reload, 1);
            pthread_mutex_lock(&d->stop_mu);
            pthread_cond_broadcast(&d->stop_cv);
            pthread_mutex_unlock(&d->stop_mu);
            continue;
        }
        if (atomic_fetch_add(&d->signals, 1) >= 1) {
            tm_log_warn(SRC, "second %s: exiting now; unfinished messages "
                        "will be delivered again", signame(sig));
            _exit(1);
        }
        tm_log_info(SRC, "%s: stopping intake, finishing running tasks "
                    "(up to %lld ms)", signame(sig),
                    (long long)d->cfg->shutdown_timeout_ms);
        /* readiness turns 503 before intake stops */
        atomic_store(&d->state, TM_STATE_STOPPING);
        pthread_mutex_lock(&d->stop_mu);
        pthread_cond_broadcast(&d->stop_cv);
        pthread_mutex_unlock(&d->stop_mu);
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

/* notify_status sends the service manager a one-line summary. */
static void notify_status(struct tm_daemon *d)
{
    unsigned long long ok = 0, failed = 0;
    long long inflight = 0;
    for (size_t i = 0; i < d->ntasks; i++) {
        const struct tm_task_stats *s = &d->tasks[i].stats;
        for (int o = 1; o < TM_OUT_COUNT; o++) {
            unsigned long long v = atomic_load_explicit(
                &s->outcomes[o], memory_order_relaxed);
            if (o == TM_OUT_SUCCESS)
                ok += v;
            else
                failed += v;
        }
        inflight += atomic_load_explicit(&s->inflight, memory_order_relaxed);
    }
    char why[128] = "";
    int up = tm_daemon_ready(d, why, sizeof why);
    tm_notify_status("%s; %zu tasks, %llu succeeded, %llu failed, %lld in "
                     "flight, %u/%u workers busy",
                     up ? "running" : why, d->ntasks, ok, failed, inflight,
                     d->pool->ops->busy(d->pool), d->pool->size);
}

static int stop_requested(struct tm_daemon *d)
{
    return atomic_load(&d->signals) > 0;
}

/* main_wait sleeps up to ms or until a stop is requested, ticking. */
static void main_wait(struct tm_daemon *d, int64_t ms)
{
    atomic_store(&d->main_tick_ms, tm_now_ms());
    pthread_mutex_lock(&d->stop_mu);
    if (!stop_requested(d))
        tm_cond_wait_ns(&d->stop_cv, &d->stop_mu, ms * 1000000LL);
    pthread_mutex_unlock(&d->stop_mu);
    atomic_store(&d->main_tick_ms, tm_now_ms());
}

int tm_daemon_run(struct tm_cfg *cfg)
{
    struct tm_daemon *d = &the_daemon;
    char err[1024];
    int status = 1;
    memset(d, 0, sizeof *d);
    d->config_path = tm_strdup(cfg->path);
    d->start_wall_ms = tm_wall_ms();
    d->start_mono_ms = tm_now_ms();
    atomic_store(&d->state, TM_STATE_STARTING);
    atomic_store(&d->main_tick_ms, tm_now_ms());
    atomic_store(&d->settle_tick_ms, tm_now_ms());
    pthread_mutex_init(&d->stop_mu, NULL);
    pthread_cond_init(&d->stop_cv, NULL);
    pthread_rwlock_init(&d->gen_lock, NULL);

    /* signals are taken by one thread; every other thread blocks them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct tm_gen *g = gen_create(d, cfg, NULL, err, sizeof err);
    if (g == NULL) {
        /* plugin refusals are configuration errors at the plugin: key */
        int cfg_error = strncmp(err, d->config_path,
                                strlen(d->config_path)) == 0;
        if (cfg_error)
            fprintf(stderr, "%s\n", err);
        else
            tm_log_err(SRC, "%s", err);
        return cfg_error ? 2 : 1;
    }
    publish(d, g);
    /* the pool first: a fork pool's children are forked while this is
     * still the only thread, so no lock can be inherited held */
    if (g->pool->ops->start(g->pool) != 0) {
        tm_log_err(SRC, "cannot start the %s pool", g->pool->ops->kind);
        gen_free(g);
        return 1;
    }
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_main, d);
    pthread_detach(sig_thread);

    if (cfg->http_listen != NULL) {
        d->http = tm_http_start(d, err, sizeof err);
        if (d->http == NULL) {
            tm_log_err("http", "%s", err);
            g->pool->ops->drain(g->pool, tm_now_ns());
            gen_free(g);
            return 1;
        }
    }

    /* a broker unreachable at start is retried, never fatal */
    int64_t backoff = TM_RECONNECT_MIN_MS;
    int logged = 0;
    while (!stop_requested(d)) {
        if (g->broker->ops->connect(g->broker) == 0)
            break;
        if (g->broker->err == EINVAL) {
            /* the broker refused the configuration itself (a queue that
             * exists with other arguments): retrying cannot help */
            tm_log_err("broker", "%s", g->broker->errstr);
            g->pool->ops->drain(g->pool, tm_now_ns());
            tm_http_stop(d->http);
            gen_free(g);
            return 2;
        }
        if (!logged || tm_log_enabled(TM_LOG_DEBUG))
            tm_log_warn("broker", "%s; retrying", g->broker->errstr);
        logged = 1;
        main_wait(d, jittered(backoff));
        backoff = next_backoff(backoff);
    }
    if (pthread_create(&g->settle_thread, NULL, settle_main, g) != 0) {
        tm_log_err(SRC, "cannot start the settle thread");
        g->pool->ops->drain(g->pool, tm_now_ns());
        tm_http_stop(d->http);
        gen_free(g);
        return 1;
    }
    g->settle_started = 1;
    if (!stop_requested(d)) {
        start_intakes(g);
        atomic_store(&d->state, TM_STATE_RUNNING);
        tm_log_info(SRC, "taskmill %s running: %zu task(s), %s pool of %u, "
                    "broker %s", TM_VERSION, g->ntasks, g->pool->ops->kind,
                    cfg->pool_size, cfg->url.redacted);
    }
    pthread_t watch_thread;
    if (cfg->plugin_watch &&
        pthread_create(&watch_thread, NULL, watch_main, d) == 0)
        pthread_detach(watch_thread);

    int64_t wd_ms = tm_notify_watchdog_ms();
    int64_t period = wd_ms > 0 && wd_ms < 1000 ? wd_ms : 1000;
    int ready = 0;
    int64_t next_status = 0;
    while (!stop_requested(d)) {
        main_wait(d, period);
        if (wd_ms > 0)
            tm_notify("WATCHDOG=1");
        if (atomic_exchange(&d->reload, 0) && !stop_requested(d)) {
            tm_notify("RELOADING=1");
            reload(d);
            tm_notify("READY=1");
        }
        char why[128];
        if (!ready && tm_daemon_ready(d, why, sizeof why)) {
            ready = 1;
            tm_notify("READY=1");
            tm_log_info(SRC, "ready: every task is subscribed");
        }
        int64_t now = tm_now_ms();
        if (now >= next_status) {
            next_status = now + 5000;
            notify_status(d);
        }
    }
    tm_notify("STOPPING=1");

    /* graceful stop: readiness is already 503; intake first, then running
     * work, then settlement */
    atomic_store(&d->state, TM_STATE_STOPPING);
    g = d->gen;
    int64_t deadline = tm_now_ns() + g->cfg->shutdown_timeout_ms * 1000000LL;
    int rc = gen_stop(g, deadline, /* finish_queued = */ 0);
    /* a generation still being retired by a reload finishes too */
    while (atomic_load(&d->retiring) && tm_now_ns() < deadline)
        tm_sleep_ms(10);
    status = rc == 0 && !atomic_load(&d->retiring) ? 0 : 1;
    if (status == 0)
        tm_log_info(SRC, "stopped cleanly");
    tm_http_stop(d->http);
    d->http = NULL;
    if (atomic_load(&tm_exec_abandon)) {
        /* workers may still be inside task code: stop (or kill) the pool,
         * but do not unload the plugins under running threads */
        g->pool->ops->destroy(g->pool);
        return status;
    }
    gen_free(g);
    tm_free((void *)d->config_path);
    return status;
}
