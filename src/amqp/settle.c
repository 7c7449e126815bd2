/* amqp/settle.c - RabbitMQ settlement: acks, retries, dead letters. */
#include "amqp.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "core.h" /* tm_retry_delay_ms: the retry queue of a delay */
#include "log.h"
#include "util.h"

static void rec_clear(struct tm_amqp_rec *r)
{
    tm_free(r->error);
    tm_free(r->result);
    tm_amqp_delivery_free(r->d);
    memset(r, 0, sizeof *r);
}

static void recvec_push(struct tm_amqp_recvec *rv, const struct tm_amqp_rec *r)
{
    if (rv->n == rv->cap) {
        rv->cap = rv->cap ? rv->cap * 2 : 64;
        rv->v = tm_realloc(rv->v, rv->cap * sizeof *rv->v);
    }
    rv->v[rv->n++] = *r;
}

void tm_amqp_recvec_clear(struct tm_amqp_recvec *rv)
{
    for (size_t i = 0; i < rv->n; i++)
        rec_clear(&rv->v[i]);
    rv->n = 0;
}

static unsigned rec_attempts(const struct tm_amqp_rec *r)
{
    return r->outcome == TM_OUT_INVALID ? 0u : r->attempt;
}

/* publish_dead sends the dead-letter copy: the original body and
 * properties, a new message id, and the failure headers. */
