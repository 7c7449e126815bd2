/* circuit.c - per-task circuit breaker over crashes and timeouts. */
#include "task/circuit.h"

#include <assert.h>

#include "util/log.h"
#include "util/util.h"

#define SRC "circuit"

/* How long a half-open intake waits for its probe to settle before it
 * asks again, and the longest wait handed out at once (intake looks at
 * its stop flag in between). */
#define TM_CIRCUIT_PROBE_WAIT_MS 100
#define TM_CIRCUIT_WAIT_MAX_MS 1000

enum tm_circuit_state tm_circuit_state(const struct tm_circuit *c,
                                       int64_t now_ms)
{
    if (atomic_load_explicit(&c->state, memory_order_acquire) ==
        TM_CIRCUIT_CLOSED)
        return TM_CIRCUIT_CLOSED;
    return now_ms < atomic_load_explicit(&c->until_ms, memory_order_relaxed)
               ? TM_CIRCUIT_OPEN
               : TM_CIRCUIT_HALF_OPEN;
}

const char *tm_circuit_state_name(enum tm_circuit_state s)
{
    switch (s) {
    case TM_CIRCUIT_CLOSED:
        return "closed";
    case TM_CIRCUIT_OPEN:
        return "open";
    case TM_CIRCUIT_HALF_OPEN:
        return "half-open";
    }
    return "closed";
}

/* open_for opens c for ms from now (settle thread). until_ms is stored
 * before state, so a reader that sees OPEN sees its cool-off. */
static void open_for(struct tm_circuit *c, int64_t now_ms, int64_t ms)
{
    c->cool_off_ms = ms;
    atomic_store_explicit(&c->half_logged, 0, memory_order_relaxed);
    atomic_store_explicit(&c->until_ms, now_ms + ms, memory_order_relaxed);
    atomic_store_explicit(&c->state, TM_CIRCUIT_OPEN, memory_order_release);
}

void tm_circuit_note(struct tm_circuit *c, const struct tm_cfg_task *t,
                     enum tm_outcome o)
{
    if (o == TM_OUT_NONE || t->circuit_failures == 0)
        return;
    int failed = o == TM_OUT_CRASHED || o == TM_OUT_TIMEOUT;
    int stored = atomic_load_explicit(&c->state, memory_order_relaxed);
    if (!failed) {
        /* the fast path: a closed circuit with nothing counted */
        c->failures = 0;
        if (stored == TM_CIRCUIT_CLOSED)
            return;
    }
    int64_t now = tm_now_ms();
    enum tm_circuit_state s = tm_circuit_state(c, now);
    if (!failed) {
        if (s == TM_CIRCUIT_HALF_OPEN) {
            c->cool_off_ms = 0;
            atomic_store_explicit(&c->state, TM_CIRCUIT_CLOSED,
                                  memory_order_release);
            tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                         "circuit closed: a probe succeeded; intake "
                         "resumes");
        }
        /* while open, a message read before it opened may still succeed:
         * the probe after the cool-off decides */
        return;
    }
    c->failures++;
    switch (s) {
    case TM_CIRCUIT_CLOSED:
        if (c->failures >= t->circuit_failures) {
            open_for(c, now, t->circuit_cool_off_ms);
            tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                         "circuit open: %u crashes or timeouts in a row; "
                         "intake paused for %lld ms (messages stay in the "
                         "broker)", c->failures,
                         (long long)c->cool_off_ms);
        }
        break;
    case TM_CIRCUIT_HALF_OPEN: {
        int64_t ms = c->cool_off_ms * 2;
        if (ms > t->circuit_max_cool_off_ms)
            ms = t->circuit_max_cool_off_ms;
        if (ms < t->circuit_cool_off_ms)
            ms = t->circuit_cool_off_ms;
        open_for(c, now, ms);
        tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                     "circuit open again: a probe failed; intake paused "
                     "for %lld ms", (long long)ms);
        break;
    }
    case TM_CIRCUIT_OPEN:
        /* read before it opened: the cool-off already covers it */
        break;
    }
    assert(atomic_load(&c->state) == TM_CIRCUIT_CLOSED ||
           c->cool_off_ms > 0 || t->circuit_cool_off_ms == 0);
}

int64_t tm_circuit_gate(struct tm_circuit *c, const struct tm_cfg_task *t,
                        long long inflight, long *room)
{
    if (atomic_load_explicit(&c->state, memory_order_acquire) ==
        TM_CIRCUIT_CLOSED)
        return 0;
    int64_t now = tm_now_ms();
    int64_t until = atomic_load_explicit(&c->until_ms, memory_order_relaxed);
    if (now < until)
        return until - now < TM_CIRCUIT_WAIT_MAX_MS ? until - now
                                                     : TM_CIRCUIT_WAIT_MAX_MS;
    int expect = 0;
    if (atomic_compare_exchange_strong(&c->half_logged, &expect, 1))
        tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                     "circuit half-open: cool-off over; trying %d "
                     "message(s)", TM_CIRCUIT_PROBES);
    /* half-open: whatever is in flight already probes */
    long left = TM_CIRCUIT_PROBES - (long)inflight;
    if (left <= 0)
        return TM_CIRCUIT_PROBE_WAIT_MS;
    if (*room > left)
        *room = left;
    return 0;
}
