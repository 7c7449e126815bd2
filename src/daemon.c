/* daemon.c - lifecycle, signals, intake threads and the settle thread. */
#include "daemon.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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

int tm_tasks_load(const struct tm_cfg *cfg, struct tm_task *tasks,
                  char *err, size_t errlen)
{
    char reason[512];
    for (size_t i = 0; i < cfg->ntasks; i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        tasks[i].cfg = t;
        tasks[i].index = i;
        tasks[i].plugin = tm_plugin_load(t->plugin_path, reason,
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
        return -1;
    }
    return 0;
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
    struct tm_daemon *d = ctx;
    if (list == NULL)
        return;
    struct tm_msg *tail = list;
    while (tail->next != NULL)
        tail = tail->next;
    struct tm_msg *old = atomic_load_explicit(&d->done_head,
                                              memory_order_relaxed);
    do {
        tail->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &d->done_head, &old, list, memory_order_release,
        memory_order_relaxed));
    if (old == NULL) {
        /* the stack was empty: the settle thread may be asleep */
        uint64_t one = 1;
        if (write(d->done_fd, &one, sizeof one) < 0) {
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
    struct tm_task_stats *s = &t->stats;
    atomic_fetch_add_explicit(&s->outcomes[m->outcome], 1,
                              memory_order_relaxed);
    if (m->outcome == TM_OUT_INVALID && m->t_start_ns == 0)
        return;
    double sec = (double)(m->t_end_ns - m->t_start_ns) / 1e9;
    size_t b = 0;
    while (b < TM_HIST_N && sec > bounds[b])
        b++;
    atomic_fetch_add_explicit(&s->hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->dur_sum_us,
                              (unsigned long long)(sec * 1e6),
                              memory_order_relaxed);
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

static void room_made(struct tm_daemon *d, struct tm_task *t)
{
    if (atomic_load_explicit(&t->waiting_room, memory_order_relaxed)) {
        pthread_mutex_lock(&d->stop_mu);
        pthread_cond_broadcast(&d->stop_cv);
        pthread_mutex_unlock(&d->stop_mu);
    }
}

/* finish drops messages whose settlement is done (or was never needed). */
static void finish(struct tm_daemon *d, struct tm_msg **v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = v[i];
        if (m == NULL)
            continue;
        struct tm_task *t = m->task;
        atomic_fetch_sub_explicit(&t->stats.inflight, 1,
                                  memory_order_relaxed);
        tm_msg_release(m);
        room_made(d, t);
    }
}

/* settle_list hands the list to the broker and keeps what failed. */
static void settle_list(struct tm_daemon *d, struct tm_msg *list)
{
    size_t n = 0;
    for (struct tm_msg *m = list; m != NULL; m = m->next)
        n++;
    if (n == 0)
        return;
    if (n > d->scratch_cap) {
        d->scratch_cap = n * 2;
        d->scratch = tm_realloc(d->scratch, d->scratch_cap *
                                                sizeof *d->scratch);
    }
    n = 0;
    for (struct tm_msg *m = list; m != NULL; m = m->next)
        d->scratch[n++] = m;
    struct tm_msg *failed = NULL;
    d->broker->ops->settle(d->broker, list, &failed);
    if (failed != NULL) {
        /* keep the failed ones out of finish(); they go to unsettled */
        for (struct tm_msg *m = failed; m != NULL; m = m->next)
            for (size_t i = 0; i < n; i++)
                if (d->scratch[i] == m) {
                    d->scratch[i] = NULL;
                    break;
                }
        struct tm_msg *tail = failed;
        while (tail->next != NULL)
            tail = tail->next;
        tail->next = d->unsettled;
        d->unsettled = failed;
    }
    finish(d, d->scratch, n);
}

static void settle_batch(struct tm_daemon *d, struct tm_msg *list)
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
        if (m->settle == TM_SETTLE_RETRY)
            atomic_fetch_add_explicit(&t->stats.retries, 1,
                                      memory_order_relaxed);
        else if (m->settle == TM_SETTLE_DEAD)
            atomic_fetch_add_explicit(&t->stats.dead_lettered, 1,
                                      memory_order_relaxed);
        report(t, m);
    }
    settle_list(d, rev);
}

