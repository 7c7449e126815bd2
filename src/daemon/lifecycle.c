/* lifecycle.c - the daemon's start, main loop, signals and stop. */
#include "daemon_private.h"

#include <assert.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* the daemon's one HTTP header: it starts and stops the server */
#include "util/log.h"
#include "util/notify.h"
#include "daemon/fire.h"
#include "otel/otel.h"
#include "util/util.h"

/* How long the exit waits for a retired generation being freed (pool
 * and broker shutdown, plugin fini): seconds at most. */
#define TM_EXIT_FREE_WAIT_MS 10000
/* how long the spans still queued at a clean stop may take to leave */
#define TM_OTEL_FLUSH_MS 2000

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
            tm_log_info(TM_DAEMON_SRC, "SIGHUP: reloading the configuration");
            atomic_store(&d->reload, 1);
            pthread_mutex_lock(&d->stop_mu);
            pthread_cond_broadcast(&d->stop_cv);
            pthread_mutex_unlock(&d->stop_mu);
            continue;
        }
        if (atomic_fetch_add(&d->signals, 1) >= 1) {
            tm_log_warn(TM_DAEMON_SRC, "second %s: exiting now; unfinished messages "
                        "will be delivered again", signame(sig));
            _exit(1);
        }
        /* a reload swaps d->cfg (and frees the old one later): read it
         * under gen_lock, like every thread but the main one */
        pthread_rwlock_rdlock(&d->gen_lock);
        long long timeout_ms = (long long)d->cfg->shutdown_timeout_ms;
        pthread_rwlock_unlock(&d->gen_lock);
        tm_log_info(TM_DAEMON_SRC, "%s: stopping intake, finishing running tasks "
                    "(up to %lld ms)", signame(sig), timeout_ms);
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
    tm_beat_tick(&d->main_beat);
    pthread_mutex_lock(&d->stop_mu);
    if (!stop_requested(d))
        tm_cond_wait_ns(&d->stop_cv, &d->stop_mu, ms * 1000000LL);
    pthread_mutex_unlock(&d->stop_mu);
    tm_beat_tick(&d->main_beat);
}

