/* amqp/settle.c - RabbitMQ settlement: acks, retries, dead letters. */
#include "amqp.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/log.h"
#include "util/util.h"

/* TASK_CFG is the configuration of the task a record settles. */
#define TASK_CFG(pc, r) ((pc)->ab->tasks[(r)->task].cfg)

/* tm_amqp_rec_clear frees what r owns and zeroes it. */
void tm_amqp_rec_clear(struct tm_amqp_rec *r)
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
        tm_amqp_rec_clear(&rv->v[i]);
    rv->n = 0;
}

static unsigned rec_attempts(const struct tm_amqp_rec *r)
{
    return r->outcome == TM_OUT_INVALID ? 0u : r->attempt;
}

/* tm_amqp_publish_dead sends the dead-letter copy on the publishing
 * connection: the original body and properties, a new message id, and
 * the failure headers. Returns its confirm sequence, 0 when the
 * connection failed (pc->errstr). */
uint64_t tm_amqp_publish_dead(struct tm_amqp_publisher *pc,
                              struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    tm_amqp_base_props(&p, d);
    tm_uuid4(r->copy_id, sizeof r->copy_id);
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    p.message_id = sym_amqp_cstring_bytes(r->copy_id);
    p.timestamp = (uint64_t)(r->failed_at / 1000);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_user(&h, &d->headers);
    tm_amqp_hdr_str(&h, "x-task", TASK_CFG(pc, r)->name, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_str(&h, "x-error", r->error != NULL ? r->error
                                            : tm_outcome_label(r->outcome),
            TM_AMQP_ERROR_HEADER_MAX);
    tm_amqp_hdr_i64(&h, "x-attempts", rec_attempts(r));
    tm_amqp_hdr_i64(&h, "x-failed-at", r->failed_at);
    tm_amqp_hdr_str(&h, "x-origin-id", d->id, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    p.headers = tm_amqp_hdr_table(&h);
    r->rk = TASK_CFG(pc, r)->dead_letter;
    uint64_t seq =
        tm_amqp_pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
                         /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* tm_amqp_publish_retry sends the retry copy to the retry queue r->rk,
 * expiring after the delay, with the count of runs so far. Returns its
 * confirm sequence, 0 when the connection failed. */
uint64_t tm_amqp_publish_retry(struct tm_amqp_publisher *pc,
                               struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    tm_amqp_base_props(&p, d);
    char exp[32];
    tm_snprintf(exp, sizeof exp, "%lld",
                (long long)(r->delay_ms > 0 ? r->delay_ms : 0));
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_EXPIRATION_FLAG;
    p.message_id = tm_amqp_bytes_of(d->id);
    p.expiration = sym_amqp_cstring_bytes(exp);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_user(&h, &d->headers);
    tm_amqp_hdr_i64(&h, "x-attempts", r->attempt);
    if (r->error != NULL)
        tm_amqp_hdr_str(&h, "x-last-error", r->error,
                        TM_AMQP_ERROR_HEADER_MAX);
    p.headers = tm_amqp_hdr_table(&h);
    uint64_t seq =
        tm_amqp_pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
                         /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* reply_body returns the answer for a request: the task's result (or
 * null) on success, else an error object. Free with cJSON_free when
 * *owned. */
static char *reply_body(const struct tm_amqp_publisher *pc,
                        const struct tm_amqp_rec *r, size_t *len, int *owned)
{
    *owned = 0;
    if (r->outcome == TM_OUT_SUCCESS) {
        if (r->result != NULL) {
            *len = r->result_len > 0 ? r->result_len : strlen(r->result);
            return r->result;
        }
        *len = 4;
        return (char *)(uintptr_t)"null";
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error",
                            r->error != NULL ? r->error
                                             : tm_outcome_label(r->outcome));
    cJSON_AddStringToObject(o, "outcome", tm_outcome_label(r->outcome));
    cJSON_AddNumberToObject(o, "attempts", rec_attempts(r));
    cJSON_AddStringToObject(o, "task", TASK_CFG(pc, r)->name);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s == NULL) {
        *len = 4;
        return (char *)(uintptr_t)"null";
    }
    *owned = 1;
    *len = strlen(s);
    return s;
}

/* tm_amqp_publish_reply answers a request on the reply channel (not
 * mandatory: a requester that went away just misses its answer). Returns
 * its confirm sequence, 0 when the connection failed. */
uint64_t tm_amqp_publish_reply(struct tm_amqp_publisher *pc,
                              const struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_HEADERS_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG;
    p.content_type = sym_amqp_cstring_bytes("application/json");
    p.delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    p.correlation_id = tm_amqp_bytes_of(d->correlation_id);
    p.message_id = tm_amqp_bytes_of(d->id);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    tm_amqp_hdr_str(&h, "x-task", TASK_CFG(pc, r)->name, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_i64(&h, "x-attempts", rec_attempts(r));
    p.headers = tm_amqp_hdr_table(&h);
    size_t len;
    int owned;
    char *body = reply_body(pc, r, &len, &owned);
    uint64_t seq =
        tm_amqp_pub_send(pc, &pc->replies, d->reply_to, &p, body, len,
                         /* mandatory = */ 0);
    if (owned)
        cJSON_free(body);
    tm_free(h.e);
    return seq;
}

/* tm_amqp_needs_reply says whether r answers a request: a success or a
 * final failure of a message with reply_to and correlation_id. */
int tm_amqp_needs_reply(const struct tm_amqp_rec *r)
{
    return r->d != NULL && r->d->reply_to != NULL &&
           r->d->correlation_id != NULL &&
           (r->settle == TM_SETTLE_ACK || r->settle == TM_SETTLE_DEAD);
}


/* rec_task_cmp orders records by task, then by delivery tag. */
static int rec_task_cmp(const void *a, const void *b)
{
    const struct tm_amqp_rec *x = a, *y = b;
    if (x->task != y->task)
        return x->task < y->task ? -1 : 1;
    return x->tag < y->tag ? -1 : x->tag > y->tag;
}

/*
 * tm_amqp_settle_originals acknowledges, on each task's consume channel,
 * the originals of the records in done (plain acks, and records whose
 * copies are confirmed), then empties done. A record from a
 * consuming connection since lost is dropped: RabbitMQ delivers that
 * message again. Settle thread only.
 */
void tm_amqp_settle_originals(struct tm_amqp_broker *ab,
                              struct tm_amqp_recvec *done)
{
    if (done->n == 0)
        return; /* done->v may be NULL: qsort wants an array */
    /* one run of records per task */
    qsort(done->v, done->n, sizeof *done->v, rec_task_cmp);
    for (size_t lo = 0, hi; lo < done->n; lo = hi) {
        size_t ti = done->v[lo].task;
        hi = lo + 1;
        while (hi < done->n && done->v[hi].task == ti)
            hi++;
        assert(ti < ab->ntasks);
        struct tm_amqp_task *at = &ab->tasks[ti];
        size_t na = 0, stale = 0, mine = hi - lo;
        int copies = 0;
        pthread_mutex_lock(at->io_mu);
        if (mine > at->tagcap) {
            at->tagcap = mine * 2;
            at->tags = tm_realloc(at->tags, at->tagcap * sizeof *at->tags);
        }
        for (size_t i = lo; i < hi; i++) {
            const struct tm_amqp_rec *r = &done->v[i];
            if (at->conn == NULL || r->gen != at->gen)
                stale++;
            else {
                at->tags[na++] = r->tag;
                copies |= r->d != NULL; /* its copy is confirmed */
            }
        }
        int err = 0;
        tm_amqp_settle_tags(at, at->tags, na, NULL, 0, copies, &err);
        if (err)
            tm_amqp_conn_lost(at, "settle");
        int ready = at->nready > 0;
        pthread_mutex_unlock(at->io_mu);
        if (ready)
            tm_amqp_signal_intake(at->link);
        if (stale > 0)
            tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, at->cfg->name, NULL,
                         "%zu settlement(s) dropped: their connection was "
                         "lost and RabbitMQ delivers those messages again",
                         stale);
    }
    tm_amqp_recvec_clear(done);
}

/*
 * tm_amqp_settle turns each message's settlement into a record: a plain
 * ack needs only the delivery tag and is done at once; dead letters,
 * retries and replies take the delivery, error and result from the
 * message and go to the publishing connection, whose confirmed copies
 * release their originals' acks (a copy is always confirmed before its
 * original is acknowledged). It always returns 0: a settlement that
 * cannot be done because its connection was lost is moot, as RabbitMQ
 * redelivers every message that was not acknowledged on it.
 */
size_t tm_amqp_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    int64_t now = tm_wall_ms();
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        struct tm_amqp_delivery *d = m->bctx;
        if (m->settle == TM_SETTLE_NONE || d == NULL ||
            m->task_index >= ab->ntasks)
            continue;
        struct tm_amqp_rec r;
        memset(&r, 0, sizeof r);
        r.settle = m->settle;
        r.outcome = m->outcome;
        r.task = m->task_index;
        r.tag = d->tag;
        r.gen = d->gen;
        r.attempt = m->attempt;
        r.delay_ms = m->retry_delay_ms;
        r.failed_at = now;
        if (m->settle == TM_SETTLE_ACK &&
            (d->reply_to == NULL || d->correlation_id == NULL)) {
            tm_amqp_recvec_push(&ab->done, &r);
            continue;
        }
        r.d = d;
        if (m->held)
            /* the run's code still reads the delivery (its id and body):
             * the batch keeps it too, until that code returned (the
             * batch's release frees bctx), and the last owner frees it.
             * Settled once: this settlement never fails (see above). */
            atomic_fetch_add_explicit(&d->extra_owners, 1,
                                      memory_order_relaxed);
        else
            m->bctx = NULL;
        r.error = m->error;
        m->error = NULL;
        r.result = m->result;
        r.result_len = m->result_len;
        m->result = NULL;
        tm_amqp_recvec_push(&ab->pub.out, &r);
    }
    tm_amqp_park_take(ab);
    /* the publishing connection only when copies wait on it: with none,
     * reading it would cost a failed read and a poll per call, and its
     * notifications and heartbeats are the tick's (tm_amqp_tick) */
    if (ab->pub.out.n > 0)
        tm_amqp_publisher_run(&ab->pub, /* wait = */ 1, &ab->done);
    tm_amqp_settle_originals(ab, &ab->done);
    return 0;
}

