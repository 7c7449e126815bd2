/* amqp/intake.c - RabbitMQ intake: the owner of the consuming
 * connections (link.c, given the callbacks below), the consumer of each
 * task's channel stopped and started again, and the lanes (one per
 * consuming connection) that hand the deliveries assembled from its
 * frames (delivery.c) to the pool, with the acks held back (acks.c) sent
 * when due. */
#include "amqp.h"

#include <assert.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

/* header_bytes: the bytes of a string header of h, NULL when h has none
 * of that name or it is not a string */
static const amqp_bytes_t *header_bytes(const amqp_table_t *h,
                                        const char *key)
{
    const amqp_field_value_t *v = tm_amqp_table_get(h, key);
    if (v == NULL || (v->kind != AMQP_FIELD_KIND_UTF8 &&
                      v->kind != AMQP_FIELD_KIND_BYTES))
        return NULL;
    return &v->value.bytes;
}

/* set_trace reads the headers traceparent and tracestate of a delivery
 * (kept with it, as long as m's storage) into m. */
static void set_trace(struct tm_msg *m, const amqp_table_t *h)
{
    const amqp_bytes_t *tp = header_bytes(h, "traceparent");
    const amqp_bytes_t *ts = header_bytes(h, "tracestate");
    if (tp != NULL)
        tm_msg_set_trace(m, tp->bytes, tp->len,
                         ts != NULL ? ts->bytes : NULL, ts != NULL ? ts->len : 0);
}

/* tm_amqp_conn_reset forgets everything tied to the task's channel (which
 * is gone): unacknowledged deliveries are redelivered by RabbitMQ. */
void tm_amqp_conn_reset(struct tm_amqp_task *at)
{
    struct tm_amqp_delivery *d;
    while ((d = tm_amqp_ready_pop(at)) != NULL)
        tm_amqp_delivery_free(d);
    /* parked ones not taken yet: their tags died with the connection */
    while ((d = at->park) != NULL) {
        at->park = d->next;
        tm_amqp_delivery_free(d);
    }
    at->park_tail = NULL;
    atomic_store_explicit(&at->parked, 0, memory_order_relaxed);
    tm_amqp_delivery_free(at->partial);
    at->partial = NULL;
    at->dlv_state = 0;
    at->dlv_tag = 0;
    /* acks held back died with the connection too: those messages are
     * redelivered (at least once) */
    at->acks.floor = 0;
    at->acks.n = 0;
    at->acks.nheld = 0;
    at->stopped = 0;
}

/* What the consuming connections report to intake: each frame of a
 * task's channel goes to delivery.c, an opened channel's pause state to
 * pause.c, and a channel gone forgets what was tied to it. */
static const struct tm_amqp_link_cbs intake_cbs = {
    .cb_frame = tm_amqp_task_frame,
    .cb_opened = tm_amqp_pause_connected,
    .cb_reset = tm_amqp_conn_reset,
};

int tm_amqp_intake_init(struct tm_amqp_broker *ab)
{
    return tm_amqp_links_init(ab, &intake_cbs);
}

void tm_amqp_intake_close(struct tm_amqp_broker *ab)
{
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        pthread_mutex_lock(&l->io_mu);
        for (size_t k = 0; k < l->ntasks; k++) {
            struct tm_amqp_task *at = l->tasks[k];
            /* the acks held back go out before the connection closes:
             * otherwise RabbitMQ would deliver those messages again */
            if (tm_amqp_acks_flush(at, /* force = */ 1, tm_now_ms()) != 0)
                tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, at->cfg->name,
                             NULL, "%s; RabbitMQ delivers again what was "
                             "not acknowledged", at->errstr);
        }
        tm_amqp_link_close(l);
        pthread_mutex_unlock(&l->io_mu);
    }
}

/* tm_amqp_stop_consuming cancels the task's consumer (wake()) without waiting
 * for the broker's answer, and gives back the deliveries not handed over
 * yet, so that RabbitMQ can deliver them elsewhere at once; what arrives
 * after is given back as it comes (delivery_done). io_mu held. */
int tm_amqp_stop_consuming(struct tm_amqp_task *at)
{
    if (at->stopped || at->conn == NULL)
        return 0;
    at->stopped = 1;
    amqp_basic_cancel_t cancel;
    memset(&cancel, 0, sizeof cancel);
    cancel.consumer_tag = sym_amqp_cstring_bytes(at->consumer_tag);
    cancel.nowait = 1;
    if (sym_amqp_send_method(at->conn, at->ch,
                             AMQP_BASIC_CANCEL_METHOD,
                             &cancel) != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.cancel failed");
        return -1;
    }
    int err = 0;
    struct tm_amqp_delivery *d;
    while (!err && (d = tm_amqp_ready_pop(at)) != NULL) {
        tm_amqp_settle_tags(at, NULL, 0, &d->tag, 1, 0, &err);
        tm_amqp_delivery_free(d);
    }
    return err ? -1 : 0;
}

