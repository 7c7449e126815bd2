/* amqp/topology.c - RabbitMQ declarations: task, dead-letter, retry queues. */
#include "amqp.h"

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

/*
 * tm_amqp_declare declares, idempotently and durably, the task's topology on
 * channel ch: the shared dead-letter exchange, the task's dead-letter
 * queue bound to it by its own name, and the task queue, whose rejected
 * or expired messages go there (x-dead-letter-exchange) and which has
 * x-max-priority when configured. An existing queue or exchange with
 * other arguments makes the broker refuse (406 PRECONDITION_FAILED,
 * naming the argument); then *perm is set. Nothing is ever deleted.
 */
int tm_amqp_declare(amqp_connection_state_t c, amqp_channel_t ch,
                      const struct tm_cfg_task *t, char *buf, size_t size,
                      int *perm)
{
    char eb[300], what[300];
    amqp_rpc_reply_t r;
    *perm = 0;

    tm_snprintf(what, sizeof what, "exchange '%s'", TM_AMQP_DLX);
    amqp_exchange_declare(c, ch, amqp_cstring_bytes(TM_AMQP_DLX),
                          amqp_cstring_bytes("direct"), /* passive = */ 0,
                          /* durable = */ 1, /* auto_delete = */ 0,
                          /* internal = */ 0, amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "dead-letter queue '%s'", t->dead_letter);
    amqp_queue_declare(c, ch, amqp_cstring_bytes(t->dead_letter),
                       /* passive = */ 0, /* durable = */ 1,
                       /* exclusive = */ 0, /* auto_delete = */ 0,
                       amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    amqp_queue_bind(c, ch, amqp_cstring_bytes(t->dead_letter),
                    amqp_cstring_bytes(TM_AMQP_DLX),
                    amqp_cstring_bytes(t->dead_letter), amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "queue '%s'", t->queue);
    amqp_table_entry_t args[3];
    int n = 0;
    memset(args, 0, sizeof args);
    args[n].key = amqp_cstring_bytes("x-dead-letter-exchange");
    args[n].value.kind = AMQP_FIELD_KIND_UTF8;
    args[n++].value.value.bytes = amqp_cstring_bytes(TM_AMQP_DLX);
    args[n].key = amqp_cstring_bytes("x-dead-letter-routing-key");
    args[n].value.kind = AMQP_FIELD_KIND_UTF8;
    args[n++].value.value.bytes = amqp_cstring_bytes(t->dead_letter);
    if (t->max_priority > 0) {
        args[n].key = amqp_cstring_bytes("x-max-priority");
        args[n].value.kind = AMQP_FIELD_KIND_I32;
        args[n++].value.value.i32 = t->max_priority;
    }
    amqp_table_t at = {.num_entries = n, .entries = args};
    amqp_queue_declare(c, ch, amqp_cstring_bytes(t->queue), 0, 1, 0, 0, at);
    r = amqp_get_rpc_reply(c);
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

/* tm_amqp_retry_queue returns the name of task t's retry queue for a
 * delay of ms, declaring it on the publishing connection on first use
 * there: messages wait in it (per-message expiration) and then
 * dead-letter back, through the default exchange, to the task queue.
 * NULL with the reason in buf when it cannot be declared; *dead is set
 * when the connection failed (pc->errstr). */
const char *tm_amqp_retry_queue(struct tm_amqp_publisher *pc,
                                const struct tm_cfg_task *t, int64_t ms,
                                char *buf, size_t size, int *dead)
{
    char name[TM_AMQP_SHORTSTR_MAX + 64], eb[256];
    tm_snprintf(name, sizeof name, "%s.retry.%lldms", t->queue,
                (long long)ms);
    if (strlen(name) > TM_AMQP_SHORTSTR_MAX)
        tm_snprintf(name, sizeof name, "%.200s.%016llx.retry.%lldms",
                    t->queue,
                    (unsigned long long)tm_amqp_fnv64(
                        t->queue, strlen(t->queue), TM_AMQP_FNV64_INIT),
                    (long long)ms);
    for (size_t i = 0; i < pc->nlevels; i++)
        if (strcmp(pc->levels[i].name, name) == 0)
            return pc->levels[i].name;
    amqp_table_entry_t args[2];
    memset(args, 0, sizeof args);
    args[0].key = amqp_cstring_bytes("x-dead-letter-exchange");
    args[0].value.kind = AMQP_FIELD_KIND_UTF8;
    args[0].value.value.bytes = amqp_cstring_bytes("");
    args[1].key = amqp_cstring_bytes("x-dead-letter-routing-key");
    args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    args[1].value.value.bytes = amqp_cstring_bytes(t->queue);
    amqp_table_t tbl = {.num_entries = 2, .entries = args};
    amqp_queue_declare(pc->conn, TM_AMQP_PCH_ADMIN, amqp_cstring_bytes(name),
                       /* passive = */ 0, /* durable = */ 1,
                       /* exclusive = */ 0, /* auto_delete = */ 0, tbl);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(pc->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "retry queue '%s' cannot be declared: %s",
                    name, tm_amqp_strerror(r, eb, sizeof eb));
        if (!tm_amqp_channel_error(r) ||
            tm_amqp_channel_closed_ok(pc->conn, TM_AMQP_PCH_ADMIN) !=
                AMQP_STATUS_OK ||
            tm_amqp_channel(pc->conn, TM_AMQP_PCH_ADMIN, 0, eb,
                            sizeof eb) != 0) {
            tm_snprintf(pc->errstr, sizeof pc->errstr, "%s", buf);
            *dead = 1;
        }
        return NULL;
    }
    if (pc->nlevels == pc->caplevels) {
        pc->caplevels = pc->caplevels ? pc->caplevels * 2 : 8;
        pc->levels = tm_realloc(pc->levels,
                                pc->caplevels * sizeof *pc->levels);
    }
    pc->levels[pc->nlevels].name = tm_strdup(name);
    return pc->levels[pc->nlevels++].name;
}
