/* task.h - a task at run time: its counters, its policy, one message's run. */
#ifndef TASKMILL_TASK_H
#define TASKMILL_TASK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "task/circuit.h"
#include "config/config.h"
#include "task/flow.h"
#include "task/msg.h"
#include "task/plugin.h"
#include "task/stats.h"

/* Upper bounds of the duration histogram, in seconds: 100 us to 10 min. */
#define TM_HIST_BOUNDS(X) \
    X(0.0001) X(0.00025) X(0.0005) X(0.001) X(0.0025) X(0.005) X(0.01) \
    X(0.025) X(0.05) X(0.1) X(0.25) X(0.5) X(1) X(2.5) X(5) X(10) X(30) \
    X(60) X(120) X(300) X(600)
#define TM_HIST_COUNT(b) +1
#define TM_HIST_N (0 TM_HIST_BOUNDS(TM_HIST_COUNT))

/*
 * struct tm_task_stats holds a task's counters. The settle thread is the
 * only writer of outcomes, retries, dead_lettered, hist, dur_sum_us, rate
 * and durs (relaxed atomic stores of its own increments); intake and
 * settle threads move inflight; the HTTP depth refresher alone writes the
 * broker-side counts. HTTP reads everything without locks.
 */
struct tm_task_stats {
    atomic_ullong outcomes[TM_OUT_COUNT];
    atomic_ullong retries;
    atomic_ullong dead_lettered;
    atomic_ullong replies_refused;      /* answers not written: reply_to
                                           is no reply stream (written by
                                           the broker's settle) */
    atomic_ullong rate_limited;         /* waits of intake held back by
                                           rate_limit or concurrency
                                           (written by intake) */
    atomic_ullong hist[TM_HIST_N + 1];  /* last bucket: +Inf */
    atomic_ullong dur_sum_us;
    atomic_llong inflight;              /* read, not yet settled */
    /* attempts ended per second and recent run durations: the task's
     * slot in its generation's windows (NULL in a copy such as a reload's
     * snapshot, which carries the counters only) */
    struct tm_task_window *win;
    /* Read from the broker every few seconds (never per scrape); -1 when
     * the broker cannot tell. Valid once depth_at_ms (monotonic) != 0. */
    atomic_llong queue_depth;           /* not yet delivered */
    atomic_llong queue_pending;         /* delivered, not acknowledged */
    atomic_llong dead_letter_depth;     /* entries in the dead-letter queue */
    atomic_llong scheduled_depth;       /* delayed, waiting for their time */
    atomic_llong oldest_age_ms;         /* the oldest not yet delivered */
    atomic_llong delayed_due;           /* delayed, due, not queued yet */
    atomic_llong depth_at_ms;
};

struct tm_gen;

/* struct tm_task is one configured task at run time. */
struct tm_task {
    struct tm_gen *gen;                 /* the generation it belongs to */
    const struct tm_cfg_task *cfg;
    size_t index;
    struct tm_plugin *plugin;
    /* its generation's give-up flag (struct tm_gen.abandon): should_stop()
     * answers yes once it is set; NULL outside the daemon (invoke) */
    const atomic_int *abandon;
    struct tm_task_stats stats;
    atomic_int subscribed;              /* consumer group/queue ready */
    atomic_int waiting_room;            /* intake waits for prefetch room */
    /* Of stats.inflight, the messages whose settlement the settle thread
     * is sending to the broker now (finished: acknowledged, retried or
     * dead-lettered, the broker's answer not read yet); only the settle
     * thread writes it, adding before the send and taking off before
     * they leave inflight, so acking <= inflight at every moment. */
    atomic_llong acking;
    struct tm_circuit circuit;          /* pauses intake after crashes */
    struct tm_flow flow;                /* rate_limit, concurrency */
};

/* tm_policy_settle decides m->settle (and m->retry_delay_ms) from the
 * outcome and the task's on_error, max_retries and backoff. Pure. */
void tm_policy_settle(struct tm_msg *m, const struct tm_cfg_task *t);

/* tm_policy_may_retry says whether a failed delivery number attempt
 * (1 = the first) of a message of task t may be retried under its
 * max_retries (-1: without limit): 1 or 0. tm_policy_may_run says whether
 * delivery number attempt may run at all: the first always, a later one
 * only when the delivery before it could be retried (a message
 * redelivered past the limit, unsettled because its consumers died, does
 * not run again). The one place that enforces max_retries. Pure. */
int tm_policy_may_retry(const struct tm_cfg_task *t, unsigned attempt);
int tm_policy_may_run(const struct tm_cfg_task *t, unsigned attempt);

/* tm_retry_delay_ms returns the delay before attempt (attempt + 1) after
 * a failed attempt: min(backoff * 2^(attempt-1), max_backoff) plus up to
 * 20% jitter drawn from r (0 <= r < 1). */
int64_t tm_retry_delay_ms(const struct tm_cfg_task *t, unsigned attempt,
                          double r);

/* tm_exec_host returns the host service table given to plugins. */
const struct tm_host *tm_exec_host(void);

/*
 * tm_exec_run runs one message through its task's plugin in the calling
 * thread: validates the body (present, within max_payload, UTF-8, a JSON
 * object), calls cb_run with the worker's data, and fills m->outcome,
 * m->error, m->result and the timings. Never fails.
 */
void tm_exec_run(struct tm_msg *m, void *worker_data);
/* tm_exec_run_from is tm_exec_run for a run that started at start_ns (a
 * tm_now_ns reading): a worker running messages back to back starts
 * each at the end of the one before, one clock reading per message. */
void tm_exec_run_from(struct tm_msg *m, void *worker_data, int64_t start_ns);

/*
 * struct tm_run_watch is where a worker publishes its run for the pool's
 * watchdog (pool/watch.c): per worker, so that the hot path takes no
 * lock. state holds the worker's run number << 2 | TM_RUN_ACTIVE while a
 * run with a deadline is in its task's code, | TM_RUN_TAKEN once the
 * watchdog settled that run at its deadline. Whichever of the worker
 * (ending the run) and the watchdog (taking it) changes the state first
 * files the run; the other leaves the message alone.
 */
#define TM_RUN_ACTIVE 1u
#define TM_RUN_TAKEN 2u
struct tm_run_watch {
    atomic_uint_fast64_t state;
    atomic_llong deadline_ns;   /* monotonic, of the active run */
};

/* tm_exec_run_watched (run.c) is tm_exec_run_from publishing a run that
 * has a deadline in watch. Returns 0, or -1 when the watchdog took the
 * run while it was in its code: then the watchdog settled m, and nothing
 * of m was written after the run started (what the plugin set is thrown
 * away). */
int tm_exec_run_watched(struct tm_msg *m, void *worker_data,
                        int64_t start_ns, struct tm_run_watch *watch);

#endif /* TASKMILL_TASK_H */
