/* amqp/delivery.c - RabbitMQ deliveries assembled from their frames:
 * tm_amqp_task_frame (the frame callback the link is given, link.c)
 * takes each frame of a task's channel (basic.deliver, its content
 * header, its body frames) into the task's partial delivery, then to its
 * ready list, its park list (x-not-before ahead, read here; delay.c), or
 * back to RabbitMQ (after wake()); a body over max_payload is rejected
 * unread, to the dead-letter queue. The lanes (intake.c) take the ready
 * lists. */
#include "amqp.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

void tm_amqp_delivery_free(struct tm_amqp_delivery *d)
{
    if (d == NULL)
        return;
    unsigned extra = atomic_load_explicit(&d->extra_owners,
                                          memory_order_acquire);
    while (extra > 0)
        if (atomic_compare_exchange_weak_explicit(
                &d->extra_owners, &extra, extra - 1, memory_order_acq_rel,
                memory_order_acquire))
            return; /* another owner frees it */
    if (d->has_pool)
        sym_empty_amqp_pool(&d->pool);
    tm_free(d);
}

void tm_amqp_ready_push(struct tm_amqp_task *at, struct tm_amqp_delivery *d)
{
    d->next = NULL;
    if (at->ready_tail != NULL)
        at->ready_tail->next = d;
    else
        at->ready = d;
    at->ready_tail = d;
    at->nready++;
    at->link->fresh++;
}

struct tm_amqp_delivery *tm_amqp_ready_pop(struct tm_amqp_task *at)
{
    struct tm_amqp_delivery *d = at->ready;
    if (d != NULL) {
        at->ready = d->next;
        if (at->ready == NULL)
            at->ready_tail = NULL;
        at->nready--;
        d->next = NULL;
    }
    return d;
}

static int reject_oversized(struct tm_amqp_task *at,
                            const struct tm_amqp_delivery *d);

/* delivery_start makes the delivery of the deliver + header frames. */
static struct tm_amqp_delivery *delivery_start(struct tm_amqp_task *at,
                                          const amqp_frame_t *f)
{
    const amqp_basic_properties_t *p = f->payload.properties.decoded;
    uint64_t size = f->payload.properties.body_size;
    char assigned[64] = "";
    amqp_bytes_t none = {0, NULL};
    amqp_bytes_t mid = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                           ? p->message_id
                           : none;
    amqp_bytes_t rto = (p->_flags & AMQP_BASIC_REPLY_TO_FLAG) ? p->reply_to
                                                                : none;
    amqp_bytes_t cid = (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
                           ? p->correlation_id
                           : none;
    amqp_bytes_t cty = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
                           ? p->content_type
                           : none;
    if (mid.len == 0 || memchr(mid.bytes, '\0', mid.len) != NULL) {
        tm_snprintf(assigned, sizeof assigned, "amqp-%llu-%s",
                    (unsigned long long)at->dlv_tag, at->salt);
        mid.len = strlen(assigned);
        mid.bytes = assigned;
    }
    if (size >= SIZE_MAX / 2)
        return NULL;
    /* a body over max_payload is never held: its frames are dropped as
     * they come (one frame, at most TM_AMQP_FRAME_MAX bytes, at a time) */
    int oversized = size > at->cfg->max_payload;
    size_t need = mid.len + 1 + rto.len + 1 + cid.len + 1 + cty.len + 1 +
                  (oversized ? 0 : (size_t)size + 1);
    /* the body is written by the body frames: no need to zero it */
    struct tm_amqp_delivery *d = tm_malloc(sizeof *d + need);
    memset(d, 0, sizeof *d);
    atomic_init(&d->extra_owners, 0);
    char *w = d->mem;
#define TM_AMQP_COPY(field, b)                         \
    do {                                          \
        d->field = w;                             \
        if ((b).len > 0)                          \
            memcpy(w, (b).bytes, (b).len);        \
        w[(b).len] = '\0';                        \
        w += (b).len + 1;                         \
    } while (0)
    TM_AMQP_COPY(id, mid);
    TM_AMQP_COPY(reply_to, rto);
    TM_AMQP_COPY(correlation_id, cid);
    TM_AMQP_COPY(content_type, cty);
#undef TM_AMQP_COPY
    if (rto.len == 0)
        d->reply_to = NULL;
    if (cid.len == 0)
        d->correlation_id = NULL;
    if (cty.len == 0)
        d->content_type = NULL;
    d->oversized = oversized;
    d->body = oversized ? NULL : w;
    d->body_len = (size_t)size;
    d->tag = at->dlv_tag;
    d->gen = at->gen;
    if (p->_flags & AMQP_BASIC_PRIORITY_FLAG) {
        d->has_priority = 1;
        d->priority = p->priority;
    }
    long long runs = 0, redeliveries = 0;
    if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0) {
        sym_init_amqp_pool(&d->pool, 1024);
        d->has_pool = 1;
        if (sym_amqp_table_clone(&p->headers, &d->headers, &d->pool) !=
            AMQP_STATUS_OK)
            memset(&d->headers, 0, sizeof d->headers);
        /* x-attempts: runs so far (set by retries); x-delivery-count:
         * redeliveries counted by quorum queues */
        if (tm_amqp_field_int(tm_amqp_table_get(&p->headers, "x-attempts"),
                              &runs) != 0 ||
            runs < 0)
            runs = 0;
        if (tm_amqp_field_int(
                tm_amqp_table_get(&p->headers, "x-delivery-count"),
                &redeliveries) != 0 ||
            redeliveries < 0)
            redeliveries = 0;
    }
    long long attempt = runs + redeliveries + 1;
    d->attempt = attempt > 1000000000LL ? 1000000000U : (unsigned)attempt;
    return d;
}

