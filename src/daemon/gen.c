/* gen.c - generations of the running configuration: their plugins,
 * creation, start, stop and release. */
#include "daemon_private.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/log.h"
#include "daemon/fire.h"
#include "util/util.h"

/* How often a retired generation looks whether its abandoned calls have
 * returned. */
#define TM_LINGER_POLL_MS 50

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

/* struct keep_prev is what a reload's tasks may keep of the previous
 * generation: its tasks, and whether each one's plugin file changed (one
 * stat each, made before the loading). */
struct keep_prev {
    const struct tm_gen *prev;
    const char *changed;
};

/* keep_from_prev (a tm_plugin_keep_fn) returns the plugin of an unchanged
 * task of the previous generation whose plugin file did not change,
 * unless its plugin asks for a new cb_init at every reload
 * (TM_TASK_F_INIT_ON_RELOAD: a language host, whose script or module may
 * have changed); NULL otherwise: the task loads its file again (a copy of
 * its own, see tm_plugin_load). */
static struct tm_plugin *keep_from_prev(void *arg,
                                        const struct tm_cfg_task *t)
{
    const struct keep_prev *kp = arg;
    for (size_t j = 0; j < kp->prev->ntasks; j++) {
        const struct tm_task *o = &kp->prev->tasks[j];
        if (!kp->changed[j] && same_task(o->cfg, t) &&
            !(o->plugin->desc.flags & TM_TASK_F_INIT_ON_RELOAD))
            return o->plugin;
    }
    return NULL;
}

/* load_tasks loads and initialises the plugins of cfg's tasks
 * (tm_plugin_load_tasks). With prev (a reload), an unchanged task keeps
 * prev's plugin, task data and all (keep_from_prev). With all, every
 * task is tried and err has one line per refused task; otherwise the
 * first refusal ends it.
 *
 * A reload of a fork pool (prev, pool.kind fork) loads and checks the
 * plugins here but runs no cb_init: the pool's worker zygote loads the
 * generation and runs each new task's cb_init there, once, making the
 * task data its workers inherit, and refuses the reload at the same
 * place when an init fails (fork/zygote.c). The daemon's copies of those
 * plugins stay uninitialised (no cb_fini either): no run happens in the
 * daemon in a fork pool. */
static int load_tasks(const struct tm_cfg *cfg, struct tm_task *tasks,
                      const struct tm_gen *prev, int all, char *err,
                      size_t errlen)
{
    int flags = all ? TM_PLUGIN_TASKS_ALL : 0;
    if (prev == NULL)
        return tm_plugin_load_tasks(cfg, tasks, NULL, NULL, flags, err,
                                    errlen);
    if (cfg->pool_kind == TM_POOL_FORK)
        flags |= TM_PLUGIN_TASKS_NO_INIT; /* the zygote runs cb_init */
    char *changed = tm_calloc(prev->ntasks ? prev->ntasks : 1, 1);
    for (size_t j = 0; j < prev->ntasks; j++)
        changed[j] = (char)tm_plugin_changed(prev->tasks[j].plugin);
    struct keep_prev kp = {.prev = prev, .changed = changed};
    int rc = tm_plugin_load_tasks(cfg, tasks, keep_from_prev, &kp, flags,
                                  err, errlen);
    tm_free(changed);
    return rc;
}

int tm_tasks_load(const struct tm_cfg *cfg, struct tm_task *tasks,
                  char *err, size_t errlen)
{
    return load_tasks(cfg, tasks, NULL, 1, err, errlen);
}

void tm_tasks_unload(struct tm_task *tasks, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        tm_plugin_free(tasks[i].plugin);
        tasks[i].plugin = NULL;
    }
}

/* ---- generations -------------------------------------------------------- */

void tm_gen_wait_idle(struct tm_gen *g)
{
    unsigned busy = g->pool->ops->busy(g->pool);
    if (busy == 0)
        return;
    tm_log_info(TM_DAEMON_SRC, "configuration %u: waiting for %u abandoned "
                "call(s) to return before unloading its plugins", g->id,
                busy);
    int64_t since = tm_now_ms();
    while (g->pool->ops->busy(g->pool) > 0)
        tm_sleep_ms(TM_LINGER_POLL_MS);
    tm_log_info(TM_DAEMON_SRC, "configuration %u: its last call returned "
                "%lld ms later", g->id, (long long)(tm_now_ms() - since));
}

/* release_list drops messages nobody settles: they stay unacknowledged
 * and the broker delivers them again. */
static void release_list(struct tm_msg *m)
{
    while (m != NULL) {
        struct tm_msg *next = m->next;
        tm_msg_release(m);
        m = next;
    }
}