int tm_daemon_run(struct tm_cfg *cfg, const struct tm_daemon_http *http)
{
    struct tm_daemon *d = &the_daemon;
    char err[8192]; /* a line per refused task */
    int status = 1;
    assert(http != NULL);
    memset(d, 0, sizeof *d);
    d->http_ops = http;
    d->config_path = tm_strdup(cfg->path);
    d->start_wall_ms = tm_wall_ms();
    d->start_mono_ms = tm_now_ms();
    atomic_store(&d->state, TM_STATE_STARTING);
    tm_beat_start(&d->main_beat);
    pthread_mutex_init(&d->stop_mu, NULL);
    tm_cond_init(&d->stop_cv);
    pthread_rwlock_init(&d->gen_lock, NULL);
    d->sched_stats = tm_sched_stats_new();
    tm_hist_store_init(&d->hist);

    /* signals are taken by one thread; every other thread blocks them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct tm_gen *g = tm_gen_create(d, cfg, NULL, err, sizeof err);
    if (g == NULL) {
        /* plugin refusals are configuration errors at the plugin: key */
        int cfg_error = strncmp(err, d->config_path,
                                strlen(d->config_path)) == 0;
        if (cfg_error)
            fprintf(stderr, "%s\n", err);
        else
            tm_log_err(TM_DAEMON_SRC, "%s", err);
        return cfg_error ? 2 : 1;
    }
    tm_gen_publish(d, g);
    /* the pool first: a fork pool's children are forked while this is
     * still the only thread, so no lock can be inherited held */
    if (g->pool->ops->start(g->pool) != 0) {
        tm_log_err(TM_DAEMON_SRC, "cannot start the %s pool", g->pool->ops->kind);
        tm_gen_unref(g);
        return 1;
    }
    d->otel = tm_otel_new(cfg, err, sizeof err);
    if (d->otel == NULL && err[0] != '\0') {
        tm_log_err("otel", "%s", err);
        g->pool->ops->drain(g->pool, tm_now_ns());
        tm_gen_unref(g);
        return 1;
    }
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_main, d);
    pthread_detach(sig_thread);

    if (cfg->http_listen != NULL) {
        d->http = d->http_ops->start(d, err, sizeof err);
        if (d->http == NULL) {
            tm_log_err("http", "%s", err);
            g->pool->ops->drain(g->pool, tm_now_ns());
            tm_gen_unref(g);
            return 1;
        }
    }

    /* a broker unreachable at start is retried, never fatal */
    int64_t backoff = TM_RECONNECT_MIN_MS;
    int logged = 0;
    while (!stop_requested(d)) {
        tm_beat_io_begin(&d->main_beat);
        int connected = g->broker->ops->consume->connect(g->broker) == 0;
        tm_beat_io_end(&d->main_beat);
        pthread_mutex_lock(&d->stop_mu);
        if (connected)
            d->starting_why[0] = '\0';
        else
            tm_snprintf(d->starting_why, sizeof d->starting_why,
                        "broker unreachable: %s", g->broker->errstr);
        pthread_mutex_unlock(&d->stop_mu);
        if (connected)
            break;
        if (g->broker->err == EINVAL) {
            /* the broker refused the configuration itself (a queue that
             * exists with other arguments): retrying cannot help */
            tm_log_err("broker", "%s", g->broker->errstr);
            g->pool->ops->drain(g->pool, tm_now_ns());
            d->http_ops->stop(d->http);
            tm_gen_unref(g);
            return 2;
        }
        if (!logged || tm_log_enabled(TM_LOG_DEBUG))
            tm_log_warn("broker", "%s; retrying", g->broker->errstr);
        logged = 1;
        main_wait(d, tm_backoff_jitter(backoff));
        backoff = tm_backoff_next(backoff, TM_RECONNECT_MIN_MS, TM_RECONNECT_MAX_MS);
    }
    if (pthread_create(&g->settle_thread, NULL, tm_settle_main, g) != 0) {
        tm_log_err(TM_DAEMON_SRC, "cannot start the settle thread");
        g->pool->ops->drain(g->pool, tm_now_ns());
        d->http_ops->stop(d->http);
        tm_gen_unref(g);
        return 1;
    }
    g->settle_started = 1;
    if (!stop_requested(d)) {
        tm_intake_start(g);
        tm_gen_fire_start(g, NULL);
        atomic_store(&d->state, TM_STATE_RUNNING);
        tm_fleet_start(d);
        tm_log_info(TM_DAEMON_SRC, "taskmill %s running: %zu task(s), %s pool of %u, "
                    "broker %s", TM_VERSION, g->ntasks, g->pool->ops->kind,
                    cfg->pool_size, cfg->url.redacted);
    }
    pthread_t watch_thread;
    if (cfg->plugin_watch &&
        pthread_create(&watch_thread, NULL, tm_plugin_watch_main, d) == 0)
        pthread_detach(watch_thread);

    int64_t wd_ms = tm_notify_watchdog_ms();
    int64_t period = wd_ms > 0 && wd_ms < 1000 ? wd_ms : 1000;
    int ready = 0;
    int64_t next_status = 0;
    while (!stop_requested(d)) {
        main_wait(d, period);
        if (wd_ms > 0)
            tm_notify("WATCHDOG=1");
        tm_saturation_sample(d);
        if (atomic_exchange(&d->reload, 0) && !stop_requested(d)) {
            tm_notify("RELOADING=1");
            tm_reload(d);
            tm_notify("READY=1");
            /* the retired configuration's memory goes back (as below) */
            malloc_trim(0);
        }
        char why[128];
        if (!ready && tm_daemon_ready(d, why, sizeof why)) {
            ready = 1;
            tm_notify("READY=1");
            /* what start-up freed (the YAML document, the config's
             * scratch, the plugins' checks) goes back to the system
             * rather than staying in the heap of an idle daemon */
            malloc_trim(0);
            tm_log_info(TM_DAEMON_SRC, "ready: every task is subscribed");
        }
        int64_t now = tm_now_ms();
        if (now >= next_status) {
            next_status = now + 5000;
            notify_status(d);
        }
    }
    tm_notify("STOPPING=1");
    /* the main loop ended: stopping is bounded by shutdown_timeout (and a
     * second signal), so liveness no longer counts it */
    tm_beat_stop(&d->main_beat);

    /* graceful stop: readiness is already 503; intake first, then running
     * work, then settlement */
    atomic_store(&d->state, TM_STATE_STOPPING);
    tm_fleet_leave(d);
    g = d->gen;
    int64_t deadline = tm_now_ns() + g->cfg->shutdown_timeout_ms * 1000000LL;
    int rc = tm_gen_stop(g, deadline, /* finish_queued = */ 0);
    /* a generation still being retired by a reload finishes too */
    while (atomic_load(&d->retiring) && tm_now_ns() < deadline)
        tm_sleep_ms(10);
    status = rc == 0 && !atomic_load(&d->retiring) ? 0 : 1;
    /* every message is settled: the last history counts go out */
    tm_fleet_stop(d);
    if (status == 0)
        tm_log_info(TM_DAEMON_SRC, "stopped cleanly");
    d->http_ops->stop(d->http);
    d->http = NULL;
    /* a retired generation being freed finishes first; none starts */
    pthread_mutex_lock(&d->stop_mu);
    d->exiting = 1;
    int64_t until = tm_now_ns() + TM_EXIT_FREE_WAIT_MS * 1000000LL;
    while (d->freeing > 0 && tm_now_ns() < until)
        tm_cond_wait_ns(&d->stop_cv, &d->stop_mu, 100000000LL);
    pthread_mutex_unlock(&d->stop_mu);
    if (atomic_load(&g->abandon)) {
        /* workers may still be inside task code: stop (or kill) the pool,
         * but do not unload the plugins under running threads; the
         * process exits */
        g->pool->ops->destroy(g->pool);
        return status;
    }
    /* the settle threads are done: the last spans go (bounded) */
    tm_otel_free(d->otel, TM_OTEL_FLUSH_MS);
    d->otel = NULL;
    /* the HTTP threads are joined: the daemon's reference is the last */
    tm_gen_unref(g);
    tm_free((void *)d->config_path);
    return status;
}
