/* amqp/topology.c - RabbitMQ declarations: task, dead-letter, retry queues. */
#include "amqp.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h> /* snprintf: a name that may not fit */
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* returns of a message above taskmill's own dead-lettering point before
 * RabbitMQ's x-delivery-limit dead-letters it (delivery_limit) */
#define TM_AMQP_DELIVERY_MARGIN 5

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
 * dead-lettering (expiry, rejects, delivery limit) is at-least-once:
 * RabbitMQ keeps a message until the dead-letter target confirmed it,
 * which needs overflow reject-publish.
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
 * delivery_limit is the x-delivery-limit of task t's quorum queue: the
 * broker's backstop against a message whose deliveries keep ending
 * unsettled (a daemon killed before it could settle, a foreign consumer
 * that never acknowledges). RabbitMQ dead-letters a message, through the
 * queue's x-dead-letter-exchange, once it has been returned more than
 * this many times. taskmill's own count (delivery.c: x-attempts plus
 * x-delivery-count; exec.c) dead-letters it as crashed, with its failure
 * headers, at the latest at the delivery that carries x-delivery-count
 * max_retries + 1; the limit lies TM_AMQP_DELIVERY_MARGIN returns above
 * that, so the broker acts only where taskmill could not. -1 (no limit)
 * for max_retries -1 (unlimited).
 */
static int64_t delivery_limit(const struct tm_cfg_task *t)
{
    if (t->max_retries < 0)
        return -1;
    return (int64_t)t->max_retries + 1 + TM_AMQP_DELIVERY_MARGIN;
}

/*
 * current_limit reads, from the text of RabbitMQ's refusal of a queue
 * declaration, the x-delivery-limit the existing queue has: 1 with
 * *limit set (-1 for none) when the refusal is about x-delivery-limit
 * and names the current value ("... but current is none", "... but
 * current is '9'" as RabbitMQ 3.10 words it, or "... but current is
 * the value '9' of type 'long'" as other versions do), else 0.
 */
static int current_limit(const char *text, int64_t *limit)
{
    const char *p = strstr(text, "inequivalent arg 'x-delivery-limit'");
    if (p == NULL || (p = strstr(p, "but current is ")) == NULL)
        return 0;
    p += strlen("but current is ");
    if (strncmp(p, "none", 4) == 0) {
        *limit = -1;
        return 1;
    }
    if (strncmp(p, "the value ", 10) == 0)
        p += 10;
    if (*p++ != '\'' || *p < '0' || *p > '9')
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (*end != '\'' || errno != 0)
        return 0;
    *limit = v;
    return 1;
}

/* the queues whose kept x-delivery-limit this process has warned about:
 * the topology is declared again by every connection and by every
 * dead-letter read through the API, the warning is logged once per
 * queue, later ones at debug level */
static pthread_mutex_t warned_mu = PTHREAD_MUTEX_INITIALIZER;
static char **warned;
static size_t nwarned;

/* first_warning says whether this is the first warning about queue q's
 * kept limit in this process, and remembers q. */
static int first_warning(const char *q)
{
    int first = 1;
    pthread_mutex_lock(&warned_mu);
    for (size_t i = 0; i < nwarned && first; i++)
        first = strcmp(warned[i], q) != 0;
    if (first) {
        warned = tm_realloc(warned, (nwarned + 1) * sizeof *warned);
        warned[nwarned++] = tm_strdup(q);
    }
    pthread_mutex_unlock(&warned_mu);
    return first;
}

