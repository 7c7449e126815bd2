/* reload.c - SIGHUP and plugin_watch reloads: a new generation starts,
 * the replaced one is retired in the background. */
#include "daemon_private.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

/* ---- reload ------------------------------------------------------------- */

struct retire {
    struct tm_gen *old;
    struct tm_gen *next;
};

/* free_retired drops the daemon's reference to a retired generation,
 * which frees it unless another thread still holds one, unless the
 * process is exiting (tm_daemon_run waits for frees under way before it
 * returns, so that none runs into the exit). */
static void free_retired(struct tm_daemon *d, struct tm_gen *old)
{
    pthread_mutex_lock(&d->stop_mu);
    int exiting = d->exiting;
    if (!exiting)
        d->freeing++;
    pthread_mutex_unlock(&d->stop_mu);
    if (exiting)
        return;
    /* the daemon's reference: an HTTP thread still using old (a scrape,
     * the depth refresher, an admin API job) holds one of its own, and
     * the last of them frees it; tm_http_stop joins those threads before
     * the daemon exits */
    tm_gen_unref(old);
    pthread_mutex_lock(&d->stop_mu);
    d->freeing--;
    pthread_cond_broadcast(&d->stop_cv);
    pthread_mutex_unlock(&d->stop_mu);
}

/* retire_main stops the replaced generation, lets the new one fold its
 * counters in, then frees it: at once when its calls finished in time,
 * otherwise after its last abandoned call returned, however long that
 * takes (tm_gen_free waits), since those calls run its plugins' code with
 * their task and worker data. */
static void *retire_main(void *arg)
{
    struct retire *r = arg;
    struct tm_daemon *d = r->old->d;
    int64_t deadline = tm_now_ns() +
                       r->old->cfg->shutdown_timeout_ms * 1000000LL;
    int rc = tm_gen_stop(r->old, deadline, /* finish_queued = */ 1);
    /* what it abandoned no longer takes the new one's concurrency */
    tm_flow_stopped(r->old);
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
    tm_log_info(TM_DAEMON_SRC, "configuration %u retired%s", r->old->id,
                rc == 0 ? ""
                : tm_gen_only_stuck(r->old) > 0
                    ? " (runs settled at their deadline are still in task "
                      "code; its plugins stay loaded until they return)"
                    : " (some work abandoned, to be redelivered)");
    struct tm_gen *old = r->old;
    int folded = atomic_load(&r->next->folded);
    tm_free(r);
    if (!folded) {
        /* the daemon is stopping before the new generation could take
         * the counters over; the process exits with the old one unfreed */
        atomic_store(&d->retiring, 0);
    } else if (!atomic_load(&old->abandon)) {
        free_retired(d, old);
        atomic_store(&d->retiring, 0);
    } else {
        /* Nothing refers to old any more but its own abandoned calls:
         * the next reload may start while this thread waits for them,
         * however long that takes. */
        atomic_store(&d->retiring, 0);
        tm_gen_wait_idle(old);
        free_retired(d, old);
    }
    return NULL;
}

/* refuse logs why a reload did not take effect; the running
 * configuration stays, and keeps its number. */
static void refuse(struct tm_daemon *d, const char *why)
{
    pthread_rwlock_wrlock(&d->gen_lock);
    atomic_store(&d->last_reload_ok, 0);
    tm_snprintf(d->last_reload_error, sizeof d->last_reload_error, "%s",
                why);
    pthread_rwlock_unlock(&d->gen_lock);
    tm_log_err(TM_DAEMON_SRC, "reload refused, the running configuration "
               "stays: %s", why);
}

/* struct summary is the reload log line's account of the tasks. */
struct summary {
    size_t added, changed, removed, kept;
    char text[1024];            /* "; added: a (p 1.0); changed: ..." */
    size_t len;
    const char *section;        /* the last section name written */
};

/* note appends "NAME (DETAIL)" to the section of sum (a new section
 * starts with "; SECTION: ", the next entries of it with ", "). */