/* tm_amqp_tick does the periodic upkeep from the settle thread (intake
 * does not read while the pool is full): the publishing connection's
 * confirms and notifications (copies held while the broker blocked
 * publishing go out once it stops), then every consuming connection's
 * frames, which sends a heartbeat when one is due and notices a silent
 * broker; and it reads the tasks' pause state. */
void tm_amqp_tick(struct tm_broker *b)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    tm_amqp_park_take(ab);
    tm_amqp_publisher_run(&ab->pub, /* wait = */ 1, &ab->done);
    tm_amqp_settle_originals(ab, &ab->done);
    int64_t now = tm_now_ms();
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        int ready = 0;
        pthread_mutex_lock(&l->io_mu);
        /* held acks due while neither settle() nor intake came by */
        for (size_t k = 0; k < l->ntasks && l->conn != NULL; k++) {
            struct tm_amqp_task *at = l->tasks[k];
            if (at->acks.nheld > 0 &&
                tm_amqp_acks_flush(at, /* force = */ 0, now) != 0)
                tm_amqp_conn_lost(at, "ack");
        }
        tm_amqp_serve(l, "upkeep");
        for (size_t k = 0; k < l->ntasks && !ready; k++)
            ready = l->tasks[k]->nready > 0;
        pthread_mutex_unlock(&l->io_mu);
        if (ready)
            tm_amqp_signal_intake(l);
    }
    tm_amqp_pause_poll(ab);
}
