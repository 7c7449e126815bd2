/* msg.h - one delivery, its batch, its outcome and settlement. */
#ifndef TASKMILL_MSG_H
#define TASKMILL_MSG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "util/trace.h"

/* TM_OUTCOMES lists how one attempt can end, with its metric label. The
 * order is the order of the enum and of every per-outcome array. */
#define TM_OUTCOMES(X)             \
    X(SUCCESS, "success")          \
    X(ERROR, "error")              \
    X(REJECTED, "rejected")        \
    X(TIMEOUT, "timeout")          \
    X(CRASHED, "crashed")          \
    X(INVALID, "invalid")          \
    X(DUPLICATE, "duplicate")

enum tm_outcome {
    TM_OUT_NONE = 0, /* not run (abandoned at shutdown) */
#define TM_OUT_ENUM(name, label) TM_OUT_##name,
    TM_OUTCOMES(TM_OUT_ENUM)
#undef TM_OUT_ENUM
    TM_OUT_COUNT
};

/* tm_outcome_label returns the metric label of an outcome ("none" for
 * TM_OUT_NONE). */
const char *tm_outcome_label(enum tm_outcome o);

/* What the broker must do with a finished message. */
enum tm_settle {
    TM_SETTLE_NONE = 0,  /* leave unacknowledged (redelivered later) */
    TM_SETTLE_ACK = 1,   /* done */
    TM_SETTLE_RETRY = 2, /* run again after retry_delay_ms */
    TM_SETTLE_DEAD = 3   /* dead-letter with error, then ack */
};

struct tm_task;
struct tm_batch;

/*
 * struct tm_msg is one delivery. id and body point into storage owned by
 * the message's batch and stay valid until the batch is released; body is
 * NUL-terminated at body[body_len]. Fields below "result" are written by
 * the worker that ran the message, then read by the settle thread.
 */
struct tm_msg {
    struct tm_msg *next;        /* intrusive link: queues and lists */
    struct tm_task *task;       /* runtime task, set at intake */
    struct tm_batch *batch;     /* owner of id/body storage */
    size_t task_index;          /* index in cfg->tasks */
    const char *id;
    size_t id_len;
    const char *body;           /* NULL when the entry had no body */
    size_t body_len;
    const char *invalid;        /* static reason the broker found the
                                   delivery malformed, or NULL */
    unsigned attempt;           /* 1-based number of this run */
    uint64_t tag;               /* broker's delivery handle */
    void *bctx;                 /* broker per-delivery context */
    int64_t t_recv_ns;          /* monotonic: read from the broker */
    int64_t t_start_ns;         /* monotonic: run started */
    int64_t t_end_ns;           /* monotonic: run ended */
    enum tm_outcome outcome;
    enum tm_settle settle;
    int64_t retry_delay_ms;     /* with TM_SETTLE_RETRY */
    char *error;                /* owned reason, or NULL */
    char *result;               /* owned JSON result text, or NULL */
    size_t result_len;
    /* Request and deduplication metadata, set at intake by a broker that
     * handles them itself (Redis); each points into the batch's storage
     * like id, NULL when the message has none. */
    const char *reply_to;       /* where the answer goes */
    size_t reply_to_len;
    const char *correlation_id;
    size_t correlation_id_len;
    const char *dedup_key;
    size_t dedup_key_len;
    /* Trace context (W3C, docs/observability.md), set at intake by both
     * brokers through tm_msg_set_trace: the producer's context when the
     * message carried a valid traceparent (a malformed one is ignored:
     * has_parent 0), and its tracestate (pointing into the batch's
     * storage like id; NULL when absent or not carried on). */
    struct tm_trace_ctx parent;
    int has_parent;
    const char *tracestate;
    size_t tracestate_len;
    /* The run's own span (tm_msg_trace_begin, at intake, before the
     * run): a child of parent, or a new root; traced says a span is
     * recorded for it. traceparent is the text the task code reads
     * (tm_traceparent): the run's span when traced, else the producer's
     * context as it came, "" when there is none. */
    struct tm_trace_ctx span;
    int traced;
    char traceparent[TM_TRACEPARENT_SIZE];
    int duplicate;              /* intake: the dedup key succeeded already
                                   within dedup_ttl; not run, settled with
                                   outcome duplicate (result: the first
                                   success's, when the broker kept it) */
    int held;                   /* settled while its run's code still reads
                                   its storage (id, body, bctx): the thread
                                   pool's watchdog holds the batch for that
                                   code (tm_batch_hold), and a broker whose
                                   settlement frees the storage (RabbitMQ's
                                   delivery) leaves it to the batch's
                                   release instead */
};

/*
 * struct tm_batch owns the storage of n messages read in one broker call.
 * refs counts messages not yet released (and holds, tm_batch_hold); the
 * last tm_msg_release() or tm_batch_drop() calls
 * release(), which the broker sets to free its storage (and the batch).
 */
struct tm_batch {
    atomic_uint refs;
    void (*release)(struct tm_batch *b);
    void *owner;                /* broker storage, e.g. a redisReply */
    size_t n;
    struct tm_msg msgs[];
};

/* tm_batch_new allocates a batch of n zeroed messages with refs = n. */
struct tm_batch *tm_batch_new(size_t n);

/* tm_msg_release frees the message's error and result and drops its
 * reference on the batch (releasing the batch with the last one). */
void tm_msg_release(struct tm_msg *m);

/* tm_batch_hold takes one more reference on b, for code that still reads
 * a message's storage (id, body) after the message was released: a run
 * settled at its deadline whose code has not returned (pool/watch.c).
 * tm_batch_drop gives it back, releasing the batch with the last (NULL:
 * nothing). */
void tm_batch_hold(struct tm_batch *b);
void tm_batch_drop(struct tm_batch *b);

/* tm_msg_set_trace reads the message's traceparent (tp, tp_len bytes;
 * NULL: none) and tracestate (ts, ts_len; NULL: none): a valid
 * traceparent sets m->parent and has_parent, a malformed one is ignored;
 * the tracestate is kept (borrowed: it must live as long as m's storage)
 * only with a valid traceparent and when tm_tracestate_valid. */
void tm_msg_set_trace(struct tm_msg *m, const char *tp, size_t tp_len,
                      const char *ts, size_t ts_len);

/* tm_msg_trace_begin gives m its run's span: with record 0 (no exporter)
 * none, and traceparent the producer's context; with record 1, a child of
 * the parent (its sampled flag followed) or, without one, a new root
 * sampled with probability ratio; traced is set when sampled, and then
 * traceparent is the span's own. No allocation. */
void tm_msg_trace_begin(struct tm_msg *m, int record, double ratio);

/* tm_msg_set_error replaces m->error with a copy of the formatted text. */
void tm_msg_set_error(struct tm_msg *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* tm_msg_name_outcome makes m->error start with the outcome's label and
 * ": " ("timeout: ran past ...", "invalid: body is not valid JSON ..."),
 * the form dead letters, replies and logs carry, so that a reason can be
 * searched by outcome. Nothing for a success or a message not run to an
 * end (TM_OUT_NONE); an error that already starts so is left alone. */
void tm_msg_name_outcome(struct tm_msg *m);

#endif /* TASKMILL_MSG_H */
