/* clock.c - the schedule code's replaceable clock. */
#include "schedule/clock.h"

#include <stdatomic.h>
#include <stddef.h>

#include "util.h"

/* g_clock is the test's clock, or NULL for the system clock; atomic, as
 * any thread may read it while a test swaps it. */
static _Atomic(tm_sched_clock_fn) g_clock;

int64_t tm_sched_now_ms(void)
{
    tm_sched_clock_fn fn = atomic_load(&g_clock);
    return fn != NULL ? fn() : tm_wall_ms();
}

tm_sched_clock_fn tm_sched_set_clock(tm_sched_clock_fn fn)
{
    return atomic_exchange(&g_clock, fn);
}
