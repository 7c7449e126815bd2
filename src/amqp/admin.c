/* amqp/admin.c - RabbitMQ CLI: its connection, publish and request. */
#include "amqp.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

static int cli_ready(struct tm_amqp_broker *ab)
{
    char eb[512];
    if (ab->cli != NULL)
        return 0;
    /* a command runs once: it tries each node in turn, not only one */
    amqp_connection_state_t c = NULL;
    for (size_t i = 0; i < ab->nnodes && c == NULL; i++)
        c = tm_amqp_open(ab, "cli", 0, NULL, eb, sizeof eb);
    if (c == NULL) {
        tm_broker_set_error(&ab->base, ECONNREFUSED, "%s", eb);
        return -1;
    }
    if (tm_amqp_channel(c, TM_AMQP_CLI_PUB, 1, eb, sizeof eb) != 0 ||
        tm_amqp_channel(c, TM_AMQP_CLI_GET, 0, eb, sizeof eb) != 0) {
        tm_broker_set_error(&ab->base, EIO, "%s", eb);
        tm_amqp_drop(c);
        return -1;
    }
    ab->cli = c;
    ab->cli_seq = 0;
    return 0;
}

void tm_amqp_cli_lost(struct tm_amqp_broker *ab)
{
    tm_amqp_drop(ab->cli);
    ab->cli = NULL;
}

int tm_amqp_cli_declare(struct tm_amqp_broker *ab,
                        const struct tm_cfg_task *t)
{
    char eb[768];
    int perm = 0;
    if (cli_ready(ab) != 0)
        return -1;
    if (tm_amqp_declare(ab->cli, TM_AMQP_CLI_GET, ab, t, eb, sizeof eb,
                        &perm) != 0) {
        tm_broker_set_error(&ab->base, perm ? EINVAL : EIO, "%s", eb);
        tm_amqp_cli_lost(ab);
        return -1;
    }
    return 0;
}

/* struct tm_amqp_cli_wait is what the CLI waits for: a publisher
 * confirm, and the reply to a request. */
struct tm_amqp_cli_wait {
    struct tm_amqp_confirm conf; /* seq 0: no confirm awaited */
    int returned;
    char ret_text[128];
    const char *corr;      /* NULL: no reply awaited */
    char *reply;           /* the reply's body (owned) */
    char outcome[32];      /* its x-outcome header */
};

/* struct cli_waiting is a cli_wait under way. */
struct cli_waiting {
    amqp_connection_state_t c;
    struct tm_amqp_cli_wait *w;
    char *buf;
    size_t size;
};

/* cb_cli_frame takes a frame of the CLI connection into w: confirms,
 * returns, the reply to a request. */
