/* amqp/publish.c - RabbitMQ publishing connection: the settlements
 * waiting for their copies (copies.c) to be confirmed, each handed to
 * the publisher's owner (settle.c) through the callback it was given
 * once they are. */
#include "amqp.h"

#include <assert.h>
#include <limits.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* Reconnect backoff of the publishing connection: first and largest
 * wait, in ms (it is only tried while copies wait for it). */
#define PUB_BACKOFF_MIN_MS 500
#define PUB_BACKOFF_MAX_MS 8000

/* tm_amqp_publisher_init prepares the publishing connection; it is
 * opened on first use, to the broker's current node. */
void tm_amqp_publisher_init(struct tm_amqp_publisher *pc,
                            struct tm_amqp_broker *ab,
                            void (*cb_copied)(void *arg,
                                              struct tm_amqp_rec *r),
                            void *arg)
{
    memset(pc, 0, sizeof *pc);
    pc->ab = ab;
    pc->cb_copied = cb_copied;
    pc->cb_arg = arg;
    pc->copies.ch = TM_AMQP_PCH_COPY;
    pc->replies.ch = TM_AMQP_PCH_REPLY;
    pc->backoff_ms = PUB_BACKOFF_MIN_MS;
}

/* rec_clear frees what r owns and zeroes it. */
static void rec_clear(struct tm_amqp_rec *r)
{
    tm_free(r->error);
    tm_free(r->result);
    tm_amqp_delivery_free(r->d);
    memset(r, 0, sizeof *r);
}

/* tm_amqp_recvec_push appends a copy of r (which rv then owns). */
void tm_amqp_recvec_push(struct tm_amqp_recvec *rv,
                         const struct tm_amqp_rec *r)
{
    if (rv->n == rv->cap) {
        rv->cap = rv->cap ? rv->cap * 2 : 64;
        rv->v = tm_realloc(rv->v, rv->cap * sizeof *rv->v);
    }
    rv->v[rv->n++] = *r;
}

/* tm_amqp_recvec_clear frees every record of rv and empties it. */
void tm_amqp_recvec_clear(struct tm_amqp_recvec *rv)
{
    for (size_t i = 0; i < rv->n; i++)
        rec_clear(&rv->v[i]);
    rv->n = 0;
}

/* needs_reply says whether r answers a request: a success or a
 * final failure of a message with reply_to and correlation_id. */
static int needs_reply(const struct tm_amqp_rec *r)
{
    return r->d != NULL && r->d->reply_to != NULL &&
           r->d->correlation_id != NULL &&
           (r->settle == TM_SETTLE_ACK || r->settle == TM_SETTLE_DEAD);
}


/* copy_needed says whether the record publishes a dead-letter or retry
 * copy. */
static int copy_needed(const struct tm_amqp_rec *r)
{
    return r->settle == TM_SETTLE_DEAD || r->settle == TM_SETTLE_RETRY;
}

/* rec_final says whether every copy of r has its answer from the broker
 * (confirmed, refused, returned, or lost with the reply channel). */
static int rec_final(const struct tm_amqp_rec *r)
{
    if (copy_needed(r) && !r->returned &&
        (r->seq == 0 || r->cst == TM_AMQP_WAITING))
        return 0;
    if (needs_reply(r) && r->rst == TM_AMQP_WAITING)
        return 0;
    return 1;
}

/* forget_connection resets what belongs to the lost connection: copies
 * not confirmed are sent again on the next one (their originals are
 * still unacknowledged, so at worst a copy goes out twice). */
static void forget_connection(struct tm_amqp_publisher *pc)
{
    for (size_t i = 0; i < pc->out.n; i++) {
        struct tm_amqp_rec *r = &pc->out.v[i];
        if (r->cst == TM_AMQP_WAITING)
            r->seq = 0;
        if (r->rst == TM_AMQP_WAITING)
            r->rseq = 0;
    }
    for (size_t i = 0; i < pc->nlevels; i++)
        tm_free(pc->levels[i].name);
    pc->nlevels = 0;
    pc->copies.open = 0;
    pc->replies.open = 0;
    pc->ret_state = 0;
    pc->blocked = 0;
}

