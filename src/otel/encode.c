/* otel/encode.c - a batch of spans as one OTLP ExportTraceServiceRequest,
 * through the protoc-c code of vendor/opentelemetry-proto (built into
 * $(BUILD)/gen/ by the Makefile). One resource (service.name), one scope
 * (taskmill and its version), the batch's spans. */
#include "otel/otel.h"

#include <string.h>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"
#include "util/util.h"

typedef Opentelemetry__Proto__Common__V1__AnyValue any_value;
typedef Opentelemetry__Proto__Common__V1__KeyValue key_value;
typedef Opentelemetry__Proto__Trace__V1__Span pb_span;
typedef Opentelemetry__Proto__Trace__V1__Status pb_status;

/* Span.flags bits (trace.proto SpanFlags): the trace flags in the low
 * byte; whether the parent is remote is known (it is: the producer's). */
#define SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define SPAN_FLAGS_IS_REMOTE 0x200u

static void set_attr(key_value *kv, any_value *v, const struct tm_otel_attr *a)
{
    opentelemetry__proto__common__v1__key_value__init(kv);
    opentelemetry__proto__common__v1__any_value__init(v);
    kv->key = (char *)(uintptr_t)a->key;
    if (a->s != NULL) {
        v->value_case =
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
        v->string_value = (char *)(uintptr_t)a->s;
    } else {
        v->value_case =
            OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
        v->int_value = a->i;
    }
    kv->value = v;
}

uint8_t *tm_otel_encode(const struct tm_otel_span *head, size_t n,
                        const char *service_name, size_t *len)
{
    if (n == 0 || head == NULL)
        return NULL;
    size_t nattrs = 0;
    const struct tm_otel_span *s = head;
    for (size_t i = 0; i < n && s != NULL; i++, s = s->next)
        nattrs += s->nattrs;
    pb_span *spans = tm_calloc(n, sizeof *spans);
    pb_span **span_ptrs = tm_calloc(n, sizeof *span_ptrs);
    pb_status *status = tm_calloc(n, sizeof *status);
    key_value *kvs = tm_calloc(nattrs + 1, sizeof *kvs);
    key_value **kv_ptrs = tm_calloc(nattrs + 1, sizeof *kv_ptrs);
    any_value *vals = tm_calloc(nattrs + 1, sizeof *vals);

    size_t k = 0, count = 0;
    s = head;
    for (size_t i = 0; i < n && s != NULL; i++, s = s->next, count++) {
        pb_span *p = &spans[i];
        opentelemetry__proto__trace__v1__span__init(p);
        p->trace_id.data = (uint8_t *)(uintptr_t)s->ctx.trace_id;
        p->trace_id.len = sizeof s->ctx.trace_id;
        p->span_id.data = (uint8_t *)(uintptr_t)s->ctx.span_id;
        p->span_id.len = sizeof s->ctx.span_id;
        if (s->has_parent) {
            p->parent_span_id.data = (uint8_t *)(uintptr_t)s->parent_id;
            p->parent_span_id.len = sizeof s->parent_id;
        }
        if (s->tracestate != NULL)
            p->trace_state = (char *)(uintptr_t)s->tracestate;
        p->flags = s->ctx.flags | SPAN_FLAGS_HAS_IS_REMOTE |
                   (s->has_parent ? SPAN_FLAGS_IS_REMOTE : 0);
        p->name = (char *)(uintptr_t)s->name;
        p->kind = (Opentelemetry__Proto__Trace__V1__Span__SpanKind)s->kind;
        p->start_time_unix_nano = (uint64_t)s->start_unix_ns;
        p->end_time_unix_nano = (uint64_t)s->end_unix_ns;
        p->n_attributes = s->nattrs;
        p->attributes = &kv_ptrs[k];
        for (size_t a = 0; a < s->nattrs; a++, k++) {
            set_attr(&kvs[k], &vals[k], &s->attrs[a]);
            kv_ptrs[k] = &kvs[k];
        }
        if (s->error) {
            opentelemetry__proto__trace__v1__status__init(&status[i]);
            status[i].code =
                OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
            if (s->status_message != NULL)
                status[i].message = (char *)(uintptr_t)s->status_message;
            p->status = &status[i];
        }
        span_ptrs[i] = p;
    }

    key_value svc_kv, *svc_ptrs[1] = {&svc_kv};
    any_value svc_v;
    struct tm_otel_attr svc = {"service.name",
                               service_name != NULL ? service_name
                                                    : "taskmill", 0};
    set_attr(&svc_kv, &svc_v, &svc);
    Opentelemetry__Proto__Resource__V1__Resource res;
    opentelemetry__proto__resource__v1__resource__init(&res);
    res.n_attributes = 1;
    res.attributes = svc_ptrs;

    Opentelemetry__Proto__Common__V1__InstrumentationScope scope;
    opentelemetry__proto__common__v1__instrumentation_scope__init(&scope);
    scope.name = (char *)"taskmill";
    scope.version = (char *)TM_VERSION;

    Opentelemetry__Proto__Trace__V1__ScopeSpans ss, *ss_ptrs[1] = {&ss};
    opentelemetry__proto__trace__v1__scope_spans__init(&ss);
    ss.scope = &scope;
    ss.n_spans = count;
    ss.spans = span_ptrs;

    Opentelemetry__Proto__Trace__V1__ResourceSpans rs, *rs_ptrs[1] = {&rs};
    opentelemetry__proto__trace__v1__resource_spans__init(&rs);
    rs.resource = &res;
    rs.n_scope_spans = 1;
    rs.scope_spans = ss_ptrs;

    Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest req;
    opentelemetry__proto__collector__trace__v1__export_trace_service_request__init(
        &req);
    req.n_resource_spans = 1;
    req.resource_spans = rs_ptrs;

    size_t size =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__get_packed_size(
            &req);
    uint8_t *out = tm_malloc(size > 0 ? size : 1);
    *len =
        opentelemetry__proto__collector__trace__v1__export_trace_service_request__pack(
            &req, out);
    tm_free(spans);
    tm_free(span_ptrs);
    tm_free(status);
    tm_free(kvs);
    tm_free(kv_ptrs);
    tm_free(vals);
    return out;
}
