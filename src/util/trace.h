/* trace.h - W3C Trace Context (https://www.w3.org/TR/trace-context/):
 * the traceparent a message carries, parsed, made and written. Pure text
 * and random numbers: no I/O, no allocation. */
#ifndef TASKMILL_TRACE_H
#define TASKMILL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length of a version-00 traceparent, "00-" 32 hex "-" 16 hex "-"
 * 2 hex, and the buffer that holds one with its NUL. */
#define TM_TRACEPARENT_LEN 55
#define TM_TRACEPARENT_SIZE 56
/* The longest tracestate carried on (the specification's 32 members of at
 * most 256 bytes and their commas, rounded); a longer one is dropped. */
#define TM_TRACESTATE_MAX 8192

/* the sampled bit of trace-flags */
#define TM_TRACE_SAMPLED 0x01u

/* struct tm_trace_ctx is one span's context: its trace, its own id, its
 * flags. Both ids non-zero in a valid context. */
struct tm_trace_ctx {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint8_t flags;
};

/*
 * tm_traceparent_parse reads the traceparent header s (len bytes, no NUL
 * needed) into *out. Returns 0, or -1 when it is malformed: then *out is
 * untouched and the message is treated as one without a context. The
 * rules are the specification's: lower-case hex only; version ff is
 * invalid; version 00 is exactly 55 bytes; a later version may be longer
 * when byte 55 is '-' (its first four fields are read as 00's); an
 * all-zero trace-id or parent-id is invalid.
 */
int tm_traceparent_parse(const char *s, size_t len, struct tm_trace_ctx *out);

/* tm_traceparent_format writes ctx as a version-00 traceparent into buf
 * (TM_TRACEPARENT_SIZE bytes): 55 characters and a NUL. */
void tm_traceparent_format(const struct tm_trace_ctx *ctx,
                           char buf[TM_TRACEPARENT_SIZE]);

/* tm_tracestate_valid says whether s (len bytes) may be carried on as a
 * tracestate: at most TM_TRACESTATE_MAX bytes of printable ASCII (the
 * members are not checked one by one: it is passed on, never read). */
bool tm_tracestate_valid(const char *s, size_t len);

/* tm_trace_new_trace fills ctx->trace_id and ctx->span_id with random
 * non-zero ids (a new root); tm_trace_new_span only span_id (a child in
 * the same trace). From a generator of the calling thread, seeded from
 * the kernel's random pool once. */
void tm_trace_new_trace(struct tm_trace_ctx *ctx);
void tm_trace_new_span(struct tm_trace_ctx *ctx);

/* tm_trace_sample_root decides a new root's sampled flag from ratio
 * (0..1): true with that probability; 1 is always, 0 never. */
bool tm_trace_sample_root(double ratio);

#endif /* TASKMILL_TRACE_H */