/* publisher_lost drops the connection after an error in pc->errstr. */
static void publisher_lost(struct tm_amqp_publisher *pc)
{
    if (pc->was_up)
        tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, NULL,
                     "publishing connection: %s; reconnecting (copies not "
                     "confirmed are sent again)", pc->errstr);
    pc->was_up = 0;
    tm_amqp_drop(pc->conn);
    pc->conn = NULL;
    forget_connection(pc);
}

/*
 * tm_amqp_publisher_connect opens the publishing connection unless it is
 * open: the copy channel in confirm mode and the declaration channel (the
 * reply channel is opened on first use). Returns 0, or -1 with the reason
 * in pc->errstr (logged once per new reason), after which no attempt is
 * made before the backoff has passed.
 */
int tm_amqp_publisher_connect(struct tm_amqp_publisher *pc)
{
    char eb[512];
    if (pc->conn != NULL)
        return 0;
    if (tm_now_ms() < pc->retry_at)
        return -1;
    const struct tm_url *node = NULL;
    amqp_connection_state_t c =
        tm_amqp_open(pc->ab, "publish", tm_amqp_heartbeat_s(pc->ab), &node,
                     eb, sizeof eb);
    if (c != NULL && (tm_amqp_channel(c, TM_AMQP_PCH_COPY, 1, eb,
                                      sizeof eb) != 0 ||
                      tm_amqp_channel(c, TM_AMQP_PCH_ADMIN, 0, eb,
                                      sizeof eb) != 0)) {
        tm_amqp_drop(c);
        c = NULL;
    }
    if (c == NULL) {
        tm_log_write(tm_log_repeat_level(&pc->err_seen, TM_LOG_WARNING, eb),
                     TM_AMQP_SRC, NULL, NULL,
                     "publishing connection: %s; retrying", eb);
        tm_snprintf(pc->errstr, sizeof pc->errstr, "%s", eb);
        pc->retry_at = tm_now_ms() + pc->backoff_ms;
        pc->backoff_ms = tm_backoff_next(pc->backoff_ms, PUB_BACKOFF_MIN_MS,
                                         PUB_BACKOFF_MAX_MS);
        return -1;
    }
    pc->conn = c;
    pc->node = node;
    pc->gen++;
    pc->was_up = 1;
    tm_log_repeat_reset(&pc->err_seen);
    pc->backoff_ms = PUB_BACKOFF_MIN_MS;
    forget_connection(pc);
    pc->copies.open = 1;
    pc->copies.next_seq = 1;
    return 0;
}

/* confirm applies a basic.ack or basic.nack of channel ch to the records
 * it covers. */
static void confirm(struct tm_amqp_publisher *pc, amqp_channel_t ch,
                    uint64_t tag, int multiple, unsigned char st)
{
    for (size_t i = 0; i < pc->out.n; i++) {
        struct tm_amqp_rec *r = &pc->out.v[i];
        uint64_t seq = ch == TM_AMQP_PCH_COPY ? r->seq : r->rseq;
        unsigned char *x = ch == TM_AMQP_PCH_COPY ? &r->cst : &r->rst;
        if (*x == TM_AMQP_WAITING &&
            tm_amqp_confirm_covers(seq, tag, multiple))
            *x = st;
    }
}

/* copy_kind names the copy r publishes, for the log. */
static const char *copy_kind(const struct tm_amqp_rec *r)
{
    return r->settle == TM_SETTLE_DEAD ? "dead-letter"
           : r->park                   ? "delay"
                                       : "retry";
}

/* refused_wait_ms is how long a copy refused now waits before it is
 * sent again: TM_AMQP_REFUSED_MIN_MS, doubled for each earlier refusal,
 * at most TM_AMQP_REFUSED_MAX_MS. */
static int64_t refused_wait_ms(const struct tm_amqp_rec *r)
{
    int64_t ms = TM_AMQP_REFUSED_MIN_MS;
    for (unsigned i = 0; i < r->refusals && ms < TM_AMQP_REFUSED_MAX_MS; i++)
        ms *= 2;
    return ms < TM_AMQP_REFUSED_MAX_MS ? ms : TM_AMQP_REFUSED_MAX_MS;
}