static void cb_release_batch(struct tm_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        tm_amqp_delivery_free(b->msgs[i].bctx);
    tm_free(b);
}

/* woken says whether wake() was called since this link's intake last
 * noticed; noticing it makes this fetch return at once. */
static int woken(struct tm_amqp_link *l)
{
    unsigned seq = atomic_load(&l->ab->wake_seq);
    if (seq == l->seen_wake)
        return 0;
    l->seen_wake = seq;
    return 1;
}

size_t tm_amqp_lanes(struct tm_broker *b)
{
    return ((struct tm_amqp_broker *)b)->nlinks;
}

size_t tm_amqp_lane_of(struct tm_broker *b, size_t ti)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    assert(ti < ab->ntasks);
    return ab->tasks[ti].link->index;
}

void tm_amqp_room_made(struct tm_broker *b, size_t ti)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    if (ti >= ab->ntasks)
        return;
    struct tm_amqp_link *l = ab->tasks[ti].link;
    atomic_store(&l->poked, 1);
    tm_amqp_signal_intake(l);
}

/*
 * prepare brings each task of l to what it should be now (io_mu held):
 * a pause read since is applied (consumer cancelled, or to start again),
 * a consumer cancelled by wake() starts again once the task has room (a
 * reload that did not happen: intake goes on), and a channel that failed
 * opens again when its wait is over. *wait_ms is lowered to the next such
 * wait. -1 when the connection failed (then lost).
 */
static int prepare(struct tm_amqp_link *l, const size_t *room,
                   int64_t now, int64_t *wait_ms)
{
    for (size_t k = 0; k < l->ntasks && l->conn != NULL; k++) {
        struct tm_amqp_task *at = l->tasks[k];
        if (at->conn == NULL) {
            if (at->reopen_at > now) {
                if (at->reopen_at - now < *wait_ms)
                    *wait_ms = at->reopen_at - now;
                continue;
            }
            int perm, dead;
            if (tm_amqp_task_open(at, &perm, &dead) != 0) {
                if (dead) {
                    tm_amqp_conn_lost(at, "open");
                    return -1;
                }
                continue;
            }
        }
        if (tm_amqp_pause_apply(at) != 0) {
            tm_amqp_conn_lost(at, "pause");
            return -1;
        }
        if (at->stopped && room[at->index] > 0) {
            char ctag[TM_AMQP_SHORTSTR_MAX + 1];
            tm_amqp_lowat_off(l); /* its answers are short */
            if (tm_amqp_start_consumer(at, l->conn, ctag, at->errstr,
                                       sizeof at->errstr) != 0) {
                tm_amqp_conn_lost(at, "consume");
                return -1;
            }
            tm_snprintf(at->consumer_tag, sizeof at->consumer_tag, "%s",
                        ctag);
            at->stopped = 0;
        }
    }
    return l->conn != NULL ? 0 : -1;
}

/* any_ready says whether a task of l with room has deliveries ready. */
static int any_ready(const struct tm_amqp_link *l, const size_t *room)
{
    for (size_t k = 0; k < l->ntasks; k++)
        if (l->tasks[k]->nready > 0 && room[l->tasks[k]->index] > 0)
            return 1;
    return 0;
}

/* flush_acks sends the acks held back that are due, on every task of l,
 * and lowers *wait_ms to when the next are due. -1 when the connection
 * failed (then lost). */
static int flush_acks(struct tm_amqp_link *l, int64_t now, int64_t *wait_ms)
{
    for (size_t k = 0; k < l->ntasks; k++) {
        struct tm_amqp_task *at = l->tasks[k];
        if (at->acks.nheld == 0)
            continue;
        if (tm_amqp_acks_flush(at, /* force = */ 0, now) != 0) {
            tm_amqp_conn_lost(at, "ack");
            return -1;
        }
        int64_t hold = tm_amqp_acks_wait_ms(at, now);
        if (hold >= 0 && hold < *wait_ms)
            *wait_ms = hold;
    }
    return 0;
}

/* take makes out[] the batches of what l's tasks have ready, up to their
 * room: one batch per task; returns how many. */
