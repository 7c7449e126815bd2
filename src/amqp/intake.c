/* amqp/intake.c - RabbitMQ intake: the consumer of each task's channel,
 * the ack floor of that channel (acks held back and sent together), and
 * the lanes (one per consuming connection, link.c) that hand the
 * deliveries assembled from its frames (delivery.c) to the pool. */
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

/* tm_amqp_start_consumer sets the prefetch and starts the task's consumer
 * (manual acks) on its channel of c; its consumer tag is written to ctag
 * (TM_AMQP_SHORTSTR_MAX + 1 bytes). */
int tm_amqp_start_consumer(const struct tm_amqp_task *at,
                          amqp_connection_state_t c, char *ctag, char *buf,
                          size_t size)
{
    const struct tm_cfg_task *t = at->cfg;
    char eb[256], tag[TM_AMQP_SHORTSTR_MAX + 1];
    sym_amqp_basic_qos(c, at->ch, /* prefetch_size = */ 0,
                       (uint16_t)t->prefetch, /* global = */ 0);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.qos: %s",
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(tag, sizeof tag, "taskmill.%s.%s.%llu",
                at->ab->base.cfg->instance ? at->ab->base.cfg->instance : "",
                t->name, (unsigned long long)tm_rand64() % 1000000);
    amqp_basic_consume_ok_t *ok = sym_amqp_basic_consume(
        c, at->ch, sym_amqp_cstring_bytes(t->queue),
        sym_amqp_cstring_bytes(tag), /* no_local = */ 0, /* no_ack = */ 0,
        /* exclusive = */ 0, TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.consume '%s': %s", t->queue,
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(ctag, TM_AMQP_SHORTSTR_MAX + 1, "%.*s",
                (int)ok->consumer_tag.len,
                (const char *)ok->consumer_tag.bytes);
    return 0;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* tm_amqp_floor_add records n delivery tags as settled, raising the floor over
 * every run of settled tags right above it. */
void tm_amqp_floor_add(struct tm_amqp_acks *k, const uint64_t *tags,
                       size_t n)
{
    if (n == 0)
        return;
    if (k->n + n > k->cap) {
        k->cap = (k->n + n) * 2;
        k->above = tm_realloc(k->above, k->cap * sizeof *k->above);
    }
    memcpy(k->above + k->n, tags, n * sizeof *tags);
    k->n += n;
    qsort(k->above, k->n, sizeof *k->above, u64_cmp);
    size_t drop = 0;
    while (drop < k->n && k->above[drop] <= k->floor + 1) {
        if (k->above[drop] == k->floor + 1)
            k->floor++;
        drop++;
    }
    memmove(k->above, k->above + drop, (k->n - drop) * sizeof *k->above);
    k->n -= drop;
    /* invariant: every tag left above the floor is beyond floor + 1 */
    assert(k->n == 0 || k->above[0] > k->floor + 1);
}

/* ack_quarter is a quarter of the task's prefetch window, at least one. */
static size_t ack_quarter(const struct tm_amqp_task *at)
{
    return at->cfg->prefetch / 4 > 0 ? at->cfg->prefetch / 4 : 1;
}

/* ack_due says whether the acks held back go out now: forced, held for
 * TM_AMQP_ACK_HOLD_MS, a quarter of the prefetch window (at least one: a
 * window under 8 holds nothing back) waiting on them, or fewer than a
 * quarter of the window's deliveries still unsettled. Holding pays only
 * while the stream is busy, with more settlements about to come that go
 * out with the held ones: under a light load (a message now and then, or
 * the end of a burst) an ack goes out as it is decided. */
static int ack_due(const struct tm_amqp_task *at, int force, int64_t now)
{
    const struct tm_amqp_acks *k = &at->acks;
    size_t quarter = ack_quarter(at);
    /* every tag up to dlv_tag was delivered; floor + n of them settled */
    assert(k->floor + k->n <= at->dlv_tag);
    uint64_t unsettled = at->dlv_tag - k->floor - k->n;
    return k->nheld > 0 &&
           (force || k->nheld >= quarter || unsettled < quarter ||
            now - k->held_since >= TM_AMQP_ACK_HOLD_MS);
}

/*
 * tm_amqp_acks_flush sends the acks held back when they are due (or
 * force): the largest held tag under the floor with multiple=1, which
 * acknowledges every tag up to it still unacknowledged (all of them are
 * settled: nacks and rejects went out as they were decided), then each
 * held tag above the floor on its own. Returns -1 when the connection
 * failed (at->errstr). io_mu held.
 */
int tm_amqp_acks_flush(struct tm_amqp_task *at, int force, int64_t now)
{
    struct tm_amqp_acks *k = &at->acks;
    amqp_connection_state_t c = at->conn;
    if (c == NULL || !ack_due(at, force, now))
        return 0;
    uint64_t multi = 0;
    size_t nabove = 0;
    for (size_t i = 0; i < k->nheld; i++) {
        if (k->held[i] > k->floor)
            nabove++;
        else if (k->held[i] > multi)
            multi = k->held[i];
    }
    /* A tag above the floor (settled out of turn: a delivery before it is
     * still unsettled) would go on its own, a write each. Unless forced,
     * it waits on while its hold lasts (TM_AMQP_ACK_HOLD_MS since
     * held_since) and fewer than a quarter of the window wait so: the
     * floor most often rises past it meanwhile, and a later multiple=1
     * covers it. A tag that the floor passed is never acked twice: it is
     * under the next multi (the largest held tag under the floor). */
    int keep = !force && now - k->held_since < TM_AMQP_ACK_HOLD_MS &&
               nabove < ack_quarter(at);
    int rc = AMQP_STATUS_OK;
    if (multi > 0)
        rc = sym_amqp_basic_ack(c, at->ch, multi,
                                /* multiple = */ 1);
    size_t kept = 0;
    for (size_t i = 0; i < k->nheld && rc == AMQP_STATUS_OK; i++) {
        if (k->held[i] <= k->floor)
            continue;
        if (keep)
            k->held[kept++] = k->held[i];
        else
            rc = sym_amqp_basic_ack(c, at->ch, k->held[i], 0);
    }
    k->nheld = rc == AMQP_STATUS_OK ? kept : 0;
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.ack: %s",
                    sym_amqp_error_string2(rc));
        return -1;
    }
    return 0;
}