/*
 * tm_amqp_declare declares, idempotently and durably, the task's topology on
 * channel ch: the shared dead-letter exchange, the task's dead-letter
 * queue bound to it by its own name, and the task queue, whose rejected
 * or expired messages go there (x-dead-letter-exchange) and which has
 * x-max-priority when configured. With broker.amqp.queue_type quorum,
 * both queues are quorum queues, and the task queue gets quorum_args and
 * x-delivery-limit (delivery_limit). The dead-letter queue gets no
 * x-delivery-limit: it is browsed by reading unacknowledged and giving
 * back (basic.nack with requeue, dlq.c), which RabbitMQ before 4.3
 * counts as a delivery, and it has no dead-letter exchange, so a limit
 * there would make browsing drop dead letters. An existing queue or exchange with
 * other arguments makes the broker refuse (406 PRECONDITION_FAILED,
 * naming the argument); then *perm is set, except for a task queue's
 * x-delivery-limit, which is kept as it is (below). Nothing is ever
 * deleted.
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
    int64_t want = type == TM_AMQP_QUORUM ? delivery_limit(t) : -1;
    int nbase = qargs.n;
    if (want >= 0)
        arg_i64(&qargs, "x-delivery-limit", want);
    amqp_table_t at = {.num_entries = qargs.n, .entries = qargs.e};
    sym_amqp_queue_declare(c, ch, sym_amqp_cstring_bytes(t->queue), 0, 1, 0, 0,
                           at);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    /* An existing quorum queue declared with another x-delivery-limit
     * (an earlier max_retries, or an earlier version without one) is
     * kept as it is: RabbitMQ cannot change a queue argument, and a
     * refusal would stop every daemon of the task. It is declared again
     * with every other argument as configured and the limit it has, so
     * that those still get checked; the backstop stays at the old value
     * and the log says so. */
    int64_t have;
    tm_amqp_strerror(r, eb, sizeof eb);
    if (type != TM_AMQP_QUORUM ||
        tm_amqp_reply_code(r) != AMQP_PRECONDITION_FAILED ||
        !current_limit(eb, &have) || have == want)
        goto fail;
    if (tm_amqp_channel_closed_ok(c, ch) != AMQP_STATUS_OK ||
        tm_amqp_channel(c, ch, 0, eb, sizeof eb) != 0) {
        tm_snprintf(buf, size, "task '%s': cannot declare %s: %s", t->name,
                    what, eb);
        return -1;
    }
    qargs.n = nbase;
    if (have >= 0)
        arg_i64(&qargs, "x-delivery-limit", have);
    at.num_entries = qargs.n;
    sym_amqp_queue_declare(c, ch, sym_amqp_cstring_bytes(t->queue), 0, 1, 0, 0,
                           at);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    char hs[32], ws[32];
    tm_snprintf(hs, sizeof hs, "%lld", (long long)have);
    tm_snprintf(ws, sizeof ws, "%lld", (long long)want);
    tm_log_write(first_warning(t->queue) ? TM_LOG_WARNING : TM_LOG_DEBUG,
                 TM_AMQP_SRC, t->name, NULL,
                 "queue '%s' keeps x-delivery-limit %s, set when it was "
                 "declared; max_retries %d asks for %s. RabbitMQ cannot "
                 "change a queue argument: the broker's backstop stays at "
                 "%s until the queue is declared anew (see "
                 "docs/rabbitmq.md, quorum queues)",
                 t->queue, have >= 0 ? hs : "none", t->max_retries,
                 want >= 0 ? ws : "none", have >= 0 ? hs : "none");
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

/* tm_amqp_pause_queue writes the name of task t's pause control queue
 * (pause.c) to buf; -1 when it does not fit in an AMQP short string. */
int tm_amqp_pause_queue(const struct tm_cfg_task *t, char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "%s.paused", t->queue);
    return n < size && n <= TM_AMQP_SHORTSTR_MAX ? 0 : -1;
}

/* tm_amqp_pause_declare declares task t's pause control queue on c/ch
 * (durable, the task queue's type, x-max-length 1 with drop-head: see
 * pause.c), which reads its state: 1 when it holds a message (paused), 0
 * when it is empty, -1 on failure (reason in buf; the channel or
 * connection is then unusable). */