/* returned_done matches a message the broker could not route (mandatory
 * publish: the dead-letter or retry queue is gone) with its record. */
static void returned_done(struct tm_amqp_publisher *pc, const char *msgid)
{
    pc->ret_state = 0;
    for (size_t i = 0; i < pc->out.n; i++) {
        struct tm_amqp_rec *r = &pc->out.v[i];
        if (r->returned || r->seq == 0 || r->rk == NULL ||
            strcmp(r->rk, pc->ret_rk) != 0 ||
            (msgid != NULL &&
             strcmp(r->settle == TM_SETTLE_DEAD ? r->copy_id : r->d->id,
                    msgid) != 0))
            continue;
        r->returned = 1;
        tm_log_write(r->refusals == 0 ? TM_LOG_ERR : TM_LOG_DEBUG,
                     TM_AMQP_SRC, pc->ab->tasks[r->task].cfg->name, r->d->id,
                     "RabbitMQ could not route the %s copy to '%s' (%s); "
                     "the message stays unacknowledged and its copy is "
                     "sent again in %lld ms",
                     copy_kind(r), pc->ret_rk, pc->ret_text,
                     (long long)refused_wait_ms(r));
        return;
    }
    tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, msgid,
                 "RabbitMQ returned a message sent to '%s' (%s)", pc->ret_rk,
                 pc->ret_text);
}

/* on_method handles one method frame of the publishing connection.
 * Returns -1 when the connection is unusable (pc->errstr). */
static int on_method(struct tm_amqp_publisher *pc, amqp_channel_t ch,
                     const amqp_method_t *m)
{
    switch (m->id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *x = m->decoded;
        tm_snprintf(pc->errstr, sizeof pc->errstr,
                    "connection closed by the broker: %u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        amqp_connection_close_ok_t ok;
        memset(&ok, 0, sizeof ok);
        sym_amqp_send_method(pc->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return -1;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        const amqp_connection_blocked_t *x = m->decoded;
        if (!pc->blocked)
            tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, NULL,
                         "RabbitMQ blocks publishing (%.*s): dead letters, "
                         "retries and replies wait, and their messages stay "
                         "unacknowledged",
                         (int)x->reason.len, (const char *)x->reason.bytes);
        pc->blocked = 1;
        return 0;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        if (pc->blocked)
            tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, NULL, NULL,
                         "RabbitMQ accepts publishing again");
        pc->blocked = 0;
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *x = m->decoded;
        if (ch == TM_AMQP_PCH_REPLY) {
            /* a reply the broker refused (e.g. the direct reply-to
             * consumer is gone): the requester gets nothing, the rest
             * goes on; the channel is opened again when needed */
            tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, NULL,
                         "reply not delivered: %u %.*s", x->reply_code,
                         (int)x->reply_text.len,
                         (const char *)x->reply_text.bytes);
            tm_amqp_channel_closed_ok(pc->conn, ch);
            for (size_t i = 0; i < pc->out.n; i++)
                if (pc->out.v[i].rseq != 0 &&
                    pc->out.v[i].rst == TM_AMQP_WAITING)
                    pc->out.v[i].rst = TM_AMQP_LOST;
            pc->replies.open = 0;
            if (pc->ret_state != 0 && pc->ret_ch == ch)
                pc->ret_state = 0;
            return 0;
        }
        tm_snprintf(pc->errstr, sizeof pc->errstr,
                    "channel %u closed by the broker: %u %.*s", ch,
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return -1;
    }
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *x = m->decoded;
        confirm(pc, ch, x->delivery_tag, x->multiple, TM_AMQP_ACKED);
        return 0;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *x = m->decoded;
        confirm(pc, ch, x->delivery_tag, x->multiple, TM_AMQP_NACKED);
        return 0;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        const amqp_basic_return_t *x = m->decoded;
        pc->ret_state = 1;
        pc->ret_ch = ch;
        tm_snprintf(pc->ret_rk, sizeof pc->ret_rk, "%.*s",
                    (int)x->routing_key.len,
                    (const char *)x->routing_key.bytes);
        tm_snprintf(pc->ret_text, sizeof pc->ret_text, "%u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return 0;
    }
    default:
        return 0;
    }
}

