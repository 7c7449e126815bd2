/* amqp/topology.c - RabbitMQ declarations: task, dead-letter, retry queues. */
#include "amqp.h"

#include <assert.h>
#include <string.h>

#include "util.h"

/* inequivalent shortens RabbitMQ's "406 PRECONDITION_FAILED - inequivalent
 * arg 'A' for queue 'Q' in vhost 'V': received X but current is Y" to
 * "inequivalent arg 'A': received X but current is Y" (in place), so that
 * the argument's name survives in a one-line error. */
static const char *inequivalent(char *text)
{
    char *arg = strstr(text, "inequivalent arg '");
    if (arg == NULL)
        return text;
    char *name_end = strchr(arg + strlen("inequivalent arg '"), '\'');
    char *rest = name_end != NULL ? strstr(name_end, "': ") : NULL;
    if (rest == NULL)
        return arg;
    memmove(name_end + 1, rest + 1, strlen(rest + 1) + 1);
    return arg;
}

/* struct args builds a queue's argument table. */
struct args {
    amqp_table_entry_t e[8];
    int n;
};

static void arg_str(struct args *a, const char *key, const char *val)
{
    assert(a->n < (int)(sizeof a->e / sizeof a->e[0]));
    amqp_table_entry_t *e = &a->e[a->n++];
    memset(e, 0, sizeof *e);
    e->key = sym_amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = sym_amqp_cstring_bytes(val);
}

static void arg_i64(struct args *a, const char *key, int64_t val)
{
    assert(a->n < (int)(sizeof a->e / sizeof a->e[0]));
    amqp_table_entry_t *e = &a->e[a->n++];
    memset(e, 0, sizeof *e);
    e->key = sym_amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = val;
}

/*
 * quorum_args adds what makes a queue a quorum queue whose own
 * dead-lettering (expiry, rejects) is at-least-once: RabbitMQ keeps a
 * message until the dead-letter target confirmed it, which needs
 * overflow reject-publish. No x-delivery-limit: it is a queue argument,
 * fixed at declaration, so every later change of max_retries would be
 * refused (406); taskmill dead-letters a message delivered more than
 * max_retries + 1 times itself, from the broker's x-delivery-count, with
 * its failure headers.
 */
static void quorum_args(struct args *a, enum tm_amqp_queue_type type)
{
    if (type != TM_AMQP_QUORUM)
        return;
    arg_str(a, "x-queue-type", "quorum");
    arg_str(a, "x-dead-letter-strategy", "at-least-once");
    arg_str(a, "x-overflow", "reject-publish");
}

/*
 * tm_amqp_declare declares, idempotently and durably, the task's topology on
 * channel ch: the shared dead-letter exchange, the task's dead-letter
 * queue bound to it by its own name, and the task queue, whose rejected
 * or expired messages go there (x-dead-letter-exchange) and which has
 * x-max-priority when configured. With broker.amqp.queue_type quorum,
 * both queues are quorum queues (quorum_args). An existing queue or
 * exchange with other arguments makes the broker refuse (406
 * PRECONDITION_FAILED, naming the argument); then *perm is set. Nothing
 * is ever deleted.
 */
int tm_amqp_declare(amqp_connection_state_t c, amqp_channel_t ch,
                      const struct tm_amqp_broker *ab,
                      const struct tm_cfg_task *t, char *buf, size_t size,
                      int *perm)
{
    char eb[300], what[300];
    amqp_rpc_reply_t r;
    enum tm_amqp_queue_type type = ab->base.cfg->amqp_queue_type;
    struct args dargs = {.n = 0};
    *perm = 0;

    tm_snprintf(what, sizeof what, "exchange '%s'", TM_AMQP_DLX);
    sym_amqp_exchange_declare(c, ch, sym_amqp_cstring_bytes(TM_AMQP_DLX),
                          sym_amqp_cstring_bytes("direct"), /* passive = */ 0,
                          /* durable = */ 1, /* auto_delete = */ 0,
                          /* internal = */ 0, TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "dead-letter queue '%s'", t->dead_letter);
    if (type == TM_AMQP_QUORUM)
        arg_str(&dargs, "x-queue-type", "quorum");
    amqp_table_t dt = {.num_entries = dargs.n, .entries = dargs.e};
    sym_amqp_queue_declare(c, ch, sym_amqp_cstring_bytes(t->dead_letter),
                           /* passive = */ 0, /* durable = */ 1,
                           /* exclusive = */ 0, /* auto_delete = */ 0, dt);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    sym_amqp_queue_bind(c, ch, sym_amqp_cstring_bytes(t->dead_letter),
                        sym_amqp_cstring_bytes(TM_AMQP_DLX),
                        sym_amqp_cstring_bytes(t->dead_letter),
                        TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "queue '%s'", t->queue);
    struct args qargs = {.n = 0};
    arg_str(&qargs, "x-dead-letter-exchange", TM_AMQP_DLX);
    arg_str(&qargs, "x-dead-letter-routing-key", t->dead_letter);
    /* the configuration refuses max_priority on quorum queues */
    assert(type != TM_AMQP_QUORUM || t->max_priority == 0);
    if (t->max_priority > 0) {
        amqp_table_entry_t *e = &qargs.e[qargs.n++];
        memset(e, 0, sizeof *e);
        e->key = sym_amqp_cstring_bytes("x-max-priority");
        e->value.kind = AMQP_FIELD_KIND_I32;
        e->value.value.i32 = t->max_priority;
    }
    quorum_args(&qargs, type);
    amqp_table_t at = {.num_entries = qargs.n, .entries = qargs.e};
    sym_amqp_queue_declare(c, ch, sym_amqp_cstring_bytes(t->queue), 0, 1, 0, 0,
                           at);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    return 0;

fail:
    tm_amqp_strerror(r, eb, sizeof eb);
    if (tm_amqp_reply_code(r) == AMQP_PRECONDITION_FAILED) {
        *perm = 1;
        tm_snprintf(buf, size, "task '%s': %s exists with other arguments: "
                    "%s (406 PRECONDITION_FAILED); taskmill never changes "
                    "or deletes it", t->name, what, inequivalent(eb));
    } else {
        tm_snprintf(buf, size, "task '%s': cannot declare %s: %s", t->name,
                    what, eb);
    }
    return -1;
}

