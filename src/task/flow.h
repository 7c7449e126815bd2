/* flow.h - flow control of a task's intake: the token bucket of
 * rate_limit, and the state intake keeps for rate_limit and concurrency. */
#ifndef TASKMILL_FLOW_H
#define TASKMILL_FLOW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* A bucket refills continuously at rate_count per rate_period_ms and
 * holds at most tm_flow_burst(t) tokens: a tenth of a second's worth
 * (at least 1), so that over any window of W ms no more than
 * rate * W + burst runs start from one bucket. */
#define TM_FLOW_BURST_MS 100

/* A token-bucket wait is never shorter than this (ms). */
#define TM_FLOW_MIN_WAIT_MS 1

/* struct tm_bucket is a token bucket; all zero is a full bucket, filled
 * on first use. One thread uses it (the task's intake). */
struct tm_bucket {
    double tokens;
    int64_t at_ms;              /* when tokens was last brought up to date */
    int started;
};

/*
 * struct tm_flow is a task's flow-control state, used by the thread that
 * reads the task (its intake thread or its lane's) only.
 *
 * This daemon's bucket (brokers that keep none): before a read the
 * intake takes granted tokens (at most the task's room) and reads at most
 * granted messages; after it, the tokens it left unused go back at once.
 * Between reads granted == 0.
 *
 * The broker's bucket (shared by the daemons): the intake holds `have`
 * tokens taken from it, at most a burst, and reads at most that many
 * messages; it asks for more only when they do not cover the task's room,
 * so with a limit far above the rate one request serves many reads.
 * Tokens held longer than a second (the task is idle) are owed `back`
 * and returned with the next request (costing no command of their own).
 */
/* struct tm_conc counts the messages of one task name in flight (read,
 * not yet settled) in every generation of the configuration: the task
 * of a reload's new generation shares its predecessor's, so that
 * concurrency caps the runs of both together. Each generation's task
 * holds one reference; the last one frees it. */
struct tm_conc {
    atomic_llong inflight;
    atomic_int refs;
};

struct tm_flow {
    struct tm_bucket bucket;    /* this daemon's bucket */
    size_t granted;             /* of it, taken for the read under way */
    size_t have;                /* held from the broker's bucket */
    int64_t have_ms;            /* when have last rose from 0 */
    size_t back;                /* owed back to the broker's bucket */
    int held;                   /* the last look held the task back (a
                                   wait is counted once, when it starts) */
    struct tm_conc *conc;       /* shared across generations; set for
                                   the tasks of a created generation */
    int conc_out;               /* the task's generation is stopped and
                                   its messages left conc (tm_flow_stopped) */
};

/* tm_flow_burst returns the most tokens t's bucket holds (t is rate
 * limited: rate_count > 0). */
uint32_t tm_flow_burst(const struct tm_cfg_task *t);

/* tm_bucket_take takes up to want tokens of t's rate at now_ms
 * (monotonic) and returns how many; when it returns 0 for want > 0,
 * *wait_ms is how long until the next token (else 0). */
size_t tm_bucket_take(struct tm_bucket *b, const struct tm_cfg_task *t,
                      int64_t now_ms, size_t want, int64_t *wait_ms);

/* tm_bucket_give puts n unused tokens back (never above the burst). */
void tm_bucket_give(struct tm_bucket *b, const struct tm_cfg_task *t,
                    size_t n);

#endif /* TASKMILL_FLOW_H */
