/* msg.c - deliveries and their batches. */
#include "task/msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

static const char *const outcome_labels[TM_OUT_COUNT] = {
    [TM_OUT_NONE] = "none",
#define TM_OUT_LABEL(name, label) [TM_OUT_##name] = label,
    TM_OUTCOMES(TM_OUT_LABEL)
#undef TM_OUT_LABEL
};

const char *tm_outcome_label(enum tm_outcome o)
{
    if ((int)o < 0 || o >= TM_OUT_COUNT)
        return "none";
    return outcome_labels[o];
}

struct tm_batch *tm_batch_new(size_t n)
{
    struct tm_batch *b =
        tm_calloc(1, sizeof *b + n * sizeof(struct tm_msg));
    atomic_init(&b->refs, (unsigned)n);
    b->n = n;
    for (size_t i = 0; i < n; i++)
        b->msgs[i].batch = b;
    return b;
}

void tm_msg_release(struct tm_msg *m)
{
    tm_free(m->error);
    m->error = NULL;
    tm_free(m->result);
    m->result = NULL;
    tm_batch_drop(m->batch);
}

void tm_batch_hold(struct tm_batch *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void tm_batch_drop(struct tm_batch *b)
{
    if (b == NULL)
        return;
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        if (b->release != NULL)
            b->release(b);
        else
            tm_free(b);
    }
}

void tm_msg_set_error(struct tm_msg *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = tm_vasprintf(fmt, ap);
    va_end(ap);
    tm_free(m->error);
    m->error = s;
}

void tm_msg_name_outcome(struct tm_msg *m)
{
    if (m->outcome == TM_OUT_NONE || m->outcome == TM_OUT_SUCCESS ||
        m->outcome == TM_OUT_DUPLICATE)
        return;
    const char *label = tm_outcome_label(m->outcome);
    size_t n = strlen(label);
    const char *err = m->error != NULL ? m->error : "";
    if (strncmp(err, label, n) == 0 && err[n] == ':')
        return;
    if (*err == '\0')
        tm_msg_set_error(m, "%s: no reason given", label);
    else
        tm_msg_set_error(m, "%s: %s", label, err);
}

void tm_msg_set_trace(struct tm_msg *m, const char *tp, size_t tp_len,
                      const char *ts, size_t ts_len)
{
    m->has_parent = tp != NULL &&
                    tm_traceparent_parse(tp, tp_len, &m->parent) == 0;
    m->tracestate = NULL;
    m->tracestate_len = 0;
    if (m->has_parent && tm_tracestate_valid(ts, ts_len)) {
        m->tracestate = ts;
        m->tracestate_len = ts_len;
    }
}

void tm_msg_trace_begin(struct tm_msg *m, int record, double ratio)
{
    m->traced = 0;
    if (record) {
        if (m->has_parent) {
            memcpy(m->span.trace_id, m->parent.trace_id,
                   sizeof m->span.trace_id);
            m->span.flags = m->parent.flags;
            tm_trace_new_span(&m->span);
        } else {
            tm_trace_new_trace(&m->span);
            m->span.flags = tm_trace_sample_root(ratio) ? TM_TRACE_SAMPLED
                                                        : 0;
        }
        m->traced = (m->span.flags & TM_TRACE_SAMPLED) != 0;
    }
    if (m->traced)
        tm_traceparent_format(&m->span, m->traceparent);
    else if (m->has_parent)
        tm_traceparent_format(&m->parent, m->traceparent);
    else
        m->traceparent[0] = '\0';
}
