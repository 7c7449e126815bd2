/* policy.c - what happens to a message after it ran: ack, retry, dead. */
#include "task/task.h"

#include "util/util.h"

/* Jitter is at most a fifth of the base delay (docs/delivery.md, Retries
 * and backoff: up to 20%). */
#define TM_JITTER_FRACTION 0.2

int64_t tm_retry_delay_ms(const struct tm_cfg_task *t, unsigned attempt,
                          double r)
{
    int64_t d = t->backoff_ms > 0 ? t->backoff_ms : 1;
    int64_t cap = t->max_backoff_ms > d ? t->max_backoff_ms : d;
    for (unsigned i = 1; i < attempt && d < cap; i++)
        d = d > cap / 2 ? cap : d * 2;
    if (d > cap)
        d = cap;
    if (r < 0)
        r = 0;
    if (r >= 1)
        r = 0.999999;
    return d + (int64_t)((double)d * TM_JITTER_FRACTION * r);
}

int tm_policy_may_retry(const struct tm_cfg_task *t, unsigned attempt)
{
    return t->max_retries < 0 || attempt <= (unsigned)t->max_retries;
}

int tm_policy_may_run(const struct tm_cfg_task *t, unsigned attempt)
{
    return attempt <= 1 || tm_policy_may_retry(t, attempt - 1);
}

void tm_policy_settle(struct tm_msg *m, const struct tm_cfg_task *t)
{
    m->retry_delay_ms = 0;
    switch (m->outcome) {
    case TM_OUT_NONE:
        m->settle = TM_SETTLE_NONE;
        return;
    case TM_OUT_SUCCESS:
    case TM_OUT_DUPLICATE:
        m->settle = TM_SETTLE_ACK;
        return;
    case TM_OUT_INVALID:
    case TM_OUT_REJECTED:
        m->settle = TM_SETTLE_DEAD;
        return;
    case TM_OUT_ERROR:
    case TM_OUT_TIMEOUT:
    case TM_OUT_CRASHED:
    case TM_OUT_COUNT:
        break;
    }
    if (t->on_error == TM_ON_ERROR_REJECT ||
        !tm_policy_may_retry(t, m->attempt)) {
        m->settle = TM_SETTLE_DEAD;
        return;
    }
    m->settle = TM_SETTLE_RETRY;
    double r = (double)(tm_rand64() >> 11) / 9007199254740992.0;
    m->retry_delay_ms = tm_retry_delay_ms(t, m->attempt, r);
}