static void note(struct summary *sum, const char *section, const char *name,
                 const char *detail)
{
    size_t room = sizeof sum->text - sum->len;
    if (room <= 1)
        return;
    int same = sum->section != NULL && strcmp(sum->section, section) == 0;
    sum->len += tm_snprintf(sum->text + sum->len, room, "%s%s%s%s%s%s",
                            same ? ", " : "; ", same ? "" : section,
                            same ? "" : ": ", name,
                            detail[0] != '\0' ? " " : "", detail);
    sum->section = section;
}

/* summarize compares the tasks of g with those of old (its snap_from
 * says which task each one continues). */
static void summarize(const struct tm_gen *old, const struct tm_gen *g,
                      struct summary *sum)
{
    char detail[256];
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < g->ntasks; i++) {
        const struct tm_task *t = &g->tasks[i];
        const struct tm_plugin *p = t->plugin;
        long j = g->snap_from[i];
        if (j < 0) {
            sum->added++;
            tm_snprintf(detail, sizeof detail, "(%s %s)", p->desc.name,
                        p->desc.version);
            note(sum, "added", t->cfg->name, detail);
        } else if (p == old->tasks[j].plugin) {
            sum->kept++;
        } else {
            const struct tm_plugin *o = old->tasks[j].plugin;
            sum->changed++;
            tm_snprintf(detail, sizeof detail, "(%s %s -> %s %s)",
                        o->desc.name, o->desc.version, p->desc.name,
                        p->desc.version);
            note(sum, "changed", t->cfg->name, detail);
        }
    }
    for (size_t j = 0; j < old->ntasks; j++) {
        int found = 0;
        for (size_t i = 0; i < g->ntasks; i++)
            if (g->snap_from[i] == (long)j)
                found = 1;
        if (!found) {
            sum->removed++;
            note(sum, "removed", old->tasks[j].cfg->name, "");
        }
    }
}

void tm_reload(struct tm_daemon *d)
{
    char err[1024];
    if (atomic_load(&d->retiring)) {
        /* one retirement at a time: try again on the next tick */
        atomic_store(&d->reload, 1);
        return;
    }
    struct tm_cfg *cfg =
        tm_broker_load_config(d->config_path, 1, err, sizeof err, NULL);
    if (cfg == NULL) {
        refuse(d, err);
        return;
    }
    struct tm_gen *old = d->gen;
    /* every key the reader knows is classified (src/config/keys.c):
     * one that only a restart applies refuses the whole reload */
    char keys[768];
    size_t nkeys = tm_cfg_restart_changes(old->cfg, cfg, keys, sizeof keys);
    if (nkeys > 0) {
        tm_snprintf(err, sizeof err, "%s changed, which need%s a restart",
                    keys, nkeys == 1 ? "s" : "");
        refuse(d, err);
        tm_cfg_free(cfg);
        return;
    }
    tm_log_setup(cfg->log_level, cfg->log_format);
    struct tm_gen *g = tm_gen_create(d, cfg, old, err, sizeof err);
    if (g == NULL) {
        refuse(d, err);
        return;
    }
    /* the old intake stops before the new one starts, so that what
     * arrives from now on runs on the new configuration; what the old
     * one holds runs on to the end, on its own code */
    tm_intake_stop(old);
    tm_gen_fire_stop(old);
    if (tm_gen_start(g) != 0) {
        refuse(d, "the new configuration did not start");
        tm_gen_stop(g, tm_now_ns(), 0);
        tm_gen_free(g);
        tm_intake_start(old);
        tm_gen_fire_start(old, old->fire);
        return;
    }
    struct summary sum;
    summarize(old, g, &sum);
    old->restarts_at_swap = atomic_load(&old->pool->restarts);
    old->reconnects_at_swap = atomic_load(&old->broker->reconnects);
    atomic_fetch_add(&d->restarts_before, old->restarts_at_swap);
    atomic_fetch_add(&d->reconnects_before, old->reconnects_at_swap);
    tm_gen_publish(d, g);
    tm_log_info(TM_DAEMON_SRC, "reloaded %s as configuration %u: %zu "
                "task(s) added, %zu changed, %zu removed, %zu unchanged%s",
                d->config_path, g->id, sum.added, sum.changed, sum.removed,
                sum.kept, sum.text);
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