int tm_amqp_not_before(const amqp_table_t *headers, int64_t *due_ms)
{
    const amqp_field_value_t *v = tm_amqp_table_get(headers, "x-not-before");
    long long x;
    if (v == NULL)
        return -1;
    if (v->kind == AMQP_FIELD_KIND_F64 || v->kind == AMQP_FIELD_KIND_F32) {
        double f = v->kind == AMQP_FIELD_KIND_F64 ? v->value.f64
                                                  : (double)v->value.f32;
        if (!isfinite(f) || f < 0 || f > 9.0e15)
            return -1;
        *due_ms = (int64_t)ceil(f);
        return 0;
    }
    if (tm_amqp_field_int(v, &x) != 0)
        return -1;
    *due_ms = x;
    return 0;
}

int tm_amqp_park_due(const struct tm_amqp_delivery *d, int64_t now_ms,
                     int64_t *left_ms)
{
    int64_t due;
    if (d->oversized || tm_amqp_not_before(&d->headers, &due) != 0 ||
        due <= now_ms)
        return 0;
    *left_ms = due - now_ms;
    return 1;
}

/* parks says whether d's x-not-before lies ahead; the clock is read only
 * for a delivery with headers (one without has no x-not-before). */
static int parks(const struct tm_amqp_delivery *d)
{
    int64_t left;
    return d->headers.num_entries > 0 &&
           tm_amqp_park_due(d, tm_wall_ms(), &left);
}

/* delivery_done takes the delivery whose body is complete: to the ready
 * list, or back to RabbitMQ after wake(), or to the dead-letter queue
 * when it is oversized. Returns -1 when the connection failed. */
static int delivery_done(struct tm_amqp_task *at)
{
    struct tm_amqp_delivery *d = at->partial;
    int err = 0;
    at->partial = NULL;
    at->dlv_state = 0;
    if (d->oversized) {
        err = reject_oversized(at, d) != 0;
    } else if (at->stopped) {
        /* consumption was cancelled (wake): give it back at once */
        tm_amqp_settle_tags(at, NULL, 0, &d->tag, 1, 0, &err);
    } else if (parks(d)) {
        /* x-not-before ahead: the settle thread parks it (delay.c) */
        d->body[d->body_len] = '\0';
        d->next = NULL;
        if (at->park_tail != NULL)
            at->park_tail->next = d;
        else
            at->park = d;
        at->park_tail = d;
        atomic_store_explicit(&at->parked, 1, memory_order_relaxed);
        d = NULL;
    } else {
        d->body[d->body_len] = '\0';
        tm_amqp_ready_push(at, d);
        d = NULL;
    }
    tm_amqp_delivery_free(d);
    return err ? -1 : 0;
}