void tm_gen_free(struct tm_gen *g)
{
    if (g == NULL)
        return;
    tm_fire_free(g->fire);
    g->fire = NULL;
    if (g->pool != NULL) {
        /* the pool goes first (its workers run worker fini), the plugins
         * (cb_fini, dlclose) last, and only once nothing runs their code */
        tm_gen_wait_idle(g);
        g->pool->ops->destroy(g->pool);
    }
    /* whatever settlement failed, and calls that returned after the
     * settle thread ended, are left for redelivery */
    release_list(g->unsettled);
    g->unsettled = NULL;
    release_list(atomic_exchange(&g->done_head, NULL));
    if (g->broker != NULL)
        g->broker->ops->destroy(g->broker);
    if (g->done_fd >= 0)
        close(g->done_fd);
    tm_flow_unshare(g);
    tm_tasks_unload(g->tasks, g->ntasks);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    tm_free(g->tasks);
    tm_free(g->task_ptrs);
    tm_free(g->scratch);
    tm_free(g->snap);
    tm_free(g->snap_from);
    tm_zero_pages_free(g->wins, g->ntasks, sizeof *g->wins);
    tm_cfg_free(g->cfg);
    tm_free(g);
}

/* tm_gen_create loads a generation for cfg (taken over, also on failure):
 * plugins, broker adapter, pool (not started). With prev, unchanged tasks
 * keep their plugins and every task keeps its counters. Returns NULL with
 * the reason in err: one line, but at start (no prev) one line per task
 * its plugin refused. */
struct tm_gen *tm_gen_create(struct tm_daemon *d, struct tm_cfg *cfg,
                                 struct tm_gen *prev, char *err,
                                 size_t errlen)
{
    struct tm_gen *g = tm_calloc(1, sizeof *g);
    g->d = d;
    /* the number it gets if it takes effect (tm_gen_publish) */
    g->id = atomic_load(&d->config_generation) + 1;
    atomic_init(&g->refs, 1); /* the daemon's */
    g->cfg = cfg;
    g->ntasks = cfg->ntasks;
    g->done_fd = -1;
    pthread_mutex_init(&g->mu, NULL);
    tm_cond_init(&g->cv);
    g->tasks = tm_calloc(g->ntasks, sizeof *g->tasks);
    g->task_ptrs = tm_calloc(g->ntasks, sizeof *g->task_ptrs);
    /* zero pages, touched only by tasks that complete something: 500 idle
     * tasks cost no window memory (struct tm_task_window) */
    g->wins = tm_zero_pages(g->ntasks, sizeof *g->wins);
    for (size_t i = 0; i < g->ntasks; i++) {
        g->tasks[i].stats.win = &g->wins[i];
        g->tasks[i].gen = g;
        g->tasks[i].hist = tm_hist_get(&d->hist, cfg->tasks[i].name);
        g->tasks[i].abandon = &g->abandon;
        g->task_ptrs[i] = &g->tasks[i];
    }
    /* at start every refusal is told (like the config reader's); a
     * reload's refusal is one line (the log, /status) */
    if (load_tasks(cfg, g->tasks, prev, prev == NULL, err, errlen) != 0)
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
    g->pool = pops->create(cfg, g->task_ptrs, g->ntasks, tm_settle_pool_done, g);
    if (prev != NULL && pops->prepare != NULL &&
        pops->prepare(g->pool, err, errlen) != 0)
        goto fail;
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
                tm_settle_carry(&g->snap[i], old, NULL);
                tm_settle_carry(&g->tasks[i].stats, &g->snap[i], NULL);
                /* prev's settle thread may still be writing these:
                 * copied slot by slot with atomic loads, never as a
                 * struct; what it notes after this is not carried */
                tm_rate_copy(&g->tasks[i].stats.win->rate,
                             &old->win->rate);
                tm_durwin_copy(&g->tasks[i].stats.win->durs,
                               &old->win->durs);
                g->snap_from[i] = (long)j;
            }
        }
    }
    tm_flow_share(g);
    return g;
fail:
    tm_gen_free(g);
    return NULL;
}

/* tm_gen_start starts the pool, the settle thread and the intake threads. */
int tm_gen_start(struct tm_gen *g)
{
    if (g->pool->ops->start(g->pool) != 0) {
        tm_log_err(TM_DAEMON_SRC, "cannot start the %s pool", g->pool->ops->kind);
        return -1;
    }
    if (pthread_create(&g->settle_thread, NULL, tm_settle_main, g) != 0) {
        tm_log_err(TM_DAEMON_SRC, "cannot start the settle thread");
        g->pool->ops->drain(g->pool, tm_now_ns());
        return -1;
    }
    g->settle_started = 1;
    tm_intake_start(g);
    /* the replaced generation (alive until it is retired) stopped its
     * firing thread: the cursors carry over, so that the reload neither
     * skips nor repeats a slot */
    tm_gen_fire_start(g, g->prev != NULL ? g->prev->fire : NULL);
    return 0;
}

