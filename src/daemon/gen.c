/* gen.c - generations of the running configuration: their plugins,
 * creation, start, stop and release. */
#include "daemon_private.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "schedule/fire.h"
#include "util.h"

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

/* the config: keys the daemon reads for any plugin (asyncapi.c: the
 * schemas of a task whose plugin declares none) */
static const char *const daemon_config_keys[] = {"request_schema",
                                                 "response_schema", NULL};

/* listed says whether name is in the NULL-terminated list. */
static int listed(const char *const *list, const char *name)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* check_keys refuses a key of t's `config:` mapping that p's plugin does
 * not list in its descriptor's config_keys (when it lists them) and the
 * daemon does not read: one line at the key in err. Returns 0 or -1. */
static int check_keys(const struct tm_cfg *cfg, const struct tm_cfg_task *t,
                      const struct tm_plugin *p, char *err, size_t errlen)
{
    const char *const *known = p->desc.config_keys;
    if (known == NULL)
        return 0;
    for (size_t k = 0; k < t->nconfig_keys; k++) {
        const struct tm_cfg_key *ck = &t->config_keys[k];
        if (listed(known, ck->name) || listed(daemon_config_keys, ck->name))
            continue;
        size_t i;
        char list[512];
        size_t len = 0;
        list[0] = '\0';
        for (i = 0; known[i] != NULL && len + 1 < sizeof list; i++)
            len += (size_t)tm_snprintf(list + len, sizeof list - len, "%s%s",
                                       i > 0 ? ", " : "", known[i]);
        tm_snprintf(err, errlen, "%s:%d:%d: tasks.%s.config.%s: unknown key "
                    "for plugin '%s' (known: %s)", cfg->path, ck->at.line,
                    ck->at.col, t->name, ck->name, p->desc.name, list);
        return -1;
    }
    return 0;
}

/* add_line appends line to the error text err (a new line after the
 * first). */
static void add_line(char *err, size_t errlen, const char *line)
{
    size_t len = strlen(err);
    if (len + 1 < errlen)
        tm_snprintf(err + len, errlen - len, "%s%s", len > 0 ? "\n" : "",
                    line);
}

/* load_tasks loads and initialises the plugins of cfg's tasks. With prev
 * (a reload), an unchanged task whose plugin file did not change keeps
 * prev's plugin, task data and all, unless its plugin asks for a new
 * cb_init at every reload (TM_TASK_F_INIT_ON_RELOAD: a language host,
 * whose script or module may have changed); any other task loads its
 * file again (a copy of its own, see tm_plugin_load). A plugin that does
 * not load is refused at the task's plugin: value; a config key the
 * plugin does not know, at the key; a refusal by cb_init (a script or
 * module that does not load, a missing executable), at the task's
 * config: key (plugin: when the task has none). With all, every task is tried and err has one
 * line per refused task; otherwise the first refusal ends it.
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
    char reason[1024], line[1400];
    int failed = 0;
    /* whether each of prev's plugin files changed: one stat each */
    size_t nprev = prev != NULL ? prev->ntasks : 0;
    char *changed = tm_calloc(nprev ? nprev : 1, 1);
    for (size_t j = 0; j < nprev; j++)
        changed[j] = (char)tm_plugin_changed(prev->tasks[j].plugin);
    if (errlen > 0)
        err[0] = '\0';
    for (size_t i = 0; i < cfg->ntasks && (all || !failed); i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        tasks[i].cfg = t;
        tasks[i].index = i;
        for (size_t j = 0; j < nprev; j++) {
            const struct tm_task *o = &prev->tasks[j];
            if (!changed[j] && same_task(o->cfg, t) &&
                !(o->plugin->desc.flags & TM_TASK_F_INIT_ON_RELOAD)) {
                tm_plugin_ref(o->plugin);
                tasks[i].plugin = o->plugin;
                break;
            }
        }
        if (tasks[i].plugin != NULL)
            continue;
        struct tm_mark at = t->plugin_at;
        const char *key = "plugin";
        tasks[i].plugin = tm_plugin_load(t->plugin_path, reason,
                                         sizeof reason);
        if (tasks[i].plugin == NULL)
            goto fail;
        for (size_t j = 0; j < i; j++) {
            const struct tm_plugin *o = tasks[j].plugin;
            if (o != NULL &&
                strcmp(o->desc.name, tasks[i].plugin->desc.name) == 0 &&
                strcmp(o->path, tasks[i].plugin->path) != 0) {
                tm_snprintf(reason, sizeof reason,
                            "%s: plugin name '%s' is already loaded from %s",
                            t->plugin_path, o->desc.name, o->path);
                goto fail;
            }
        }
        if (check_keys(cfg, t, tasks[i].plugin, line, sizeof line) != 0) {
            add_line(err, errlen, line);
            failed = 1;
            continue;
        }
        if (prev != NULL && cfg->pool_kind == TM_POOL_FORK)
            continue; /* the zygote runs its cb_init */
        struct tm_task_env env = {
            .struct_size = sizeof env,
            .task = t->name,
            .queue = t->queue,
            .config_json = t->config_json,
            .host = tm_exec_host(),
        };
        if (tm_plugin_init(tasks[i].plugin, &env, reason,
                           sizeof reason) != 0) {
            if (t->config_at.line > 0) {
                at = t->config_at;
                key = "config";
            }
            goto fail;
        }
        continue;
    fail:
        tm_snprintf(line, sizeof line, "%s:%d:%d: tasks.%s.%s: %s", cfg->path,
                    at.line, at.col, t->name, key, reason);
        add_line(err, errlen, line);
        failed = 1;
    }
    tm_free(changed);
    return failed ? -1 : 0;
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
    g->broker->ops->wake(g->broker);
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
    for (size_t i = 0; i < g->ntasks; i++)
        g->tasks[i].intake_started = 0;
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