static uint64_t publish_dead(struct tm_amqp_task *at, struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    tm_amqp_base_props(&p, d);
    tm_amqp_uuid(r->copy_id, sizeof r->copy_id);
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    p.message_id = amqp_cstring_bytes(r->copy_id);
    p.timestamp = (uint64_t)(r->failed_at / 1000);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_user(&h, &d->headers);
    tm_amqp_hdr_str(&h, "x-task", at->cfg->name, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_str(&h, "x-error", r->error != NULL ? r->error
                                            : tm_outcome_label(r->outcome),
            TM_AMQP_ERROR_HEADER_MAX);
    tm_amqp_hdr_i64(&h, "x-attempts", rec_attempts(r));
    tm_amqp_hdr_i64(&h, "x-failed-at", r->failed_at);
    tm_amqp_hdr_str(&h, "x-origin-id", d->id, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    p.headers = tm_amqp_hdr_table(&h);
    r->rk = at->cfg->dead_letter;
    uint64_t seq =
        tm_amqp_pub_send(at, &at->pub, r->rk, &p, d->body, d->body_len,
                         /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* publish_retry sends the retry copy to the retry queue rk, expiring
 * after the delay, with the count of runs so far. */
static uint64_t publish_retry(struct tm_amqp_task *at, struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    tm_amqp_base_props(&p, d);
    char exp[32];
    tm_snprintf(exp, sizeof exp, "%lld",
                (long long)(r->delay_ms > 0 ? r->delay_ms : 0));
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_EXPIRATION_FLAG;
    p.message_id = tm_amqp_bytes_of(d->id);
    p.expiration = amqp_cstring_bytes(exp);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_user(&h, &d->headers);
    tm_amqp_hdr_i64(&h, "x-attempts", r->attempt);
    if (r->error != NULL)
        tm_amqp_hdr_str(&h, "x-last-error", r->error,
                        TM_AMQP_ERROR_HEADER_MAX);
    p.headers = tm_amqp_hdr_table(&h);
    uint64_t seq =
        tm_amqp_pub_send(at, &at->pub, r->rk, &p, d->body, d->body_len,
                         /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* reply_body returns the answer for a request: the task's result (or
 * null) on success, else an error object. Free with cJSON_free when
 * *owned. */
static char *reply_body(const struct tm_amqp_task *at,
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
    cJSON_AddStringToObject(o, "task", at->cfg->name);
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

/* publish_reply answers a request on the reply channel (not mandatory:
 * a requester that went away just misses its answer). */
static uint64_t publish_reply(struct tm_amqp_task *at,
                              const struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_HEADERS_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG;
    p.content_type = amqp_cstring_bytes("application/json");
    p.delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    p.correlation_id = tm_amqp_bytes_of(d->correlation_id);
    p.message_id = tm_amqp_bytes_of(d->id);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    tm_amqp_hdr_str(&h, "x-task", at->cfg->name, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_i64(&h, "x-attempts", rec_attempts(r));
    p.headers = tm_amqp_hdr_table(&h);
    size_t len;
    int owned;
    char *body = reply_body(at, r, &len, &owned);
    uint64_t seq = tm_amqp_pub_send(at, &at->rpub, d->reply_to, &p, body, len,
                            /* mandatory = */ 0);
    if (owned)
        cJSON_free(body);
    tm_free(h.e);
    return seq;
}

static int needs_reply(const struct tm_amqp_rec *r)
{
    return r->d != NULL && r->d->reply_to != NULL &&
           r->d->correlation_id != NULL &&
           (r->settle == TM_SETTLE_ACK || r->settle == TM_SETTLE_DEAD);
}

/*
 * tm_amqp_flush does the settlements queued for the task, in one round:
 * declare retry queues on first use, publish every dead-letter, retry and
 * reply copy, wait for their publisher confirms, then acknowledge the
 * originals (or give them back when the broker refused a copy). Records
 * of a connection since lost are dropped: RabbitMQ redelivers those
 * messages. Returns -1 when the connection failed (at->errstr).
 */
int tm_amqp_flush(struct tm_amqp_task *at)
{
    struct tm_amqp_recvec *w = &at->work;
    pthread_mutex_lock(&at->q_mu);
    struct tm_amqp_recvec tmp = at->pending;
    at->pending = *w;
    *w = tmp;
    pthread_mutex_unlock(&at->q_mu);
    if (w->n == 0)
        return 0;
    int rc = 0;
    size_t stale = 0, npub = 0;
    char why[512];
    if (at->conn == NULL) {
        stale = w->n;
        goto out;
    }

    /* 1. retry queues (a retry impossible there becomes a dead letter) */
    for (size_t i = 0; i < w->n; i++) {
        struct tm_amqp_rec *r = &w->v[i];
        if (r->gen != at->gen) {
            r->stale = 1;
            stale++;
            continue;
        }
        if (r->settle != TM_SETTLE_RETRY)
            continue;
        int dead = 0;
        int64_t base = tm_retry_delay_ms(at->cfg, r->attempt, 0.0);
        r->rk = tm_amqp_retry_queue(at, base, why, sizeof why, &dead);
        if (dead) {
            rc = -1;
            goto out;
        }
        if (r->rk == NULL) {
            tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, at->cfg->name, r->d->id,
                         "%s; dead-lettering instead", why);
            char *e = tm_asprintf("%s; %s", r->error ? r->error : "error",
                                  why);
            tm_free(r->error);
            r->error = e;
            r->settle = TM_SETTLE_DEAD;
        }
    }

    /* 2. the copies, each confirmed by the broker */
    tm_amqp_pub_round(&at->pub);
    tm_amqp_pub_round(&at->rpub);
    for (size_t i = 0; i < w->n; i++) {
        struct tm_amqp_rec *r = &w->v[i];
        if (r->stale)
            continue;
        if (needs_reply(r)) {
            if (!at->rpub.open) {
                if (tm_amqp_channel(at->conn, TM_AMQP_CH_REPLY, 1, at->errstr,
                               sizeof at->errstr) != 0) {
                    rc = -1;
                    goto out;
                }
                tm_amqp_pub_reset(&at->rpub, 1);
                tm_amqp_pub_round(&at->rpub);
            }
            r->rseq = publish_reply(at, r);
            if (r->rseq == 0) {
                rc = -1;
                goto out;
            }
            npub++;
        }
        if (r->settle == TM_SETTLE_DEAD)
            r->seq = publish_dead(at, r);
        else if (r->settle == TM_SETTLE_RETRY)
            r->seq = publish_retry(at, r);
        else
            continue;
        if (r->seq == 0) {
            rc = -1;
            goto out;
        }
        npub++;
    }
    if (npub > 0 && tm_amqp_wait_confirms(at) != 0) {
        rc = -1;
        goto out;
    }

    /* 3. the originals */
    if (w->n > at->tagcap) {
        at->tagcap = w->n * 2;
        at->tags = tm_realloc(at->tags, at->tagcap * sizeof *at->tags);
        at->ntags = tm_realloc(at->ntags, at->tagcap * sizeof *at->ntags);
    }
    size_t na = 0, nn = 0;
    for (size_t i = 0; i < w->n; i++) {
        struct tm_amqp_rec *r = &w->v[i];
        if (r->stale)
            continue;
        if (r->rseq != 0 &&
            tm_amqp_pub_state(&at->rpub, r->rseq) != TM_AMQP_ACKED)
            tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, at->cfg->name, r->d->id,
                         "the reply to '%s' was not confirmed; the "
                         "requester gets no answer", r->d->reply_to);
        if (r->seq != 0 &&
            (r->returned ||
             tm_amqp_pub_state(&at->pub, r->seq) != TM_AMQP_ACKED)) {
            if (!r->returned)
                tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, at->cfg->name, r->d->id,
                             "RabbitMQ refused the %s copy for '%s'; the "
                             "message stays in the queue and is delivered "
                             "again", r->settle == TM_SETTLE_DEAD
                                          ? "dead-letter"
                                          : "retry",
                             r->rk);
            at->ntags[nn++] = r->tag;
            continue;
        }
        at->tags[na++] = r->tag;
    }
    int err = 0;
    tm_amqp_settle_tags(at, at->tags, na, at->ntags, nn, &err);
    if (err)
        rc = -1;
out:
    if (stale > 0)
        tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, at->cfg->name, NULL,
                     "%zu settlement(s) dropped: their connection was lost "
                     "and RabbitMQ delivers those messages again", stale);
    tm_amqp_recvec_clear(w);
    return rc;
}

/* settle_task does the task's queued settlements on the calling (settle)
 * thread, and wakes intake when frames read meanwhile brought
 * deliveries. */
static void settle_task(struct tm_amqp_task *at, const char *what)
{
    pthread_mutex_lock(&at->io_mu);
    tm_amqp_serve(at, what);
    int ready = at->nready > 0;
    pthread_mutex_unlock(&at->io_mu);
    if (ready)
        tm_amqp_signal_intake(at);
}

/*
 * tm_amqp_settle turns each message's settlement into a record on its task and
 * does them at once, a round per task: acks need only the delivery tag;
 * dead letters, retries and replies take the delivery, error and result
 * from the message (copies are published and confirmed before the
 * original is acked). It always returns 0: a settlement that cannot
 * be done because its connection was lost is moot, as RabbitMQ redelivers
 * every message that was not acknowledged on it.
 */
size_t tm_amqp_settle(struct tm_broker *b, struct tm_msg **msgs,
                        size_t n)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    struct tm_amqp_task *locked = NULL;
    int64_t now = tm_wall_ms();
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        struct tm_amqp_delivery *d = m->bctx;
        if (m->settle == TM_SETTLE_NONE || d == NULL ||
            m->task_index >= ab->ntasks)
            continue;
        struct tm_amqp_task *at = &ab->tasks[m->task_index];
        struct tm_amqp_rec r;
        memset(&r, 0, sizeof r);
        r.settle = m->settle;
        r.outcome = m->outcome;
        r.tag = d->tag;
        r.gen = d->gen;
        r.attempt = m->attempt;
        r.delay_ms = m->retry_delay_ms;
        r.failed_at = now;
        if (m->settle != TM_SETTLE_ACK ||
            (d->reply_to != NULL && d->correlation_id != NULL)) {
            r.d = d;
            m->bctx = NULL;
            r.error = m->error;
            m->error = NULL;
            r.result = m->result;
            r.result_len = m->result_len;
            m->result = NULL;
        }
        if (locked != at) {
            if (locked != NULL)
                pthread_mutex_unlock(&locked->q_mu);
            pthread_mutex_lock(&at->q_mu);
            locked = at;
        }
        recvec_push(&at->pending, &r);
        at->touched = 1;
    }
    if (locked != NULL)
        pthread_mutex_unlock(&locked->q_mu);
    for (size_t i = 0; i < ab->ntasks; i++) {
        if (ab->tasks[i].touched) {
            ab->tasks[i].touched = 0;
            settle_task(&ab->tasks[i], "settle");
        }
    }
    return 0;
}

/* tm_amqp_tick keeps quiet connections alive from the settle thread (intake
 * does not read while the pool is full): it reads frames, which sends a
 * heartbeat when one is due and notices a silent broker. */
void tm_amqp_tick(struct tm_broker *b)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    for (size_t i = 0; i < ab->ntasks; i++)
        settle_task(&ab->tasks[i], "upkeep");
}
