/* health.c - readiness (/ping), liveness (/healthz) and the loops'
 * heartbeats they read. */
#include "daemon_private.h"

#include "util/util.h"

/* A loop that has not gone round for this long is not responsive. */
#define TM_ALIVE_MS 10000
/* A broker call is bounded by its adapter's timeouts (seconds: connect,
 * command, confirm; a few of them in a row at most). One that has not
 * returned after this long means the loop is wedged, not the broker
 * slow. */
#define TM_BROKER_CALL_MAX_MS 300000

/* ---- heartbeats ------------------------------------------------------- */

void tm_beat_start(struct tm_beat *b)
{
    atomic_store(&b->io_since_ms, 0);
    atomic_store(&b->tick_ms, tm_now_ms());
    atomic_store(&b->active, 1);
}

void tm_beat_stop(struct tm_beat *b)
{
    atomic_store(&b->active, 0);
}

void tm_beat_tick(struct tm_beat *b)
{
    atomic_store_explicit(&b->tick_ms, tm_now_ms(), memory_order_relaxed);
}

void tm_beat_io_begin(struct tm_beat *b)
{
    int64_t now = tm_now_ms();
    atomic_store_explicit(&b->tick_ms, now, memory_order_relaxed);
    /* never 0: 0 means "not in a call" */
    atomic_store_explicit(&b->io_since_ms, now > 0 ? now : 1,
                          memory_order_relaxed);
}

void tm_beat_io_end(struct tm_beat *b)
{
    atomic_store_explicit(&b->io_since_ms, 0, memory_order_relaxed);
    atomic_store_explicit(&b->tick_ms, tm_now_ms(), memory_order_relaxed);
}

/* beat_ok says whether b's loop counts as responsive at now: it went
 * round within TM_ALIVE_MS, or (lenient, for liveness) it waits in a
 * broker call that started less than TM_BROKER_CALL_MAX_MS ago. A loop
 * that is not running is not counted. */
static int beat_ok(const struct tm_beat *b, int64_t now, int lenient)
{
    if (!atomic_load(&b->active))
        return 1;
    if (now - atomic_load_explicit(&b->tick_ms, memory_order_relaxed) <
        TM_ALIVE_MS)
        return 1;
    int64_t since = atomic_load_explicit(&b->io_since_ms,
                                         memory_order_relaxed);
    return lenient && since != 0 && now - since < TM_BROKER_CALL_MAX_MS;
}

/* loops_ok checks the main loop and the current generation's settle
 * loop; gen_lock is held (read) or the caller is the main thread. */
static int loops_ok(struct tm_daemon *d, int lenient)
{
    int64_t now = tm_now_ms();
    return beat_ok(&d->main_beat, now, lenient) &&
           (d->gen == NULL || beat_ok(&d->gen->settle_beat, now, lenient));
}

/* ---- readiness and liveness --------------------------------------------- */

int tm_daemon_ready(struct tm_daemon *d, char *why, size_t size)
{
    int st = atomic_load(&d->state);
    if (st == TM_STATE_STARTING) {
        pthread_mutex_lock(&d->stop_mu);
        tm_snprintf(why, size, "%s",
                    d->starting_why[0] != '\0' ? d->starting_why
                                                : "starting");
        pthread_mutex_unlock(&d->stop_mu);
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
    if (!loops_ok(d, /* lenient = */ 0)) {
        tm_snprintf(why, size, "consume loop not responsive");
        return 0;
    }
    return 1;
}

int tm_daemon_alive(struct tm_daemon *d)
{
    pthread_rwlock_rdlock(&d->gen_lock);
    int ok = loops_ok(d, /* lenient = */ 1);
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}
