/* otel/run.c - the spans taskmill makes: the CONSUMER span of a run and
 * the PRODUCER span of a send. */
#include "otel/otel.h"

#include "task/msg.h"
#include "task/task.h"
#include "util/util.h"

void tm_otel_run_span(struct tm_otel *o, const struct tm_msg *m,
                      const char *system, const char *queue,
                      const char *group)
{
    if (o == NULL || !m->traced)
        return;
    struct tm_otel_span_in in = {
        .ctx = &m->span,
        .parent = m->has_parent ? &m->parent : NULL,
        .kind = TM_OTEL_CONSUMER,
        .name_verb = "process",
        .name_object = queue,
        .tracestate = m->tracestate,
        .tracestate_len = m->tracestate_len,
    };
    /* a message never run (a duplicate, an invalid one refused before its
     * run) spans the moment it was read */
    int64_t start = m->t_start_ns != 0 ? m->t_start_ns : m->t_recv_ns;
    int64_t end = m->t_end_ns >= start ? m->t_end_ns : start;
    in.start_unix_ns = tm_otel_mono_to_unix_ns(start);
    in.end_unix_ns = in.start_unix_ns + (end - start);
    char id[256];
    tm_snprintf(id, sizeof id, "%.*s", (int)m->id_len, m->id);
    size_t n = 0;
    in.attrs[n++] = (struct tm_otel_attr){"messaging.system", system, 0};
    in.attrs[n++] =
        (struct tm_otel_attr){"messaging.destination.name", queue, 0};
    in.attrs[n++] = (struct tm_otel_attr){"messaging.message.id", id, 0};
    if (group != NULL)
        in.attrs[n++] =
            (struct tm_otel_attr){"messaging.consumer.group.name", group, 0};
    in.attrs[n++] =
        (struct tm_otel_attr){"messaging.operation.type", "process", 0};
    in.attrs[n++] = (struct tm_otel_attr){
        "taskmill.task", m->task != NULL ? m->task->cfg->name : "", 0};
    in.attrs[n++] =
        (struct tm_otel_attr){"taskmill.attempt", NULL, (int64_t)m->attempt};
    const char *outcome = tm_outcome_label(m->outcome);
    in.attrs[n++] = (struct tm_otel_attr){"taskmill.outcome", outcome, 0};
    in.nattrs = n;
    if (m->outcome != TM_OUT_SUCCESS && m->outcome != TM_OUT_DUPLICATE) {
        in.error = 1;
        in.status_message = m->error != NULL ? m->error : outcome;
    }
    tm_otel_add(o, tm_otel_span_new(&in));
}

int tm_otel_send_begin(const struct tm_otel *o, struct tm_trace_ctx *ctx,
                       char tp[TM_TRACEPARENT_SIZE])
{
    tm_trace_new_trace(ctx);
    ctx->flags = tm_trace_sample_root(tm_otel_ratio(o)) ? TM_TRACE_SAMPLED
                                                        : 0;
    tm_traceparent_format(ctx, tp);
    return (ctx->flags & TM_TRACE_SAMPLED) != 0;
}

void tm_otel_send_span(struct tm_otel *o, const struct tm_trace_ctx *ctx,
                       const char *system, const char *queue,
                       const char *task, const char *id, int64_t start_ns,
                       int64_t end_ns, const char *error)
{
    if (o == NULL || !(ctx->flags & TM_TRACE_SAMPLED))
        return;
    struct tm_otel_span_in in = {
        .ctx = ctx,
        .kind = TM_OTEL_PRODUCER,
        .name_verb = "send",
        .name_object = queue,
        .error = error != NULL,
        .status_message = error,
    };
    in.start_unix_ns = tm_otel_mono_to_unix_ns(start_ns);
    in.end_unix_ns = in.start_unix_ns + (end_ns > start_ns ? end_ns - start_ns
                                                           : 0);
    size_t n = 0;
    in.attrs[n++] = (struct tm_otel_attr){"messaging.system", system, 0};
    in.attrs[n++] =
        (struct tm_otel_attr){"messaging.destination.name", queue, 0};
    if (id != NULL)
        in.attrs[n++] = (struct tm_otel_attr){"messaging.message.id", id, 0};
    in.attrs[n++] =
        (struct tm_otel_attr){"messaging.operation.type", "send", 0};
    in.attrs[n++] = (struct tm_otel_attr){"taskmill.task", task, 0};
    in.nattrs = n;
    tm_otel_add(o, tm_otel_span_new(&in));
}