static void *settle_main(void *arg)
{
    struct tm_daemon *d = arg;
    struct tm_broker *b = d->broker;
    int64_t last_resettle = 0, next_tick = 0;
    int64_t tick_ms = b->ops->tick_ms != NULL ? b->ops->tick_ms(b) : 1000;
    if (tick_ms > 1000)
        tick_ms = 1000;
    for (;;) {
        atomic_store(&d->settle_tick_ms, tm_now_ms());
        struct pollfd pfd = {.fd = d->done_fd, .events = POLLIN};
        int timeout = d->unsettled != NULL ? TM_RESETTLE_MS : (int)tick_ms;
        if (atomic_load_explicit(&d->done_head, memory_order_acquire) ==
            NULL)
            poll(&pfd, 1, timeout);
        uint64_t cnt;
        if (read(d->done_fd, &cnt, sizeof cnt) < 0) {
            /* EAGAIN: nothing signalled */
        }
        struct tm_msg *list = atomic_exchange_explicit(
            &d->done_head, NULL, memory_order_acquire);
        if (list != NULL)
            settle_batch(d, list);
        int64_t now = tm_now_ms();
        if (b->ops->tick != NULL && now >= next_tick &&
            atomic_load(&d->state) == TM_STATE_RUNNING) {
            next_tick = now + tick_ms;
            b->ops->tick(b);
        }
        if (d->unsettled != NULL && now - last_resettle >= TM_RESETTLE_MS) {
            last_resettle = now;
            struct tm_msg *again = d->unsettled;
            d->unsettled = NULL;
            settle_list(d, again);
        }
        if (atomic_load(&d->settle_stop) &&
            atomic_load(&d->done_head) == NULL) {
            if (d->unsettled == NULL)
                break;
            if (tm_now_ns() >= d->settle_deadline_ns) {
                size_t left = 0;
                for (struct tm_msg *m = d->unsettled; m; m = m->next)
                    left++;
                tm_log_err(SRC, "%zu finished messages could not be "
                           "acknowledged before the shutdown deadline; "
                           "the broker will deliver them again", left);
                break;
            }
        }
    }
    return NULL;
}

/* ---- intake threads ----------------------------------------------------- */

/* wait_ms waits until ms pass, the daemon stops, or room is made. */
static void wait_ms(struct tm_daemon *d, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->stop_mu);
    if (!atomic_load(&d->stopping))
        pthread_cond_timedwait(&d->stop_cv, &d->stop_mu, &ts);
    pthread_mutex_unlock(&d->stop_mu);
}

static int64_t jittered(int64_t ms)
{
    return ms + (int64_t)(tm_rand64() % (uint64_t)(ms / 2 + 1));
}

