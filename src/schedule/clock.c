/* clock.c - the schedule code's replaceable clock, and the skew of this
 * daemon's clock from the broker's. */
#include "schedule/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "util/log.h"
#include "util/util.h"

#define SRC "schedule"

/* g_clock is the test's clock, or NULL for the system clock; atomic, as
 * any thread may read it while a test swaps it. */
static _Atomic(tm_sched_clock_fn) g_clock;

/* g_skew_mu guards the skew: the last one noted (g_skew_known once one
 * was), whether the last noted was beyond the warning bound, and the
 * gate of the warning: one line when the skew goes beyond the bound, then
 * at most one per TM_SCHED_SKEW_WARN_EVERY_MS while it stays there. */
static pthread_mutex_t g_skew_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_skew;
static int g_skew_known;
static int g_skew_off;
static struct tm_log_gate g_skew_gate =
    TM_LOG_GATE(1, TM_SCHED_SKEW_WARN_EVERY_MS);

int64_t tm_sched_now_ms(void)
{
    tm_sched_clock_fn fn = atomic_load(&g_clock);
    return fn != NULL ? fn() : tm_wall_ms();
}

tm_sched_clock_fn tm_sched_set_clock(tm_sched_clock_fn fn)
{
    return atomic_exchange(&g_clock, fn);
}

void tm_sched_skew_note(int64_t skew_ms)
{
    int64_t mono = tm_now_ms();
    int off = skew_ms > TM_SCHED_SKEW_WARN_MS ||
              skew_ms < -TM_SCHED_SKEW_WARN_MS;
    int warn = 0, back = 0;
    pthread_mutex_lock(&g_skew_mu);
    if (off) {
        if (!g_skew_off)
            tm_log_gate_reset(&g_skew_gate); /* off again: news */
        warn = tm_log_gate_pass(&g_skew_gate, mono, NULL);
    }
    back = !off && g_skew_off;
    g_skew = skew_ms;
    g_skew_known = 1;
    g_skew_off = off;
    pthread_mutex_unlock(&g_skew_mu);
    if (warn)
        tm_log_warn(SRC, "this daemon's clock is %+.3f s off the broker's "
                    "(more than %d s): schedule slots are decided on the "
                    "broker's clock; fix the clock (NTP)",
                    (double)skew_ms / 1000.0, TM_SCHED_SKEW_WARN_MS / 1000);
    if (back)
        tm_log_info(SRC, "this daemon's clock is within %d s of the "
                    "broker's again (%+.3f s)", TM_SCHED_SKEW_WARN_MS / 1000,
                    (double)skew_ms / 1000.0);
}

int tm_sched_skew_ms(int64_t *skew_ms)
{
    pthread_mutex_lock(&g_skew_mu);
    int known = g_skew_known;
    *skew_ms = known ? g_skew : 0;
    pthread_mutex_unlock(&g_skew_mu);
    return known;
}

int64_t tm_sched_broker_now_ms(void)
{
    int64_t skew;
    tm_sched_skew_ms(&skew);
    return tm_sched_now_ms() - skew;
}