/* tm_amqp_acks_wait_ms is how long the acks held back may still wait
 * (-1: none held), for a thread that would block meanwhile. io_mu held. */
int64_t tm_amqp_acks_wait_ms(const struct tm_amqp_task *at, int64_t now)
{
    const struct tm_amqp_acks *k = &at->acks;
    if (at->conn == NULL || k->nheld == 0)
        return -1;
    int64_t left = k->held_since + TM_AMQP_ACK_HOLD_MS - now;
    return left > 0 ? left : 0;
}

/*
 * tm_amqp_settle_tags acknowledges acks and gives back nacks (requeue) on the
 * consume channel. Nacks go out at once, one by one; acks are held back
 * until they are due (tm_amqp_acks_flush), so that one basic.ack with
 * multiple=1 covers many, unless now_all: the acks of messages whose
 * copy (retry, dead letter, delay, reply) was confirmed go out at once
 * with every one held, so that the window in which a crash would leave
 * both the copy and the original stays as short as it can be. A hold
 * that starts while the intake thread waits in poll wakes it up, to
 * wait no longer than the hold. *err is set on a connection error.
 */
void tm_amqp_settle_tags(struct tm_amqp_task *at, const uint64_t *acks,
                        size_t na, const uint64_t *nacks, size_t nn,
                        int now_all, int *err)
{
    struct tm_amqp_acks *k = &at->acks;
    amqp_connection_state_t c = at->conn;
    if (c == NULL || na + nn == 0)
        return;
    for (size_t i = 0; i < nn; i++) {
        if (sym_amqp_basic_nack(c, at->ch, nacks[i],
                                /* multiple = */ 0,
                                /* requeue = */ 1) != AMQP_STATUS_OK) {
            tm_snprintf(at->errstr, sizeof at->errstr, "basic.nack failed");
            *err = 1;
            return;
        }
    }
    tm_amqp_floor_add(k, acks, na);
    tm_amqp_floor_add(k, nacks, nn);
    int64_t now = tm_now_ms();
    /* settlements further apart than a hold: nothing would go out with
     * these acks, so they go now (slow runs with a large prefetch keep
     * many deliveries unsettled, and would otherwise wait for the next
     * settlement or the upkeep tick) */
    int sparse = now - k->settled_ms >= TM_AMQP_ACK_HOLD_MS;
    int starts = 0;
    k->settled_ms = now;
    if (na > 0) {
        if (k->nheld + na > k->capheld) {
            k->capheld = (k->nheld + na) * 2;
            k->held = tm_realloc(k->held, k->capheld * sizeof *k->held);
        }
        starts = k->nheld == 0;
        if (starts)
            k->held_since = now;
        memcpy(k->held + k->nheld, acks, na * sizeof *acks);
        k->nheld += na;
    }
    if (tm_amqp_acks_flush(at, now_all || sparse, now) != 0)
        *err = 1;
    /* only a hold that outlives this call needs the intake thread's
     * shorter poll: acks that went out at once (the common case while
     * the daemon keeps up, with few deliveries unsettled) wake nobody */
    if (starts && k->nheld > 0 && at->link->polling)
        tm_amqp_signal_intake(at->link);
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
            uint64_t h = tm_amqp_fnv64(l->errstr, strlen(l->errstr),
                                       TM_AMQP_FNV64_INIT);
            tm_log_write(h != l->err_hash ? (perm ? TM_LOG_ERR
                                                  : TM_LOG_WARNING)
                                          : TM_LOG_DEBUG,
                         TM_AMQP_SRC, NULL, NULL, "%s; retrying",
                         l->errstr);
            l->err_hash = h;
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
