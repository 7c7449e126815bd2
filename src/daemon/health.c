/* health.c - readiness (/ping) and liveness (/healthz). */
#include "daemon_private.h"

#include "util.h"

/* A loop that has not ticked for this long is considered wedged. */
#define TM_ALIVE_MS 10000

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