static int on_frame(struct tm_amqp_publisher *pc, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_METHOD)
        return on_method(pc, f->channel, &f->payload.method);
    if (f->frame_type == AMQP_FRAME_HEADER && pc->ret_state == 1 &&
        f->channel == pc->ret_ch) {
        const amqp_basic_properties_t *p = f->payload.properties.decoded;
        char *mid = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                        ? tm_amqp_bytes_dup(p->message_id)
                        : NULL;
        returned_done(pc, mid);
        tm_free(mid);
        /* skip its body frames */
        pc->ret_left = f->payload.properties.body_size;
        pc->ret_state = pc->ret_left > 0 ? 2 : 0;
    } else if (f->frame_type == AMQP_FRAME_BODY && pc->ret_state == 2 &&
               f->channel == pc->ret_ch) {
        size_t n = f->payload.body_fragment.len;
        pc->ret_left = n >= pc->ret_left ? 0 : pc->ret_left - n;
        if (pc->ret_left == 0)
            pc->ret_state = 0;
    }
    return 0;
}

/* task_gen returns the generation of task i's consuming connection, 0
 * while it is down. */
static uint64_t task_gen(struct tm_amqp_broker *ab, size_t i)
{
    struct tm_amqp_task *at = &ab->tasks[i];
    pthread_mutex_lock(at->io_mu);
    uint64_t gen = at->conn != NULL ? at->gen : 0;
    pthread_mutex_unlock(at->io_mu);
    return gen;
}

/* drop_stale drops the records whose consuming connection is gone: their
 * originals can no longer be acknowledged, and RabbitMQ delivers those
 * messages again (a copy already sent then arrives a second time). */
static void drop_stale(struct tm_amqp_publisher *pc)
{
    struct tm_amqp_recvec *out = &pc->out;
    size_t k = 0, stale = 0;
    for (size_t i = 0; i < out->n; i++) {
        struct tm_amqp_rec *r = &out->v[i];
        if (task_gen(pc->ab, r->task) != r->gen) {
            rec_clear(r);
            stale++;
            continue;
        }
        out->v[k++] = *r;
    }
    out->n = k;
    if (stale > 0)
        tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, NULL, NULL,
                     "%zu settlement(s) dropped: their connection was lost "
                     "and RabbitMQ delivers those messages again", stale);
}

/* dead_letter_declare declares again the topology of r's task (its
 * dead-letter queue was found gone) on the admin channel, for the copy
 * sent next; the other records of the task waiting for that are spared
 * it. A refusal is logged and leaves the copy to be returned and held
 * again. Returns -1 when the connection failed (pc->errstr). */
static int dead_letter_declare(struct tm_amqp_publisher *pc,
                               struct tm_amqp_rec *r)
{
    const struct tm_cfg_task *t = pc->ab->tasks[r->task].cfg;
    char why[512], eb[256];
    int perm = 0;
    for (size_t i = 0; i < pc->out.n; i++)
        if (pc->out.v[i].task == r->task)
            pc->out.v[i].redeclare = 0;
    if (tm_amqp_declare(pc->conn, TM_AMQP_PCH_ADMIN, pc->ab, t, why,
                        sizeof why, &perm) == 0) {
        tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, t->name, NULL,
                     "dead-letter queue '%s' was gone: declared again",
                     t->dead_letter);
        return 0;
    }
    tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, t->name, NULL,
                 "%s; dead letters wait", why);
    /* the broker closed the channel on the refusal: opened again */
    if (tm_amqp_channel_closed_ok(pc->conn, TM_AMQP_PCH_ADMIN) !=
            AMQP_STATUS_OK ||
        tm_amqp_channel(pc->conn, TM_AMQP_PCH_ADMIN, 0, eb, sizeof eb) != 0) {
        tm_snprintf(pc->errstr, sizeof pc->errstr, "%s", why);
        return -1;
    }
    return 0;
}

/* send_pending publishes every copy not sent on this connection yet.
 * Returns -1 when the connection failed (pc->errstr). */