int tm_amqp_pause_declare(amqp_connection_state_t c, amqp_channel_t ch,
                          const struct tm_amqp_broker *ab,
                          const struct tm_cfg_task *t, char *buf,
                          size_t size)
{
    char name[TM_AMQP_SHORTSTR_MAX + 16], eb[256];
    if (tm_amqp_pause_queue(t, name, sizeof name) != 0) {
        tm_snprintf(buf, size, "queue name '%s.paused' is too long",
                    t->queue);
        return -1;
    }
    amqp_table_entry_t e[3];
    int n = 0;
    e[n].key = sym_amqp_cstring_bytes("x-max-length");
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n++].value.value.i64 = 1;
    e[n].key = sym_amqp_cstring_bytes("x-overflow");
    e[n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[n++].value.value.bytes = sym_amqp_cstring_bytes("drop-head");
    if (ab->base.cfg->amqp_queue_type == TM_AMQP_QUORUM) {
        e[n].key = sym_amqp_cstring_bytes("x-queue-type");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = sym_amqp_cstring_bytes("quorum");
    }
    amqp_table_t args = {.num_entries = n, .entries = e};
    amqp_queue_declare_ok_t *ok =
        sym_amqp_queue_declare(c, ch, sym_amqp_cstring_bytes(name),
                               /* passive = */ 0, /* durable = */ 1,
                               /* exclusive = */ 0, /* auto_delete = */ 0,
                               args);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "queue.declare '%s': %s", name,
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    return ok->message_count > 0;
}

/* level_name writes to buf the name of task t's queue of kind ("retry",
 * "delay") for ms: "<queue>.<kind>.<ms>ms", the task queue's name cut
 * and hashed when that would not fit in an AMQP short string. */
static void level_name(const struct tm_cfg_task *t, const char *kind,
                       int64_t ms, char *buf, size_t size)
{
    tm_snprintf(buf, size, "%s.%s.%lldms", t->queue, kind, (long long)ms);
    if (strlen(buf) > TM_AMQP_SHORTSTR_MAX)
        tm_snprintf(buf, size, "%.200s.%016llx.%s.%lldms", t->queue,
                    (unsigned long long)tm_amqp_fnv64(
                        t->queue, strlen(t->queue), TM_AMQP_FNV64_INIT),
                    kind, (long long)ms);
}

/* level_find is the queue named name among those declared on pc's
 * connection, NULL when it is not one. */
static struct tm_amqp_level *level_find(struct tm_amqp_publisher *pc,
                                        const char *name)
{
    for (size_t i = 0; i < pc->nlevels; i++)
        if (strcmp(pc->levels[i].name, name) == 0)
            return &pc->levels[i];
    return NULL;
}

/* level_add keeps name among the queues declared on pc's connection. */
static struct tm_amqp_level *level_add(struct tm_amqp_publisher *pc,
                                       const char *name)
{
    if (pc->nlevels == pc->caplevels) {
        pc->caplevels = pc->caplevels ? pc->caplevels * 2 : 8;
        pc->levels =
            tm_realloc(pc->levels, pc->caplevels * sizeof *pc->levels);
    }
    struct tm_amqp_level *lv = &pc->levels[pc->nlevels++];
    lv->name = tm_strdup(name);
    return lv;
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
    level_name(t, "retry", ms, name, sizeof name);
    struct tm_amqp_level *lv = level_find(pc, name);
    if (lv != NULL && now - lv->declared_at < TM_AMQP_RETRY_REDECLARE(ms))
        return lv->name;
    if (retry_declare(pc, t, name, ms, buf, size, dead) != 0)
        return NULL;
    if (lv == NULL)
        lv = level_add(pc, name);
    lv->declared_at = now;
    return lv->name;
}

/* delay_declare declares the delay queue name of task t for level ms on
 * the publisher's admin channel. Returns 0, or -1 with the reason in buf
 * and *dead set when the connection failed (pc->errstr). */
