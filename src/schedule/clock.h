/* clock.h - the one "now" of the schedule code, replaceable by tests,
 * and this daemon's clock skew from the broker's clock. */
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

/* A broker with a clock refuses to fire (and mark fired) a slot later
 * than its own now plus this: a daemon whose clock runs fast cannot mark
 * a future slot fired. Larger than the error of a skew measurement (half
 * a round trip), so that a daemon within it is never refused. */
#define TM_SCHED_EARLY_MS 1000

/* A skew beyond this (either way) is logged as a warning. */
#define TM_SCHED_SKEW_WARN_MS 2000
/* A warning for a skew that lasts is repeated at most this often. */
#define TM_SCHED_SKEW_WARN_EVERY_MS 600000
/* How often the firing thread measures the skew (on brokers that have a
 * clock): a slow interval, never per message. */
#define TM_SCHED_SKEW_EVERY_MS 30000

/*
 * tm_sched_skew_note records a measurement of this daemon's clock minus
 * the broker's (ms; the broker's reading corrected by half the round
 * trip) and logs a warning when it is beyond TM_SCHED_SKEW_WARN_MS (the
 * first time, then at most every TM_SCHED_SKEW_WARN_EVERY_MS while it
 * stays so), and a notice when it comes back within. Thread-safe.
 */
void tm_sched_skew_note(int64_t skew_ms);

/*
 * tm_sched_skew_ms stores in *skew_ms the last skew noted and returns 1,
 * or returns 0 (and stores 0) when none was (a broker without a clock,
 * or before the first measurement). Thread-safe.
 */
int tm_sched_skew_ms(int64_t *skew_ms);

/*
 * tm_sched_broker_now_ms is the broker's time as this daemon reckons
 * it: tm_sched_now_ms minus the last skew noted (the daemon's own clock
 * while none was). Thread-safe.
 */
int64_t tm_sched_broker_now_ms(void);

#endif /* TASKMILL_SCHEDULE_CLOCK_H */