static int send_pending(struct tm_amqp_publisher *pc)
{
    struct tm_amqp_recvec *out = &pc->out;
    int64_t now = 0;
    for (size_t i = 0; i < out->n; i++) {
        struct tm_amqp_rec *r = &out->v[i];
        if (r->hold_until != 0) {
            /* a refused copy: sent again once its wait is over */
            if (now == 0)
                now = tm_now_ms();
            if (now < r->hold_until)
                continue;
            r->hold_until = 0;
        }
        /* first: a retry impossible becomes a dead letter, which
         * answers a request */
        if (r->settle == TM_SETTLE_RETRY && r->seq == 0 &&
            tm_amqp_copy_prepare(pc, r) != 0)
            return -1;
        if (needs_reply(r) && r->rseq == 0 &&
            r->rst == TM_AMQP_WAITING) {
            if (!pc->replies.open) {
                if (tm_amqp_channel(pc->conn, TM_AMQP_PCH_REPLY, 1,
                                    pc->errstr, sizeof pc->errstr) != 0)
                    return -1;
                pc->replies.open = 1;
                pc->replies.next_seq = 1;
            }
            r->rseq = tm_amqp_publish_reply(pc, r);
            if (r->rseq == 0)
                return -1;
        }
        if (copy_needed(r) && !r->returned && r->seq == 0) {
            if (r->redeclare && r->settle == TM_SETTLE_DEAD &&
                dead_letter_declare(pc, r) != 0)
                return -1;
            r->cst = TM_AMQP_WAITING;
            r->seq = tm_amqp_copy_send(pc, r);
            if (r->seq == 0)
                return -1;
        }
    }
    return 0;
}

/* hold_refused keeps r, whose copy the broker refused (basic.nack) or
 * could not route (basic.return), for its copy to be sent again after
 * refused_wait_ms: its original stays unacknowledged meanwhile (never
 * acknowledged without a confirmed copy, never given back to run again
 * at once), and RabbitMQ delivers it again if the daemon stops first. A
 * retry or delay queue, or a dead-letter queue, that was not there is
 * declared again before the copy goes out. */
static void hold_refused(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r,
                         int64_t now)
{
    if (r->returned && r->settle == TM_SETTLE_RETRY && r->rk != NULL)
        for (size_t i = 0; i < pc->nlevels; i++)
            if (strcmp(pc->levels[i].name, r->rk) == 0)
                pc->levels[i].declared_at = TM_AMQP_LEVEL_STALE;
    if (r->returned && r->settle == TM_SETTLE_DEAD)
        r->redeclare = 1;
    if (!r->returned)
        tm_log_write(r->refusals == 0 ? TM_LOG_ERR : TM_LOG_DEBUG,
                     TM_AMQP_SRC, pc->ab->tasks[r->task].cfg->name, r->d->id,
                     "RabbitMQ refused the %s copy for '%s'; the message "
                     "stays unacknowledged and its copy is sent again in "
                     "%lld ms",
                     copy_kind(r), r->rk, (long long)refused_wait_ms(r));
    r->hold_until = now + refused_wait_ms(r);
    if (r->refusals < UINT_MAX)
        r->refusals++;
    r->returned = 0;
    r->seq = 0;
    r->cst = TM_AMQP_WAITING;
}

/* take_final hands the records whose copies are all answered to the
 * publisher's owner (cb_copied), for their originals to be acknowledged:
 * only those whose copy is confirmed (or that publish none). A record
 * whose copy was refused or returned stays, held (hold_refused). */
static void take_final(struct tm_amqp_publisher *pc)
{
    struct tm_amqp_recvec *out = &pc->out;
    size_t k = 0;
    int64_t now = 0;
    for (size_t i = 0; i < out->n; i++) {
        struct tm_amqp_rec *r = &out->v[i];
        if (!rec_final(r)) {
            out->v[k++] = *r;
            continue;
        }
        const char *task = pc->ab->tasks[r->task].cfg->name;
        if (copy_needed(r) && (r->returned || r->cst != TM_AMQP_ACKED)) {
            if (now == 0)
                now = tm_now_ms();
            hold_refused(pc, r, now);
            out->v[k++] = *r;
            continue;
        }
        if (needs_reply(r) && r->rst != TM_AMQP_ACKED)
            tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, task, r->d->id,
                         "the reply to '%s' was not confirmed; the "
                         "requester gets no answer", r->d->reply_to);
        if (r->refusals > 0)
            tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, task, r->d->id,
                         "the %s copy for '%s' was confirmed after %u "
                         "refusal(s)", copy_kind(r), r->rk, r->refusals);
        pc->cb_copied(pc->cb_arg, r);
    }
    out->n = k;
}

