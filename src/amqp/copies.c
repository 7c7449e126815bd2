/* amqp/copies.c - the messages the RabbitMQ publishing connection sends
 * for a settlement (publish.c): the dead-letter, retry and delay copies
 * of a delivery, with the queues they go to, and the reply to a request;
 * each goes out through pub_send on a confirm channel. */
#include "amqp.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "task/task.h" /* tm_retry_delay_ms: the retry queue of a delay */
#include "util/log.h"
#include "util/util.h"

/* TASK_CFG is the configuration of the task a record settles. */
#define TASK_CFG(pc, r) ((pc)->ab->tasks[(r)->task].cfg)

/* pub_send publishes one message on a confirm channel of the
 * publishing connection, through the default exchange. Returns its
 * confirm sequence, or 0 when the connection failed (pc->errstr). */
static uint64_t pub_send(struct tm_amqp_publisher *pc,
                         struct tm_amqp_pub *p, const char *rk,
                         const amqp_basic_properties_t *props,
                         const char *body, size_t len, int mandatory)
{
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)body};
    int rc = sym_amqp_basic_publish(pc->conn, p->ch, TM_AMQP_EMPTY_BYTES,
                                    sym_amqp_cstring_bytes(rk), mandatory,
                                    /* immediate = */ 0, props, b);
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(pc->errstr, sizeof pc->errstr,
                    "basic.publish to '%s': %s", rk,
                    sym_amqp_error_string2(rc));
        return 0;
    }
    return p->next_seq++;
}

static unsigned rec_attempts(const struct tm_amqp_rec *r)
{
    return r->outcome == TM_OUT_INVALID ? 0u : r->attempt;
}

/* publish_dead sends the dead-letter copy on the publishing
 * connection: the original body and properties, a new message id, and
 * the failure headers. Returns its confirm sequence, 0 when the
 * connection failed (pc->errstr). */
static uint64_t publish_dead(struct tm_amqp_publisher *pc,
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
        pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
                 /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* publish_retry sends the retry copy to the retry queue r->rk,
 * expiring after the delay, with the count of runs so far. Returns its
 * confirm sequence, 0 when the connection failed. */
static uint64_t publish_retry(struct tm_amqp_publisher *pc,
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
        pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
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
        pub_send(pc, &pc->replies, d->reply_to, &p, body, len,
                 /* mandatory = */ 0);
    if (owned)
        cJSON_free(body);
    tm_free(h.e);
    return seq;
}

/* prepare_retry finds (declaring it on first use) the retry queue of r;
 * a retry impossible there becomes a dead letter. Returns -1 when the
 * connection failed. */
static int prepare_retry(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r)
{
    const struct tm_cfg_task *t = pc->ab->tasks[r->task].cfg;
    char why[512];
    int dead = 0;
    int64_t base = tm_retry_delay_ms(t, r->attempt, 0.0);
    r->rk = tm_amqp_retry_queue(pc, t, base, why, sizeof why, &dead);
    if (dead)
        return -1;
    if (r->rk == NULL) {
        tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, t->name, r->d->id,
                     "%s; dead-lettering instead", why);
        char *e = tm_asprintf("%s; %s", r->error ? r->error : "error", why);
        tm_free(r->error);
        r->error = e;
        r->settle = TM_SETTLE_DEAD;
    }
    return 0;
}

/* prepare_park finds (declaring it) r's delay queue; one that cannot be
 * declared makes r a dead letter. -1: connection failed. */
static int prepare_park(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r)
{
    const struct tm_cfg_task *t = pc->ab->tasks[r->task].cfg;
    char why[512];
    int dead = 0;
    r->rk = tm_amqp_delay_queue(pc, t, r->delay_ms, why, sizeof why, &dead);
    if (dead)
        return -1;
    if (r->rk == NULL) {
        /* never dropped, never run early: dead-lettered with the reason */
        tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, t->name, r->d->id,
                     "%s; dead-lettering the delayed message instead", why);
        tm_free(r->error);
        r->error = tm_asprintf("cannot delay the message: %s", why);
        r->outcome = TM_OUT_REJECTED;
        r->settle = TM_SETTLE_DEAD;
        r->park = 0;
    }
    return 0;
}

/* publish_park sends the delay copy to r's delay queue: the original
 * body, properties and headers (x-not-before among them), with the count
 * of runs before this delivery. Returns its confirm sequence, 0 when the
 * connection failed. */
static uint64_t publish_park(struct tm_amqp_publisher *pc,
                              struct tm_amqp_rec *r)
{
    const struct tm_amqp_delivery *d = r->d;
    amqp_basic_properties_t p;
    tm_amqp_base_props(&p, d);
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    p.message_id = tm_amqp_bytes_of(d->id);
    struct tm_amqp_hdrs h = {0};
    /* x-not-before is the user's: it comes along */
    tm_amqp_hdr_user(&h, &d->headers);
    /* runs before this delivery; parking is not one */
    if (d->attempt > 1)
        tm_amqp_hdr_i64(&h, "x-attempts", (int64_t)d->attempt - 1);
    p.headers = tm_amqp_hdr_table(&h);
    uint64_t seq =
        pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
                 /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

int tm_amqp_copy_prepare(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r)
{
    return r->park ? prepare_park(pc, r) : prepare_retry(pc, r);
}

uint64_t tm_amqp_copy_send(struct tm_amqp_publisher *pc,
                           struct tm_amqp_rec *r)
{
    return r->settle == TM_SETTLE_DEAD ? publish_dead(pc, r)
           : r->park                   ? publish_park(pc, r)
                                       : publish_retry(pc, r);
}