static int cb_cli_frame(void *arg, const amqp_frame_t *f)
{
    struct cli_waiting *cw = arg;
    struct tm_amqp_cli_wait *w = cw->w;
    tm_amqp_confirm_note(&w->conf, f);
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0; /* the content of a returned message */
    if (tm_amqp_closed_why(f, cw->buf, cw->size))
        return -1;
    const amqp_method_t *m = &f->payload.method;
    if (m->id == AMQP_BASIC_RETURN_METHOD) {
        const amqp_basic_return_t *x = m->decoded;
        w->returned = 1;
        tm_snprintf(w->ret_text, sizeof w->ret_text, "%u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return 0;
    }
    if (m->id != AMQP_BASIC_DELIVER_METHOD)
        return 0;
    amqp_message_t msg;
    amqp_rpc_reply_t r = sym_amqp_read_message(cw->c, f->channel, &msg, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_snprintf(cw->buf, cw->size, "reading a reply: %s",
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    const amqp_basic_properties_t *p = &msg.properties;
    if (w->corr != NULL && w->reply == NULL &&
        (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) &&
        p->correlation_id.len == strlen(w->corr) &&
        memcmp(p->correlation_id.bytes, w->corr, p->correlation_id.len) ==
            0) {
        w->reply = tm_amqp_bytes_dup(msg.body);
        char *o = NULL;
        if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
            o = tm_amqp_field_str(
                tm_amqp_table_get(&p->headers, "x-outcome"));
        tm_snprintf(w->outcome, sizeof w->outcome, "%s",
                    o != NULL ? o : "success");
        tm_free(o);
    }
    sym_amqp_destroy_message(&msg);
    return 0;
}

/* cb_cli_step says whether w is satisfied. */
static int cb_cli_step(void *arg)
{
    const struct tm_amqp_cli_wait *w = ((const struct cli_waiting *)arg)->w;
    return (w->conf.seq == 0 || w->conf.state != TM_AMQP_WAITING) &&
           (w->corr == NULL || w->reply != NULL);
}

/* cli_wait reads frames until w is satisfied or deadline (monotonic ms)
 * passes. Returns 0, or -1 (b->err ETIMEDOUT on a timeout; after any
 * other failure the CLI connection is closed). */
static int cli_wait(struct tm_amqp_broker *ab, int64_t deadline,
                    struct tm_amqp_cli_wait *w)
{
    char eb[512];
    struct cli_waiting cw = {.c = ab->cli, .w = w, .buf = eb,
                             .size = sizeof eb};
    int rc = tm_amqp_confirm_wait(ab->cli, deadline, cb_cli_frame,
                                  cb_cli_step, &cw, eb, sizeof eb);
    if (rc == 0)
        return 0;
    if (rc > 0) {
        tm_broker_set_error(&ab->base, ETIMEDOUT, "timed out");
        return -1;
    }
    tm_broker_set_error(&ab->base, EIO, "%s", eb);
    tm_amqp_cli_lost(ab);
    return -1;
}

/* tm_amqp_cli_publish publishes on the CLI's confirm channel through the
 * default exchange and waits for the confirm. With w, the caller's wait state
 * is used (and may also wait for a reply). */
int tm_amqp_cli_publish(struct tm_amqp_broker *ab, const char *rk,
                        const amqp_basic_properties_t *props, const char *body,
                        size_t len, struct tm_amqp_cli_wait *w,
                        int64_t deadline)
{
    struct tm_amqp_cli_wait own;
    if (w == NULL) {
        memset(&own, 0, sizeof own);
        w = &own;
    }
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)body};
    int rc = sym_amqp_basic_publish(ab->cli, TM_AMQP_CLI_PUB,
                                    TM_AMQP_EMPTY_BYTES,
                                    sym_amqp_cstring_bytes(rk),
                                    /* mandatory = */ 1,
                                    /* immediate = */ 0, props, b);
    if (rc != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.publish to '%s': %s", rk,
                            sym_amqp_error_string2(rc));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    w->conf.ch = TM_AMQP_CLI_PUB;
    w->conf.seq = ++ab->cli_seq;
    w->conf.state = TM_AMQP_WAITING;
    if (cli_wait(ab, deadline, w) != 0) {
        if (ab->base.err == ETIMEDOUT && w->conf.state == TM_AMQP_WAITING)
            tm_broker_set_error(&ab->base, ETIMEDOUT, "no publisher "
                                "confirm from RabbitMQ in time");
        return -1;
    }
    if (w->conf.state == TM_AMQP_NACKED) {
        tm_broker_set_error(&ab->base, EIO, "RabbitMQ refused the message "
                            "(basic.nack)");
        return -1;
    }
    if (w->returned) {
        tm_broker_set_error(&ab->base, EIO, "RabbitMQ could not route the "
                            "message to queue '%s' (%s)", rk, w->ret_text);
        return -1;
    }
    return 0;
}

/* pub_headers sets p's headers from pub (x-dedup-key, traceparent) and
 * due_ms (x-not-before, when > 0) in h[3], which must outlive p. */
static void pub_headers(amqp_basic_properties_t *p, amqp_table_entry_t h[3],
                        const struct tm_pub *pub, int64_t due_ms)
{
    int n = 0;
    memset(h, 0, 3 * sizeof *h);
    if (due_ms > 0) {
        h[n].key = sym_amqp_cstring_bytes("x-not-before");
        h[n].value.kind = AMQP_FIELD_KIND_I64;
        h[n].value.value.i64 = due_ms;
        n++;
    }
    const char *dk = tm_pub_dedup_key(pub);
    if (dk != NULL) {
        h[n].key = sym_amqp_cstring_bytes("x-dedup-key");
        h[n].value.kind = AMQP_FIELD_KIND_UTF8;
        h[n].value.value.bytes = sym_amqp_cstring_bytes(dk);
        n++;
    }
    const char *tp = tm_pub_traceparent(pub);
    if (tp != NULL) {
        h[n].key = sym_amqp_cstring_bytes("traceparent");
        h[n].value.kind = AMQP_FIELD_KIND_UTF8;
        h[n].value.value.bytes = sym_amqp_cstring_bytes(tp);
        n++;
    }
    if (n > 0) {
        p->_flags |= AMQP_BASIC_HEADERS_FLAG;
        p->headers.num_entries = n;
        p->headers.entries = h;
    }
}

/* publish_new publishes a new message to the task's queue, with header
 * x-not-before = due_ms when due_ms > 0 (a delayed message: the daemon
 * that receives it parks it until then, see delay.c). */
static int publish_new(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *body, size_t len,
                       const struct tm_pub *pub, int64_t due_ms, char *id,
                       size_t idlen)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    char uuid[40];
    tm_uuid4(uuid, sizeof uuid);
    amqp_basic_properties_t p;
    tm_amqp_new_message_props(&p, t, tm_pub_priority(pub), uuid);
    amqp_table_entry_t h[3];
    pub_headers(&p, h, pub, due_ms);
    if (tm_amqp_cli_publish(ab, t->queue, &p, body, len, NULL,
                            tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS) != 0)
        return -1;
    tm_snprintf(id, idlen, "%s", uuid);
    return 0;
}