static int delay_declare(struct tm_amqp_publisher *pc,
                         const struct tm_cfg_task *t, const char *name,
                         int64_t ms, char *buf, size_t size, int *dead)
{
    char eb[256];
    amqp_table_entry_t e[6];
    int n = 0;
    memset(e, 0, sizeof e);
    e[n].key = sym_amqp_cstring_bytes("x-dead-letter-exchange");
    e[n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[n++].value.value.bytes = sym_amqp_cstring_bytes("");
    e[n].key = sym_amqp_cstring_bytes("x-dead-letter-routing-key");
    e[n].value.kind = AMQP_FIELD_KIND_UTF8;
    e[n++].value.value.bytes = sym_amqp_cstring_bytes(t->queue);
    e[n].key = sym_amqp_cstring_bytes("x-message-ttl");
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n++].value.value.i64 = ms;
    if (pc->ab->base.cfg->amqp_queue_type == TM_AMQP_QUORUM) {
        /* at-least-once dead-lettering: kept until the task queue has
         * it (needs reject-publish) */
        e[n].key = sym_amqp_cstring_bytes("x-queue-type");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = sym_amqp_cstring_bytes("quorum");
        e[n].key = sym_amqp_cstring_bytes("x-dead-letter-strategy");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = sym_amqp_cstring_bytes("at-least-once");
        e[n].key = sym_amqp_cstring_bytes("x-overflow");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = sym_amqp_cstring_bytes("reject-publish");
    }
    assert(n <= (int)(sizeof e / sizeof e[0]));
    amqp_table_t tbl = {.num_entries = n, .entries = e};
    sym_amqp_queue_declare(pc->conn, TM_AMQP_PCH_ADMIN,
                           sym_amqp_cstring_bytes(name), /* passive = */ 0,
                           /* durable = */ 1, /* exclusive = */ 0,
                           /* auto_delete = */ 0, tbl);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(pc->conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    tm_snprintf(buf, size, "delay queue '%s' cannot be declared: %s", name,
                tm_amqp_strerror(r, eb, sizeof eb));
    if (!tm_amqp_channel_error(r) ||
        tm_amqp_channel_closed_ok(pc->conn, TM_AMQP_PCH_ADMIN) !=
            AMQP_STATUS_OK ||
        tm_amqp_channel(pc->conn, TM_AMQP_PCH_ADMIN, 0, eb, sizeof eb) != 0) {
        tm_snprintf(pc->errstr, sizeof pc->errstr, "%s", buf);
        *dead = 1;
    }
    return -1;
}

void tm_amqp_delay_name(const struct tm_cfg_task *t, int64_t ms, char *buf,
                        size_t size)
{
    level_name(t, "delay", ms, buf, size);
}

/* tm_amqp_delay_queue returns the name of task t's delay queue of level
 * ms, declaring it on first use on this connection (kept in pc->levels with
 * the retry queues; a declared_at of INT64_MAX marks it as never to be
 * declared again there, unless a copy found it deleted). NULL with the
 * reason in buf when it cannot be declared; *dead is set when the
 * connection failed. */
const char *tm_amqp_delay_queue(struct tm_amqp_publisher *pc,
                                const struct tm_cfg_task *t, int64_t ms,
                                char *buf, size_t size, int *dead)
{
    char name[TM_AMQP_SHORTSTR_MAX + 64];
    level_name(t, "delay", ms, name, sizeof name);
    struct tm_amqp_level *lv = level_find(pc, name);
    if (lv != NULL && lv->declared_at == INT64_MAX)
        return lv->name;
    /* new here, or TM_AMQP_LEVEL_STALE: a copy found it gone */
    if (delay_declare(pc, t, name, ms, buf, size, dead) != 0)
        return NULL;
    if (lv == NULL)
        lv = level_add(pc, name);
    lv->declared_at = INT64_MAX;
    return lv->name;
}