static void *intake_main(void *arg)
{
    struct tm_task *t = arg;
    struct tm_daemon *d = t->daemon;
    struct tm_broker *b = d->broker;
    int64_t backoff = TM_RECONNECT_MIN_MS;
    long prefetch = (long)t->cfg->prefetch;

    while (!atomic_load(&d->stopping)) {
        long room = prefetch - (long)atomic_load(&t->stats.inflight);
        if (room <= 0) {
            atomic_store(&t->waiting_room, 1);
            room = prefetch - (long)atomic_load(&t->stats.inflight);
            if (room <= 0)
                wait_ms(d, 100);
            atomic_store(&t->waiting_room, 0);
            continue;
        }
        struct tm_batch *batch = NULL;
        int n = b->ops->fetch(b, t->index, (size_t)room, TM_FETCH_BLOCK_MS,
                              &batch);
        if (n < 0) {
            atomic_store(&t->subscribed, 0);
            wait_ms(d, jittered(backoff));
            backoff = backoff * 2 > TM_RECONNECT_MAX_MS ? TM_RECONNECT_MAX_MS
                                                        : backoff * 2;
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
        size_t acc = d->pool->ops->submit(d->pool, batch->msgs, total);
        for (size_t i = acc; i < total; i++) {
            /* the pool is draining: leave these unacknowledged */
            atomic_fetch_sub(&t->stats.inflight, 1);
            tm_msg_release(&batch->msgs[i]);
        }
    }
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
            tm_log_warn(SRC, "SIGHUP: configuration reload is not "
                        "supported by this version; ignored");
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
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->stop_mu);
    if (!stop_requested(d))
        pthread_cond_timedwait(&d->stop_cv, &d->stop_mu, &ts);
    pthread_mutex_unlock(&d->stop_mu);
    atomic_store(&d->main_tick_ms, tm_now_ms());
}