/* outstanding says whether a copy was sent and awaits its confirm. */
static int outstanding(const struct tm_amqp_publisher *pc)
{
    for (size_t i = 0; i < pc->out.n; i++) {
        const struct tm_amqp_rec *r = &pc->out.v[i];
        if ((r->seq != 0 && r->cst == TM_AMQP_WAITING && !r->returned) ||
            (r->rseq != 0 && r->rst == TM_AMQP_WAITING))
            return 1;
    }
    return 0;
}

/* struct pub_run is a tm_amqp_publisher_run under way. */
struct pub_run {
    struct tm_amqp_publisher *pc;
    int wait;
};

static int cb_pub_frame(void *arg, const amqp_frame_t *f)
{
    return on_frame(((struct pub_run *)arg)->pc, f);
}

/* cb_pub_step publishes what is not sent yet and takes the records
 * answered: 1 when there is nothing (more) to wait for. */
static int cb_pub_step(void *arg)
{
    struct pub_run *pr = arg;
    struct tm_amqp_publisher *pc = pr->pc;
    if (!pc->blocked && send_pending(pc) != 0)
        return -1;
    take_final(pc);
    return !pr->wait || pc->blocked || !outstanding(pc);
}

/*
 * tm_amqp_publisher_run moves the records in pc->out forward: it
 * (re)connects when copies wait, reads confirms and notifications,
 * publishes what is not sent yet and, with wait, waits for the confirms
 * up to TM_AMQP_CONFIRM_TIMEOUT_MS. Records whose copies are all
 * confirmed go to the owner (cb_copied), for their originals to be
 * acknowledged; those with a copy refused or returned stay, held
 * (hold_refused).
 *
 * While the broker blocks the connection nothing is sent and nothing
 * times out: the records wait, and the call returns at once. A confirm
 * missing past the timeout on a connection that is not blocked means the
 * connection is broken: it is dropped, and its unconfirmed copies are
 * sent again on the next one.
 */
void tm_amqp_publisher_run(struct tm_amqp_publisher *pc, int wait)
{
    drop_stale(pc);
    if (pc->conn == NULL) {
        if (pc->out.n == 0 || tm_amqp_publisher_connect(pc) != 0)
            return;
    }
    struct pub_run pr = {.pc = pc, .wait = wait};
    int rc = tm_amqp_confirm_wait(pc->conn,
                                  tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS,
                                  cb_pub_frame, cb_pub_step, &pr, pc->errstr,
                                  sizeof pc->errstr);
    if (rc == 0)
        return;
    if (rc > 0)
        tm_snprintf(pc->errstr, sizeof pc->errstr,
                    "no publisher confirm from RabbitMQ within %d s",
                    TM_AMQP_CONFIRM_TIMEOUT_MS / 1000);
    assert(pc->conn != NULL);
    publisher_lost(pc);
}

/* tm_amqp_publisher_close closes the connection (after a last run by the
 * caller) and frees what it holds; records still waiting are dropped:
 * their originals were never acknowledged, so RabbitMQ delivers them
 * again. */
void tm_amqp_publisher_close(struct tm_amqp_publisher *pc)
{
    if (pc->out.n > 0)
        tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, NULL,
                     "%zu settlement(s) left unconfirmed%s; RabbitMQ "
                     "delivers those messages again",
                     pc->out.n, pc->blocked ? " (publishing blocked)" : "");
    tm_amqp_recvec_clear(&pc->out);
    tm_free(pc->out.v);
    pc->out.v = NULL;
    pc->out.cap = 0;
    if (pc->conn != NULL)
        tm_amqp_close(pc->conn);
    pc->conn = NULL;
    forget_connection(pc);
    tm_free(pc->levels);
    pc->levels = NULL;
    pc->caplevels = 0;
}
