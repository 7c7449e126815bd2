/* clock.h - the one "now" of the schedule code, replaceable by tests. */
#ifndef TASKMILL_SCHEDULE_CLOCK_H
#define TASKMILL_SCHEDULE_CLOCK_H

#include <stdint.h>

/* tm_sched_clock_fn returns the current time in epoch milliseconds. */
typedef int64_t (*tm_sched_clock_fn)(void);

/*
 * tm_sched_now_ms returns the current time (epoch ms, UTC) as the
 * schedule code sees it: the system's real-time clock unless a test set
 * another clock. Every schedule decision takes its "now" from here, so
 * that tests can drive the time. Thread-safe.
 */
int64_t tm_sched_now_ms(void);

/*
 * tm_sched_set_clock replaces the clock tm_sched_now_ms reads (a test
 * hook); NULL restores the system clock. Returns the clock replaced
 * (NULL for the system clock).
 */
tm_sched_clock_fn tm_sched_set_clock(tm_sched_clock_fn fn);

#endif /* TASKMILL_SCHEDULE_CLOCK_H */