static int take(struct tm_amqp_link *l, const size_t *room,
                struct tm_batch **out, size_t nout)
{
    int nb = 0;
    size_t total = 0;
    unsigned prefetch = 0;
    int64_t now = tm_now_ns();
    if (l->lowat)
        atomic_fetch_add_explicit(&tm_broker_lowat_batches, 1,
                                  memory_order_relaxed);
    for (size_t j = 0; j < l->ntasks && (size_t)nb < nout; j++) {
        struct tm_amqp_task *at = l->tasks[j];
        size_t r = room[at->index];
        size_t k = at->nready < r ? at->nready : r;
        if (k == 0)
            continue;
        struct tm_batch *batch = tm_batch_new(k);
        batch->release = cb_release_batch;
        for (size_t i = 0; i < k; i++) {
            struct tm_amqp_delivery *d = tm_amqp_ready_pop(at);
            struct tm_msg *m = &batch->msgs[i];
            m->task_index = at->index;
            m->id = d->id;
            m->id_len = strlen(d->id);
            m->body = d->body;
            m->body_len = d->body_len;
            m->attempt = d->attempt;
            m->tag = d->tag;
            m->bctx = d;
            m->t_recv_ns = now;
            if (d->headers.num_entries > 0)
                set_trace(m, &d->headers);
        }
        out[nb++] = batch;
        total += k;
        if (at->cfg->prefetch > prefetch)
            prefetch = at->cfg->prefetch;
    }
    /* The low-water mark pays while deliveries come in batches of
     * TM_AMQP_LOWAT_ON or more, for a task whose window is large enough
     * (TM_AMQP_LOWAT_PREFETCH) that the mark is a small part of it. */
    tm_amqp_lowat_set(l, prefetch >= TM_AMQP_LOWAT_PREFETCH &&
                             (l->lowat ? total >= TM_AMQP_LOWAT_OFF
                                       : total >= TM_AMQP_LOWAT_ON));
    return nb;
}

/*
 * tm_amqp_fetch_lane reads the deliveries of lane l's tasks (those of
 * one link) up to their room. It holds io_mu only while it touches the
 * connection: connecting and waiting (poll on the socket and the link's
 * eventfd) happen without it, so the settle thread can settle at any
 * time. The first call after wake() returns 0 at once; a call after that
 * with room (intake started again) consumes again.
 */
int tm_amqp_fetch_lane(struct tm_broker *b, size_t lane, const size_t *room,
                       int timeout_ms, struct tm_batch **out, size_t nout)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    assert(lane < ab->nlinks);
    struct tm_amqp_link *l = &ab->links[lane];
    int n = 0;
    pthread_mutex_lock(&l->io_mu);
    if (woken(l))
        goto out;
    if (l->conn == NULL) {
        int perm = 0;
        if (tm_amqp_link_connect(l, &perm) != 0) {
            /* a new reason is worth a line; the same again is noise */
            tm_log_write(tm_log_repeat_level(&l->err_seen,
                                             perm ? TM_LOG_ERR
                                                  : TM_LOG_WARNING,
                                             l->errstr),
                         TM_AMQP_SRC, NULL, NULL, "%s; retrying",
                         l->errstr);
            n = -1;
            goto out;
        }
    }
    if (l->announce) {
        /* connected (here, or by connect()): the lane's tasks count as
         * subscribed now, not once this read ends, which may wait long
         * for a first delivery */
        l->announce = 0;
        goto out;
    }
    int64_t deadline = tm_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    /* with nothing read already, poll comes first: the socket is read
     * once it holds something (rather than a failed read, a poll in
     * rabbitmq-c, then this poll); every wake-up of poll reads */
    int served = 0, skip = !any_ready(l, room) &&
                           tm_amqp_nothing_buffered(l->conn);
    for (;;) {
        int64_t now = tm_now_ms(), left = deadline - now;
        int64_t wait = left <= 0 ? 0 : left < INT_MAX ? left : INT_MAX;
        if (l->conn == NULL || prepare(l, room, now, &wait) != 0) {
            n = -1; /* lost meanwhile */
            goto out;
        }
        if (!skip) {
            if (tm_amqp_serve(l, "consume") != 0) {
                n = -1;
                goto out;
            }
            served = 1;
            /* nothing read: the stream has stopped (or thinned out), and
             * the next delivery is read as it comes */
            if (l->fresh == 0)
                tm_amqp_lowat_off(l);
        }
        skip = 0;
        if (any_ready(l, room))
            break;
        /* room was made for a task given none: the caller reads again
         * with the room it has now */
        if (woken(l) || atomic_exchange(&l->poked, 0))
            goto out;
        if (left <= 0 && served)
            goto out;
        /* acks held back go out when due, even while nothing arrives */
        if (flush_acks(l, now, &wait) != 0) {
            n = -1;
            goto out;
        }
        /* with a low-water mark, what is under it is read after a while */
        if (l->lowat && wait > TM_AMQP_LOWAT_WAIT_MS)
            wait = TM_AMQP_LOWAT_WAIT_MS;
        struct pollfd p[2] = {
            {.fd = sym_amqp_get_sockfd(l->conn), .events = POLLIN},
            {.fd = l->efd, .events = POLLIN},
        };
        l->polling = 1;
        pthread_mutex_unlock(&l->io_mu);
        if (poll(p, 2, (int)wait) > 0 && (p[1].revents & POLLIN)) {
            uint64_t cnt;
            if (read(l->efd, &cnt, sizeof cnt) < 0) {
                /* EAGAIN: taken already */
            }
        }
        pthread_mutex_lock(&l->io_mu);
        l->polling = 0;
    }
    n = take(l, room, out, nout);
out:
    pthread_mutex_unlock(&l->io_mu);
    return n;
}
