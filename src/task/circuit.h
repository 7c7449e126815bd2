/* circuit.h - a task's circuit breaker: consecutive crashes or timeouts
 * pause its intake for a growing cool-off. */
#ifndef TASKMILL_CIRCUIT_H
#define TASKMILL_CIRCUIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "config/config.h"
#include "task/msg.h"

/* Messages a half-open circuit lets run at once (probes). */
#define TM_CIRCUIT_PROBES 1

enum tm_circuit_state {
    TM_CIRCUIT_CLOSED = 0,      /* intake runs */
    TM_CIRCUIT_OPEN = 1,        /* intake paused until the cool-off ends */
    TM_CIRCUIT_HALF_OPEN = 2    /* cool-off over: probes run */
};

/*
 * struct tm_circuit is one task's breaker; all zero is a closed circuit.
 * The settle thread is its only writer of state, until_ms and the fields
 * below them (tm_circuit_note); intake threads, the pool and HTTP only
 * read state and until_ms (tm_circuit_gate, tm_circuit_state). HALF_OPEN
 * is never stored: it is an OPEN circuit whose until_ms has passed, so the
 * cool-off ends without any thread having to act.
 */
struct tm_circuit {
    atomic_int state;           /* TM_CIRCUIT_CLOSED or TM_CIRCUIT_OPEN */
    atomic_llong until_ms;      /* monotonic: end of the cool-off */
    atomic_int half_logged;     /* the half-open change was logged */
    unsigned failures;          /* consecutive crashes or timeouts */
    int64_t cool_off_ms;        /* the current (last) cool-off */
};

/* tm_circuit_state returns c's state at now_ms (monotonic). */
enum tm_circuit_state tm_circuit_state(const struct tm_circuit *c,
                                       int64_t now_ms);

/* tm_circuit_state_name returns "closed", "open" or "half-open". */
const char *tm_circuit_state_name(enum tm_circuit_state s);

/*
 * tm_circuit_note records how one attempt of task t ended (settle thread
 * only): a crash or a timeout counts towards opening (t->circuit_failures
 * in a row open it for t->circuit_cool_off_ms; a failed probe re-opens it
 * for twice the last cool-off, up to t->circuit_max_cool_off_ms); any other
 * outcome resets the count, and closes a half-open circuit. TM_OUT_NONE
 * (not run) is ignored. Logs one line per state change. With
 * t->circuit_failures == 0 the breaker is disabled and stays closed.
 */
void tm_circuit_note(struct tm_circuit *c, const struct tm_cfg_task *t,
                     enum tm_outcome o);

/*
 * tm_circuit_gate tells task t's intake whether it may read now, given
 * inflight (its messages read and not yet settled). Returns 0 to go on,
 * with *room lowered to the probes a half-open circuit still allows; or
 * how many milliseconds to wait (at most 1000) before asking again.
 */
int64_t tm_circuit_gate(struct tm_circuit *c, const struct tm_cfg_task *t,
                        long long inflight, long *room);

#endif /* TASKMILL_CIRCUIT_H */