int tm_amqp_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                    const char *body, size_t len, const struct tm_pub *pub,
                    char *id, size_t idlen)
{
    return publish_new(b, t, body, len, pub, 0, id, idlen);
}

int tm_amqp_publish_at(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *body, size_t len,
                       const struct tm_pub *pub, int64_t due_ms, char *id,
                       size_t idlen)
{
    /* epoch ms 0 would mean "not delayed": the past is the past */
    return publish_new(b, t, body, len, pub, due_ms > 0 ? due_ms : 1,
                       id, idlen);
}

/*
 * tm_amqp_request publishes a request with reply_to (an exclusive, auto-delete
 * queue of this connection) and a correlation id, then waits up to
 * timeout_ms for the answer.
 */
int tm_amqp_request(struct tm_broker *b, const struct tm_cfg_task *t,
                    const char *body, size_t len, const struct tm_pub *pub,
                    int64_t timeout_ms, char *id, size_t idlen,
                    char **reply, int *task_failed)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    char eb[256];
    *reply = NULL;
    *task_failed = 0;
    if (id != NULL && idlen > 0)
        id[0] = '\0';
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    amqp_queue_declare_ok_t *q = sym_amqp_queue_declare(
        ab->cli, TM_AMQP_CLI_GET, TM_AMQP_EMPTY_BYTES, /* passive = */ 0,
        /* durable = */ 0, /* exclusive = */ 1, /* auto_delete = */ 1,
        TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(ab->cli);
    if (q == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "declaring a reply queue: %s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    char *rq = tm_amqp_bytes_dup(q->queue);
    sym_amqp_basic_consume(ab->cli, TM_AMQP_CLI_GET, sym_amqp_cstring_bytes(rq),
                       TM_AMQP_EMPTY_BYTES, /* no_local = */ 0,
                       /* no_ack = */ 1, /* exclusive = */ 1,
                       TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(ab->cli);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "consuming the reply queue: %s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_free(rq);
        tm_amqp_cli_lost(ab);
        return -1;
    }
    char uuid[40];
    tm_uuid4(uuid, sizeof uuid);
    amqp_basic_properties_t p;
    tm_amqp_new_message_props(&p, t, tm_pub_priority(pub), uuid);
    amqp_table_entry_t h[3];
    pub_headers(&p, h, pub, 0);
    p._flags |= AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG;
    p.reply_to = sym_amqp_cstring_bytes(rq);
    p.correlation_id = sym_amqp_cstring_bytes(uuid);
    struct tm_amqp_cli_wait w;
    memset(&w, 0, sizeof w);
    w.corr = uuid;
    int64_t start = tm_now_ms();
    int64_t deadline = start + (timeout_ms > 0 ? timeout_ms : 0);
    int64_t cdeadline = start + TM_AMQP_CONFIRM_TIMEOUT_MS;
    int rc = tm_amqp_cli_publish(ab, t->queue, &p, body, len, &w,
                                 cdeadline < deadline ? cdeadline : deadline);
    tm_free(rq);
    if (rc != 0 && !(b->err == ETIMEDOUT && w.conf.state == TM_AMQP_ACKED)) {
        tm_free(w.reply);
        return -1;
    }
    if (id != NULL)
        tm_snprintf(id, idlen, "%s", uuid);
    if (w.reply == NULL && cli_wait(ab, deadline, &w) != 0) {
        if (b->err == ETIMEDOUT)
            tm_broker_set_error(b, ETIMEDOUT, "no reply within %.3g s",
                                (double)timeout_ms / 1000.0);
        tm_free(w.reply);
        return -1;
    }
    *reply = w.reply;
    *task_failed = strcmp(w.outcome, "success") != 0;
    return 0;
}