/* on_method handles a method of the task's channel: 0, 1 when the
 * channel went down, -1 when the connection failed. */
static int on_method(struct tm_amqp_task *at, const amqp_method_t *m)
{
    switch (m->id) {
    case AMQP_CHANNEL_CLOSE_METHOD: {
        /* the broker closed this task's channel (a refused ack, its
         * queue gone): answered, the task opens it again; the other
         * tasks of the connection go on */
        const amqp_channel_close_t *x = m->decoded;
        tm_snprintf(at->errstr, sizeof at->errstr,
                    "channel %u closed by the broker: %u %.*s", at->ch,
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        if (tm_amqp_channel_closed_ok(at->conn, at->ch) != AMQP_STATUS_OK) {
            tm_snprintf(at->errstr, sizeof at->errstr,
                        "channel.close-ok failed");
            return -1;
        }
        tm_amqp_task_down(at, /* closed = */ 1);
        return 1;
    }
    case AMQP_BASIC_DELIVER_METHOD: {
        const amqp_basic_deliver_t *x = m->decoded;
        if (at->dlv_state != 0) {
            tm_snprintf(at->errstr, sizeof at->errstr, "protocol error: a "
                        "delivery started inside another");
            return -1;
        }
        at->dlv_tag = x->delivery_tag;
        at->dlv_state = 1;
        return 0;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        tm_snprintf(at->errstr, sizeof at->errstr, "RabbitMQ cancelled the "
                    "consumer of '%s' (queue deleted?)", at->cfg->queue);
        tm_amqp_task_down(at, /* closed = */ 0);
        return 1;
    default:
        return 0;
    }
}

int tm_amqp_task_frame(struct tm_amqp_task *at, const amqp_frame_t *f)
{
    assert(f->channel == at->ch && at->conn != NULL);
    if (f->frame_type == AMQP_FRAME_METHOD)
        return on_method(at, &f->payload.method);
    if (f->frame_type == AMQP_FRAME_HEADER) {
        if (at->dlv_state == 1) {
            at->partial = delivery_start(at, f);
            if (at->partial == NULL) {
                tm_snprintf(at->errstr, sizeof at->errstr, "a message of "
                            "%llu bytes is too large to hold",
                            (unsigned long long)
                                f->payload.properties.body_size);
                return -1;
            }
            at->dlv_state = 2;
            if (at->partial->body_len == 0)
                return delivery_done(at);
        }
        return 0;
    }
    if (f->frame_type == AMQP_FRAME_BODY) {
        const amqp_bytes_t *b = &f->payload.body_fragment;
        if (at->dlv_state == 2) {
            struct tm_amqp_delivery *d = at->partial;
            if (b->len > d->body_len - d->body_got) {
                tm_snprintf(at->errstr, sizeof at->errstr, "protocol error: "
                            "body longer than announced");
                return -1;
            }
            if (!d->oversized)
                memcpy(d->body + d->body_got, b->bytes, b->len);
            d->body_got += b->len;
            if (d->body_got == d->body_len)
                return delivery_done(at);
        }
    }
    return 0;
}

/* reject_oversized dead-letters a delivery whose body exceeds the task's
 * max_payload, unread: basic.reject without requeue makes RabbitMQ move
 * the original, body intact, to the dead-letter queue through the
 * queue's dead-letter exchange (x-death: reason "rejected"; `dlq list`
 * names the cause from the body's size). Returns -1 when the connection
 * failed (at->errstr). */
static int reject_oversized(struct tm_amqp_task *at,
                            const struct tm_amqp_delivery *d)
{
    tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, at->cfg->name, d->id,
                 "invalid: body of %zu bytes exceeds max_payload (%zu "
                 "bytes); dead-lettered unread", d->body_len,
                 at->cfg->max_payload);
    if (sym_amqp_basic_reject(at->conn, at->ch, d->tag,
                              /* requeue = */ 0) != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.reject failed");
        return -1;
    }
    tm_amqp_floor_add(&at->acks, &d->tag, 1);
    return 0;
}
