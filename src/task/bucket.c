/* bucket.c - the token bucket of rate_limit (see flow.h). */
#include "task/flow.h"

#include <assert.h>
#include <math.h>

uint32_t tm_flow_burst(const struct tm_cfg_task *t)
{
    assert(t->rate_count > 0 && t->rate_period_ms > 0);
    uint64_t b = (uint64_t)t->rate_count * TM_FLOW_BURST_MS /
                 (uint64_t)t->rate_period_ms;
    return b < 1 ? 1 : (uint32_t)b;
}

/* refill brings b up to date at now_ms. */
static void refill(struct tm_bucket *b, const struct tm_cfg_task *t,
                   int64_t now_ms)
{
    double cap = (double)tm_flow_burst(t);
    if (!b->started) {
        b->tokens = cap;
        b->at_ms = now_ms;
        b->started = 1;
    }
    if (now_ms > b->at_ms) {
        b->tokens += (double)(now_ms - b->at_ms) * (double)t->rate_count /
                     (double)t->rate_period_ms;
        b->at_ms = now_ms;
    }
    if (b->tokens > cap)
        b->tokens = cap;
}

size_t tm_bucket_take(struct tm_bucket *b, const struct tm_cfg_task *t,
                      int64_t now_ms, size_t want, int64_t *wait_ms)
{
    refill(b, t, now_ms);
    double whole = floor(b->tokens);
    size_t got = whole < (double)want ? (size_t)whole : want;
    b->tokens -= (double)got;
    *wait_ms = 0;
    if (got == 0 && want > 0) {
        double ms = ceil((1.0 - b->tokens) * (double)t->rate_period_ms /
                         (double)t->rate_count);
        *wait_ms = ms < TM_FLOW_MIN_WAIT_MS ? TM_FLOW_MIN_WAIT_MS
                                            : (int64_t)ms;
    }
    assert(b->tokens >= 0.0);
    return got;
}

void tm_bucket_give(struct tm_bucket *b, const struct tm_cfg_task *t,
                    size_t n)
{
    double cap = (double)tm_flow_burst(t);
    b->tokens += (double)n;
    if (b->tokens > cap)
        b->tokens = cap;
}