/* retry_declare declares retry queue name of task t for a delay of ms
 * on the publisher's admin channel: messages wait in it (per-message
 * expiration) and then dead-letter back, through the default exchange,
 * to the task queue. It expires when unused (x-expires, see
 * TM_AMQP_RETRY_EXPIRES). A queue of the same name declared by an
 * earlier version, without x-expires, makes the broker refuse (406):
 * that one is used as it is (a passive declaration), never changed.
 * Returns 0, or -1 with the reason in buf and *dead set when the
 * connection failed. */
static int retry_declare(struct tm_amqp_publisher *pc,
                         const struct tm_cfg_task *t, const char *name,
                         int64_t ms, char *buf, size_t size, int *dead)
{
    char eb[256];
    struct args a = {.n = 0};
    arg_str(&a, "x-dead-letter-exchange", "");
    arg_str(&a, "x-dead-letter-routing-key", t->queue);
    arg_i64(&a, "x-expires", TM_AMQP_RETRY_EXPIRES(ms));
    quorum_args(&a, pc->ab->base.cfg->amqp_queue_type);
    amqp_table_t tbl = {.num_entries = a.n, .entries = a.e};
    int passive = 0;
    for (;;) {
        sym_amqp_queue_declare(pc->conn, TM_AMQP_PCH_ADMIN,
                           sym_amqp_cstring_bytes(name), passive,
                           /* durable = */ 1, /* exclusive = */ 0,
                           /* auto_delete = */ 0,
                           passive ? TM_AMQP_EMPTY_TABLE : tbl);
        amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(pc->conn);
        if (r.reply_type == AMQP_RESPONSE_NORMAL)
            return 0;
        tm_snprintf(buf, size, "retry queue '%s' cannot be declared: %s",
                    name, tm_amqp_strerror(r, eb, sizeof eb));
        if (!tm_amqp_channel_error(r) ||
            tm_amqp_channel_closed_ok(pc->conn, TM_AMQP_PCH_ADMIN) !=
                AMQP_STATUS_OK ||
            tm_amqp_channel(pc->conn, TM_AMQP_PCH_ADMIN, 0, eb,
                            sizeof eb) != 0) {
            tm_snprintf(pc->errstr, sizeof pc->errstr, "%s", buf);
            *dead = 1;
            return -1;
        }
        if (passive || tm_amqp_reply_code(r) != AMQP_PRECONDITION_FAILED)
            return -1;
        passive = 1;
    }
}

/* tm_amqp_retry_queue returns the name of task t's retry queue for a
 * delay of ms, declaring it on the publishing connection on first use
 * there, and again when TM_AMQP_RETRY_REDECLARE(ms) passed since, to
 * keep it from expiring while it is used. NULL with the reason in buf
 * when it cannot be declared; *dead is set when the connection failed
 * (pc->errstr). */
const char *tm_amqp_retry_queue(struct tm_amqp_publisher *pc,
                                const struct tm_cfg_task *t, int64_t ms,
                                char *buf, size_t size, int *dead)
{
    char name[TM_AMQP_SHORTSTR_MAX + 64];
    int64_t now = tm_now_ms();
    tm_snprintf(name, sizeof name, "%s.retry.%lldms", t->queue,
                (long long)ms);
    if (strlen(name) > TM_AMQP_SHORTSTR_MAX)
        tm_snprintf(name, sizeof name, "%.200s.%016llx.retry.%lldms",
                    t->queue,
                    (unsigned long long)tm_amqp_fnv64(
                        t->queue, strlen(t->queue), TM_AMQP_FNV64_INIT),
                    (long long)ms);
    struct tm_amqp_level *lv = NULL;
    for (size_t i = 0; i < pc->nlevels && lv == NULL; i++)
        if (strcmp(pc->levels[i].name, name) == 0)
            lv = &pc->levels[i];
    if (lv != NULL && now - lv->declared_at < TM_AMQP_RETRY_REDECLARE(ms))
        return lv->name;
    if (retry_declare(pc, t, name, ms, buf, size, dead) != 0)
        return NULL;
    if (lv == NULL) {
        if (pc->nlevels == pc->caplevels) {
            pc->caplevels = pc->caplevels ? pc->caplevels * 2 : 8;
            pc->levels = tm_realloc(pc->levels,
                                    pc->caplevels * sizeof *pc->levels);
        }
        lv = &pc->levels[pc->nlevels++];
        lv->name = tm_strdup(name);
    }
    lv->declared_at = now;
    return lv->name;
}
