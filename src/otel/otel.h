/* otel.h - the trace exporter (docs/observability.md): spans of runs and
 * sends, batched on a thread of its own and posted as OTLP/HTTP protobuf
 * to telemetry.otlp_endpoint.
 *
 * Files, bottom to top:
 *   curl.c    libcurl, opened on first need (curl_private.h; dlib.h)
 *   span.c    one span: its ids, times, attributes, in one allocation
 *   encode.c  a batch of spans as an ExportTraceServiceRequest
 *             (protoc-c code from vendor/opentelemetry-proto)
 *   export.c  the bounded queue, the exporter thread, the POST with its
 *             retries, the counters
 *   run.c     the span of a run, from its message (the settle thread),
 *             and the span of a send (emit, the API's publish)
 *
 * Threading: tm_otel_add and tm_otel_stats are called from any thread
 * (the settle threads, the admin API worker); they take the queue's lock
 * for a pointer push and never wait for the network. The exporter thread
 * alone encodes and posts.
 */
#ifndef TASKMILL_OTEL_H
#define TASKMILL_OTEL_H

#include <stddef.h>
#include <stdint.h>

#include "util/trace.h"

struct tm_cfg;
struct tm_msg;

/* Spans queued at most, awaiting export: more are dropped (counted). */
#define TM_OTEL_QUEUE_MAX 4096
/* Spans per export request at most; a batch leaves at this size or when
 * its oldest span has waited TM_OTEL_BATCH_MS. */
#define TM_OTEL_BATCH_MAX 512
#define TM_OTEL_BATCH_MS 1000

enum tm_otel_kind {
    TM_OTEL_PRODUCER = 4, /* Span.SpanKind values of trace.proto */
    TM_OTEL_CONSUMER = 5
};

/* struct tm_otel_attr is one attribute: a string, or an integer when s is
 * NULL. */
struct tm_otel_attr {
    const char *key; /* static */
    const char *s;
    int64_t i;
};

/* Attributes of one span at most. */
#define TM_OTEL_ATTRS_MAX 12

/* struct tm_otel_span is one finished span, owned by the exporter once
 * added. Made by tm_otel_span_new, in one allocation with its text. */
struct tm_otel_span {
    struct tm_otel_span *next;
    struct tm_trace_ctx ctx;    /* its trace, its own id */
    uint8_t parent_id[8];
    int has_parent;
    enum tm_otel_kind kind;
    int64_t start_unix_ns, end_unix_ns;
    const char *name;
    int error;                  /* status ERROR (else UNSET) */
    const char *status_message; /* with error, else NULL */
    const char *tracestate;     /* NULL: none */
    size_t nattrs;
    struct tm_otel_attr attrs[TM_OTEL_ATTRS_MAX];
    char text[];                /* name, strings, status message */
};

/* struct tm_otel_span_in is what a span is made of; strings are copied
 * (NULL: absent), attribute keys are static. */
struct tm_otel_span_in {
    const struct tm_trace_ctx *ctx;
    const struct tm_trace_ctx *parent; /* NULL: a root */
    enum tm_otel_kind kind;
    int64_t start_unix_ns, end_unix_ns;
    const char *name_verb;      /* "process", "send" */
    const char *name_object;    /* the queue */
    int error;
    const char *status_message;
    const char *tracestate;
    size_t tracestate_len;
    size_t nattrs;
    struct tm_otel_attr attrs[TM_OTEL_ATTRS_MAX];
};

/* tm_otel_span_new makes a span of in (strings copied): free it with
 * tm_otel_span_free (which accepts NULL). */
struct tm_otel_span *tm_otel_span_new(const struct tm_otel_span_in *in);
void tm_otel_span_free(struct tm_otel_span *s);

/* tm_otel_mono_to_unix_ns turns a CLOCK_MONOTONIC time in ns into epoch
 * ns, by the clocks' distance now. */
int64_t tm_otel_mono_to_unix_ns(int64_t mono_ns);

/* tm_otel_encode encodes the n spans of the list head (n >= 1) as one
 * ExportTraceServiceRequest of service service_name, into a new buffer
 * (*len bytes) the caller frees with tm_free. Returns NULL only when n is
 * 0. */
uint8_t *tm_otel_encode(const struct tm_otel_span *head, size_t n,
                        const char *service_name, size_t *len);

struct tm_otel;

/* tm_otel_new starts the exporter of cfg's telemetry: section: its
 * thread and queue. Without telemetry.otlp_endpoint returns NULL with err
 * empty: nothing made, no thread. NULL with err set when libcurl cannot
 * be opened or the thread not started. Free with tm_otel_free. */
struct tm_otel *tm_otel_new(const struct tm_cfg *cfg, char *err,
                            size_t errlen);

/* tm_otel_free sends what is queued (one try, within flush_ms), stops the
 * thread and frees the exporter. NULL is accepted. */
void tm_otel_free(struct tm_otel *o, int64_t flush_ms);

/* tm_otel_ratio is telemetry.sample_ratio. */
double tm_otel_ratio(const struct tm_otel *o);

/* tm_otel_add queues span s for export (ownership passes in every case):
 * dropped and counted when TM_OTEL_QUEUE_MAX spans wait already. Never
 * blocks on the network. */
void tm_otel_add(struct tm_otel *o, struct tm_otel_span *s);

/* tm_otel_run_span records the span of m's run (m->traced): "process
 * <queue>", kind CONSUMER, parent m->parent, its times and outcome;
 * system is "redis" or "rabbitmq", group the consumer group (NULL: none).
 * Called by the settle thread once m's outcome is known. */
void tm_otel_run_span(struct tm_otel *o, const struct tm_msg *m,
                      const char *system, const char *queue,
                      const char *group);

/* tm_otel_send_begin starts the context of a message about to be sent
 * (a new trace, sampled with telemetry.sample_ratio) and writes its
 * traceparent into tp; returns whether it is sampled (a send span is then
 * recorded by tm_otel_send_span). */
int tm_otel_send_begin(const struct tm_otel *o, struct tm_trace_ctx *ctx,
                       char tp[TM_TRACEPARENT_SIZE]);

/* tm_otel_send_span records the PRODUCER span "send <queue>" of a message
 * sent from start_ns to end_ns (monotonic): id is the new message's id
 * (NULL when the send failed, with the reason in error). */
void tm_otel_send_span(struct tm_otel *o, const struct tm_trace_ctx *ctx,
                       const char *system, const char *queue,
                       const char *task, const char *id, int64_t start_ns,
                       int64_t end_ns, const char *error);

/* struct tm_otel_stats: spans sent to the collector and accepted, and
 * spans dropped (queue full, a request refused, retries given up). */
struct tm_otel_stats {
    uint64_t exported;
    uint64_t dropped;
};
void tm_otel_stats(const struct tm_otel *o, struct tm_otel_stats *out);

#endif /* TASKMILL_OTEL_H */