void tm_gen_fire_start(struct tm_gen *g, const struct tm_fire *from)
{
    struct tm_fire *own = g->fire; /* stopped; may be from itself */
    g->fire = tm_fire_start(g->broker, g->d->sched_stats, from);
    tm_fire_free(own);
}

void tm_gen_fire_stop(struct tm_gen *g)
{
    tm_fire_stop(g->fire);
}

static long long gen_inflight(const struct tm_gen *g)
{
    long long n = 0;
    for (size_t i = 0; i < g->ntasks; i++)
        n += atomic_load(&g->tasks[i].stats.inflight);
    return n;
}

/* tm_gen_only_stuck returns how many of g's runs still in task code were
 * settled by the pool at their deadline (stuck), when those are all its
 * busy runs: then nothing g abandoned is delivered again. 0 otherwise. */
size_t tm_gen_only_stuck(struct tm_gen *g)
{
    struct tm_pool_stuck *st;
    size_t nstuck = tm_pool_stuck_runs(g->pool, &st);
    tm_free(st);
    return nstuck > 0 && nstuck >= g->pool->ops->busy(g->pool) ? nstuck : 0;
}

/*
 * tm_gen_stop stops a started generation: intake first, then running work
 * until deadline_ns, then settlement. With finish_queued (a reload), the
 * messages it already holds run too; otherwise (shutdown) those not yet
 * started are left unacknowledged. Returns 0 when everything finished and
 * was settled, -1 when work was abandoned.
 */
int tm_gen_stop(struct tm_gen *g, int64_t deadline, int finish_queued)
{
    tm_gen_fire_stop(g);
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->consume->wake(g->broker);
    int drained = 0;
    if (finish_queued) {
        tm_intake_stop(g);
        while (gen_inflight(g) > 0 && tm_now_ns() < deadline)
            tm_sleep_ms(10);
        drained = g->pool->ops->drain(g->pool, deadline);
    } else {
        drained = g->pool->ops->drain(g->pool, deadline);
        tm_intake_join(g);
    }
    if (drained != 0) {
        /* should_stop() says yes to this generation's calls only */
        atomic_store(&g->abandon, 1);
        /* runs the pool settled at their deadline (stuck) are not
         * delivered again; the others are */
        size_t nstuck = tm_gen_only_stuck(g);
        if (nstuck > 0)
            tm_log_warn(TM_DAEMON_SRC, "configuration %u: %zu run(s) "
                        "settled as timeouts at their deadline are still "
                        "in task code; its plugins stay loaded until they "
                        "return", g->id, nstuck);
        else
            tm_log_err(TM_DAEMON_SRC, "configuration %u: shutdown_timeout "
                       "of %lld ms reached with tasks still running; they "
                       "are abandoned and will be delivered again", g->id,
                       (long long)g->cfg->shutdown_timeout_ms);
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
void tm_gen_publish(struct tm_daemon *d, struct tm_gen *g)
{
    pthread_rwlock_wrlock(&d->gen_lock);
    atomic_store(&d->config_generation, g->id);
    atomic_store(&d->last_reload_ok, 1);
    atomic_store(&d->last_reload_ok_wall_ms, tm_wall_ms());
    d->last_reload_error[0] = '\0';
    d->gen = g;
    d->cfg = g->cfg;
    d->tasks = g->tasks;
    d->ntasks = g->ntasks;
    d->broker = g->broker;
    d->pool = g->pool;
    pthread_rwlock_unlock(&d->gen_lock);
}

struct tm_gen *tm_gen_current(struct tm_daemon *d)
{
    pthread_rwlock_rdlock(&d->gen_lock);
    struct tm_gen *g = d->gen;
    assert(g != NULL);
    /* a published generation holds the daemon's reference until it is
     * replaced, which takes gen_lock for writing: refs >= 1 here */
    tm_gen_ref(g);
    pthread_rwlock_unlock(&d->gen_lock);
    return g;
}

void tm_gen_ref(struct tm_gen *g)
{
    unsigned was = atomic_fetch_add(&g->refs, 1);
    assert(was > 0);
    (void)was;
}

void tm_gen_unref(struct tm_gen *g)
{
    /* the decrement orders every use by this holder before the free by
     * whichever holder drops the last reference (seq_cst, as all of
     * refs' operations) */
    if (g != NULL && atomic_fetch_sub(&g->refs, 1) == 1)
        tm_gen_free(g);
}