int tm_daemon_run(struct tm_cfg *cfg)
{
    struct tm_daemon *d = &the_daemon;
    char err[1024];
    int status = 1;
    memset(d, 0, sizeof *d);
    d->cfg = cfg;
    d->ntasks = cfg->ntasks;
    d->start_wall_ms = tm_wall_ms();
    d->start_mono_ms = tm_now_ms();
    atomic_store(&d->state, TM_STATE_STARTING);
    atomic_store(&d->main_tick_ms, tm_now_ms());
    atomic_store(&d->settle_tick_ms, tm_now_ms());
    pthread_mutex_init(&d->stop_mu, NULL);
    pthread_cond_init(&d->stop_cv, NULL);
    d->done_fd = -1;

    /* signals are taken by one thread; every other thread blocks them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    d->tasks = tm_calloc(d->ntasks, sizeof *d->tasks);
    d->task_ptrs = tm_calloc(d->ntasks, sizeof *d->task_ptrs);
    for (size_t i = 0; i < d->ntasks; i++) {
        d->tasks[i].daemon = d;
        d->task_ptrs[i] = &d->tasks[i];
    }
    if (tm_tasks_load(cfg, d->tasks, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        status = 2;
        goto out_tasks;
    }

    d->broker = tm_broker_new(cfg, err, sizeof err);
    if (d->broker == NULL) {
        tm_log_err(SRC, "%s", err);
        goto out_tasks;
    }
    const struct tm_pool_ops *pops = tm_pool_ops_for(cfg->pool_kind);
    if (pops == NULL) {
        tm_log_err(SRC, "pool kind not supported by this build");
        goto out_broker;
    }
    d->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->done_fd < 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_err(SRC, "eventfd: %s", tm_strerror(errno, eb, sizeof eb));
        goto out_broker;
    }
    d->pool = pops->create(cfg, d->task_ptrs, d->ntasks, cb_pool_done, d);
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_main, d);
    pthread_detach(sig_thread);

    if (cfg->http_listen != NULL) {
        d->http = tm_http_start(d, err, sizeof err);
        if (d->http == NULL) {
            tm_log_err("http", "%s", err);
            goto out_pool;
        }
    }
    if (d->pool->ops->start(d->pool) != 0) {
        tm_log_err(SRC, "cannot start the %s pool", pops->kind);
        goto out_http;
    }
    if (pthread_create(&d->settle_thread, NULL, settle_main, d) != 0) {
        tm_log_err(SRC, "cannot start the settle thread");
        d->pool->ops->drain(d->pool, tm_now_ns());
        goto out_pool_started;
    }

    /* a broker unreachable at start is retried, never fatal */
    int64_t backoff = TM_RECONNECT_MIN_MS;
    int logged = 0;
    while (!stop_requested(d)) {
        if (d->broker->ops->connect(d->broker) == 0)
            break;
        if (!logged || tm_log_enabled(TM_LOG_DEBUG))
            tm_log_warn("broker", "%s; retrying", d->broker->errstr);
        logged = 1;
        main_wait(d, jittered(backoff));
        backoff = backoff * 2 > TM_RECONNECT_MAX_MS ? TM_RECONNECT_MAX_MS
                                                    : backoff * 2;
    }
    if (!stop_requested(d)) {
        for (size_t i = 0; i < d->ntasks; i++) {
            if (pthread_create(&d->tasks[i].intake, NULL, intake_main,
                               &d->tasks[i]) == 0)
                d->tasks[i].intake_started = 1;
        }
        atomic_store(&d->state, TM_STATE_RUNNING);
        tm_log_info(SRC, "taskmill %s running: %zu task(s), %s pool of %u, "
                    "broker %s", TM_VERSION, d->ntasks, pops->kind,
                    cfg->pool_size, cfg->url.redacted);
    }
    int64_t wd_ms = tm_notify_watchdog_ms();
    int64_t period = wd_ms > 0 && wd_ms < 1000 ? wd_ms : 1000;
    int ready = 0;
    int64_t next_status = 0;
    while (!stop_requested(d)) {
        main_wait(d, period);
        if (wd_ms > 0)
            tm_notify("WATCHDOG=1");
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

    /* graceful stop: intake first, then running work, then settlement */
    atomic_store(&d->state, TM_STATE_STOPPING);
    atomic_store(&d->stopping, 1);
    pthread_mutex_lock(&d->stop_mu);
    pthread_cond_broadcast(&d->stop_cv);
    pthread_mutex_unlock(&d->stop_mu);
    d->broker->ops->wake(d->broker);
    int64_t deadline = tm_now_ns() + cfg->shutdown_timeout_ms * 1000000LL;
    int drained = d->pool->ops->drain(d->pool, deadline);
    for (size_t i = 0; i < d->ntasks; i++)
        if (d->tasks[i].intake_started)
            pthread_join(d->tasks[i].intake, NULL);
    if (drained != 0) {
        atomic_store(&tm_exec_abandon, 1);
        tm_log_err(SRC, "shutdown_timeout of %lld ms reached with tasks "
                   "still running; they are abandoned and will be "
                   "delivered again", (long long)cfg->shutdown_timeout_ms);
    }
    /* finished messages still get acknowledged, within a short grace */
    d->settle_deadline_ns = (drained == 0 ? deadline : tm_now_ns()) +
                            2000000000LL;
    atomic_store(&d->settle_stop, 1);
    {
        uint64_t one = 1;
        if (write(d->done_fd, &one, sizeof one) < 0) {
            /* already signalled */
        }
    }
    pthread_join(d->settle_thread, NULL);
    status = drained == 0 && d->unsettled == NULL ? 0 : 1;
    if (status == 0)
        tm_log_info(SRC, "stopped cleanly");
    if (drained != 0) {
        /* workers may still be inside task code: stop (or kill) the pool,
         * but do not unload the plugins under running threads */
        tm_http_stop(d->http);
        d->pool->ops->destroy(d->pool);
        return status;
    }
out_pool_started:
out_http:
    tm_http_stop(d->http);
    d->http = NULL;
out_pool:
    d->pool->ops->destroy(d->pool);
    if (d->done_fd >= 0)
        close(d->done_fd);
    /* whatever settlement failed is left for redelivery */
    while (d->unsettled != NULL) {
        struct tm_msg *m = d->unsettled;
        d->unsettled = m->next;
        tm_msg_release(m);
    }
out_broker:
    if (d->broker != NULL)
        d->broker->ops->destroy(d->broker);
    d->broker = NULL;
out_tasks:
    tm_tasks_unload(d->tasks, d->ntasks);
    tm_free(d->tasks);
    tm_free(d->task_ptrs);
    tm_free(d->scratch);
    tm_cfg_free(cfg);
    return status;
}
