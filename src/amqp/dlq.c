/* amqp/dlq.c - RabbitMQ dead-letter queues for the CLI and the API: list
 * and browse (basic.get, unacknowledged, given back), replay to the task
 * queue and purge, one message by id or all, on the CLI connection
 * (admin.c). */
#include "amqp.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* struct dlq_msg is one dead letter read with basic.get (unacked). */
struct dlq_msg {
    uint64_t tag;
    amqp_message_t msg;
};

/* dlq_get reads the next dead letter without acknowledging it. Returns
 * 1 with *out filled, 0 when the queue has no more, -1 on error; *left
 * is the broker's count of messages behind it. */
static int dlq_get(struct tm_amqp_broker *ab, const struct tm_cfg_task *t,
                   struct dlq_msg *out, long *left)
{
    char eb[256];
    amqp_rpc_reply_t r = sym_amqp_basic_get(ab->cli, TM_AMQP_CLI_GET,
                                        sym_amqp_cstring_bytes(t->dead_letter),
                                        /* no_ack = */ 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(&ab->base, EIO, "basic.get '%s': %s",
                            t->dead_letter,
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
        return 0;
    const amqp_basic_get_ok_t *ok = r.reply.decoded;
    out->tag = ok->delivery_tag;
    *left = (long)ok->message_count;
    r = sym_amqp_read_message(ab->cli, TM_AMQP_CLI_GET, &out->msg, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(&ab->base, EIO, "reading from '%s': %s",
                            t->dead_letter,
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    return 1;
}

/* dlq_id is a dead letter's id: its message_id, or a hash of its body
 * and headers for one that has none (dead-lettered by someone else). */
static char *dlq_id(const amqp_message_t *msg)
{
    const amqp_basic_properties_t *p = &msg->properties;
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len > 0)
        return tm_amqp_bytes_dup(p->message_id);
    uint64_t h =
        tm_amqp_fnv64(msg->body.bytes, msg->body.len, TM_AMQP_FNV64_INIT);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        h = tm_amqp_fnv64(&p->timestamp, sizeof p->timestamp, h);
    return tm_asprintf("h-%016llx", (unsigned long long)h);
}

/* last_death returns the newest entry of a message's x-death header (the
 * broker's own dead-lettering, newest first), or NULL. */
static const amqp_table_t *last_death(const amqp_table_t *h)
{
    const amqp_field_value_t *death = tm_amqp_table_get(h, "x-death");
    if (death == NULL || death->kind != AMQP_FIELD_KIND_ARRAY ||
        death->value.array.num_entries == 0 ||
        death->value.array.entries[0].kind != AMQP_FIELD_KIND_TABLE)
        return NULL;
    return &death->value.array.entries[0].value.table;
}

/* broker_death_error describes a dead letter that RabbitMQ moved itself
 * (no x-error header). The daemon rejects a message whose body exceeds
 * max_payload without reading it (see delivery.c), so a message rejected
 * from the task queue with a body over the task's max_payload is named
 * as such; the rest is told by x-death. Returns a new string. */
static char *broker_death_error(const struct tm_cfg_task *t,
                                const amqp_message_t *msg,
                                const amqp_table_t *h)
{
    const amqp_table_t *last = last_death(h);
    char *why = tm_amqp_field_str(tm_amqp_table_get(last, "reason"));
    char *from = tm_amqp_field_str(tm_amqp_table_get(last, "queue"));
    char *e;
    if (why == NULL) {
        tm_free(from);
        why = tm_amqp_field_str(
            tm_amqp_table_get(h, "x-first-death-reason"));
        from = tm_amqp_field_str(
            tm_amqp_table_get(h, "x-first-death-queue"));
    }
    if (why != NULL && from != NULL && strcmp(why, "rejected") == 0 &&
        strcmp(from, t->queue) == 0 && msg->body.len > t->max_payload)
        e = tm_asprintf("invalid: body of %zu bytes exceeds max_payload "
                        "(%zu bytes)", msg->body.len, t->max_payload);
    else
        e = tm_asprintf("dead-lettered by RabbitMQ (%s in '%s')",
                        why ? why : "unknown reason", from ? from : "?");
    tm_free(why);
    tm_free(from);
    return e;
}

/* dlq_fill makes the entry of a dead letter of task t; a body or error
 * over body_max bytes is cut there (at a UTF-8 boundary) and the entry
 * flagged truncated, so that no more of it is kept. */
static void dlq_fill(const struct tm_cfg_task *t, const amqp_message_t *msg,
                     struct tm_dlq_entry *e, size_t body_max)
{
    const amqp_basic_properties_t *p = &msg->properties;
    const amqp_table_t *h = (p->_flags & AMQP_BASIC_HEADERS_FLAG)
                                ? &p->headers
                                : NULL;
    long long x;
    memset(e, 0, sizeof *e);
    e->id = dlq_id(msg);
    e->origin_id = tm_amqp_field_str(tm_amqp_table_get(h, "x-origin-id"));
    if (e->origin_id == NULL && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
        e->origin_id = tm_amqp_bytes_dup(p->message_id);
    e->task = tm_amqp_field_str(tm_amqp_table_get(h, "x-task"));
    e->error = tm_amqp_field_str(tm_amqp_table_get(h, "x-error"));
    e->attempts =
        tm_amqp_field_int(tm_amqp_table_get(h, "x-attempts"), &x) == 0
            ? (long)x
            : 0;
    if (e->error == NULL) {
        /* dead-lettered by RabbitMQ itself (x-dead-letter-exchange) */
        e->error = broker_death_error(t, msg, h);
        if (strncmp(e->error, "invalid:", 8) == 0) {
            e->attempts = 0; /* never run */
            if (e->task == NULL)
                e->task = tm_strdup(t->name);
        }
    }
    if (tm_amqp_field_int(tm_amqp_table_get(h, "x-failed-at"), &x) == 0) {
        e->failed_at = x;
    } else {
        const amqp_table_t *last = last_death(h);
        if (last != NULL &&
            tm_amqp_field_int(tm_amqp_table_get(last, "time"), &x) == 0)
            e->failed_at = x * 1000;
        else if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
            e->failed_at = (int64_t)p->timestamp * 1000;
    }
    e->body_len = msg->body.len;
    size_t keep = msg->body.len;
    if (keep > body_max) {
        keep = tm_dlq_utf8_cut(msg->body.bytes, body_max);
        e->truncated = 1;
    }
    e->body = tm_strndup(msg->body.bytes, keep);
    if (e->error != NULL && strlen(e->error) > body_max) {
        e->error[tm_dlq_utf8_cut(e->error, body_max)] = '\0';
        e->truncated = 1;
    }
}

/*
 * dlq_each browses t's dead-letter queue from its head: every message is
 * read unacknowledged and passed to visit, then all are given back
 * (nack, requeue) to their places with one nack. visit returns 1 to end
 * the walk after that message, 0 to go on. The broker's count at the
 * first read bounds the walk when dead letters keep arriving. Returns 0,
 * or -1 when a read or the nack failed (the connection is then closed,
 * which gives back what it holds).
 */
static int dlq_each(struct tm_amqp_broker *ab, const struct tm_cfg_task *t,
                    int (*visit)(const struct tm_cfg_task *t,
                                 const amqp_message_t *msg, void *arg),
                    void *arg)
{
    uint64_t last = 0;
    long budget = -1;
    int rc = 0;
    while (budget != 0) {
        struct dlq_msg dm;
        long left = 0;
        int got = dlq_get(ab, t, &dm, &left);
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got == 0)
            break;
        if (budget < 0)
            budget = left + 1;
        budget--;
        last = dm.tag;
        int stop = visit(t, &dm.msg, arg);
        sym_amqp_destroy_message(&dm.msg);
        sym_amqp_maybe_release_buffers(ab->cli);
        if (stop)
            break;
    }
    if (rc == 0 && last != 0 &&
        sym_amqp_basic_nack(ab->cli, TM_AMQP_CLI_GET, last, /* multiple = */ 1,
                            /* requeue = */ 1) != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.nack on '%s' failed",
                            t->dead_letter);
        /* closing the connection gives back what it holds */
        tm_amqp_cli_lost(ab);
        rc = -1;
    }
    return rc;
}

/* the entries tm_amqp_dlq_list collects, oldest first */
struct list_acc {
    struct tm_dlq_entry *v;
    size_t k, cap, max;
};

static int list_visit(const struct tm_cfg_task *t, const amqp_message_t *msg,
                      void *arg)
{
    struct list_acc *a = arg;
    if (a->k == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = tm_realloc(a->v, a->cap * sizeof *a->v);
    }
    dlq_fill(t, msg, &a->v[a->k++], SIZE_MAX);
    return a->k >= a->max;
}

int tm_amqp_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    *out = NULL;
    *n = 0;
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    if (max == 0)
        return 0;
    struct list_acc a = {.max = max};
    if (dlq_each(ab, t, list_visit, &a) != 0) {
        tm_dlq_entries_free(a.v, a.k);
        return -1;
    }
    struct tm_dlq_entry *v = a.v;
    size_t k = a.k;
    /* newest first */
    for (size_t i = 0; i < k / 2; i++) {
        struct tm_dlq_entry x = v[i];
        v[i] = v[k - 1 - i];
        v[k - 1 - i] = x;
    }
    *out = v;
    *n = k;
    return 0;
}

/* the window tm_amqp_dlq_browse keeps: ring[(head + i) % cap] for
 * i < k, oldest first; bytes counts their bodies and errors */
struct browse_acc {
    const struct tm_dlq_query *q;
    size_t body_max;
    struct tm_dlq_entry *ring;
    size_t cap, head, k, bytes;
    int dropped;
};

static size_t entry_bytes(const struct tm_dlq_entry *e)
{
    return strlen(e->body) + (e->error != NULL ? strlen(e->error) : 0);
}

/* dlq_match says whether f (NULL: any) matches the dead letter msg of
 * t, on its whole body and error. */
static int dlq_match(const struct tm_cfg_task *t, const amqp_message_t *msg,
                     const struct tm_dlq_filter *f)
{
    if (!tm_dlq_filter_set(f))
        return 1;
    struct tm_dlq_entry e;
    dlq_fill(t, msg, &e, SIZE_MAX);
    int m = tm_dlq_filter_match(f, e.error, msg->body.bytes, msg->body.len,
                                e.failed_at);
    tm_dlq_entries_free_one(&e);
    return m;
}

static int browse_visit(const struct tm_cfg_task *t, const amqp_message_t *msg,
                        void *arg)
{
    struct browse_acc *a = arg;
    const struct tm_dlq_query *q = a->q;
    char *mid = dlq_id(msg);
    int stop = q->id != NULL ? strcmp(mid, q->id) == 0
                             : q->after != NULL && strcmp(mid, q->after) == 0;
    int keep = q->id != NULL ? stop : !stop && dlq_match(t, msg, q->filter);
    tm_free(mid);
    if (!keep)
        return stop;
    struct tm_dlq_entry e;
    dlq_fill(t, msg, &e, a->body_max);
    size_t cost = entry_bytes(&e);
    while (a->k > 0 && (a->k == a->cap || a->bytes + cost > q->bytes_max)) {
        struct tm_dlq_entry *old = &a->ring[a->head];
        a->bytes -= entry_bytes(old);
        tm_dlq_entries_free_one(old);
        a->head = (a->head + 1) % a->cap;
        a->k--;
        a->dropped = 1;
    }
    a->ring[(a->head + a->k) % a->cap] = e;
    a->k++;
    a->bytes += cost;
    return stop;
}

/*
 * tm_amqp_dlq_browse pages a dead-letter queue, newest first, although
 * the queue gives its oldest first: it browses from the head (every
 * message read unacknowledged, then all given back in place with one
 * nack: dlq_each) up to q->after (exclusive) or the queue's end, and
 * keeps only a window of the newest entries read so far: at most q->max,
 * bodies cut at q->body_max, at most q->bytes_max bytes, older ones
 * dropped as newer ones come. So what is kept is bounded by the page,
 * whatever the queue holds; what is read is the queue up to the cursor,
 * one message at a time. The count at the first read bounds the walk
 * when dead letters keep arriving. With q->id, the walk stops at that
 * entry and keeps its body whole.
 */
int tm_amqp_dlq_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                       const struct tm_dlq_query *q,
                       struct tm_dlq_entry **out, size_t *n, int *more)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    *out = NULL;
    *n = 0;
    *more = 0;
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    struct browse_acc a = {
        .q = q,
        .cap = q->id != NULL || q->max == 0 ? 1 : q->max,
        .body_max = q->id != NULL ? SIZE_MAX : q->body_max,
    };
    a.ring = tm_calloc(a.cap, sizeof *a.ring);
    int rc = dlq_each(ab, t, browse_visit, &a);
    size_t k = a.k;
    struct tm_dlq_entry *v = k > 0 ? tm_calloc(k, sizeof *v) : NULL;
    /* newest first */
    for (size_t i = 0; i < k; i++)
        v[i] = a.ring[(a.head + k - 1 - i) % a.cap];
    tm_free(a.ring);
    if (rc != 0) {
        tm_dlq_entries_free(v, k);
        return -1;
    }
    *out = v;
    *n = k;
    *more = q->id == NULL && a.dropped;
    return 0;
}

/* dlq_walk visits the dead letters, oldest first, in one pass: each one
 * matching id (when id is NULL: each one f matches, all for f NULL) is
 * replayed to the task queue (replay) or
 * dropped, then acknowledged; the others go back where they were.
 * Returns the count handled, or -1. Concurrent walks (other CLI
 * processes, the API of other daemons) never handle one message twice:
 * a message got here is unacknowledged, delivered to no one else until
 * it is acknowledged (replayed or dropped) or given back; a walk by id
 * that does not find its message (another walk holds it) handles
 * nothing. A failure gives back every message held (the connection is
 * closed): a replayed message is acknowledged on the channel its next
 * basic.get goes on, so only one whose publish confirm or ack is not
 * known to have reached RabbitMQ (no confirm in time, a connection lost
 * meanwhile) can come back and be replayed again: at least once, never
 * lost. */
static long dlq_walk(struct tm_amqp_broker *ab, const struct tm_cfg_task *t,
                     const char *id, const struct tm_dlq_filter *f,
                     int replay)
{
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    long done = 0, budget = -1;
    uint64_t kept = 0;
    int rc = 0;
    while (budget != 0) {
        struct dlq_msg dm;
        long left = 0;
        int got = dlq_get(ab, t, &dm, &left);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        if (budget < 0)
            budget = left + 1;
        budget--;
        char *mid = dlq_id(&dm.msg);
        int match = id != NULL ? strcmp(mid, id) == 0
                               : dlq_match(t, &dm.msg, f);
        tm_free(mid);
        if (!match) {
            kept = dm.tag;
            sym_amqp_destroy_message(&dm.msg);
            continue;
        }
        if (replay) {
            /* the original message again: its id, body and properties,
             * without the failure headers, attempts starting over */
            const amqp_basic_properties_t *op = &dm.msg.properties;
            const amqp_table_t *oh = (op->_flags & AMQP_BASIC_HEADERS_FLAG)
                                         ? &op->headers
                                         : NULL;
            char *origin =
                tm_amqp_field_str(tm_amqp_table_get(oh, "x-origin-id"));
            char fresh[40];
            if (origin == NULL || origin[0] == '\0') {
                tm_free(origin);
                tm_uuid4(fresh, sizeof fresh);
                origin = tm_strdup(fresh);
            }
            amqp_basic_properties_t p = *op;
            p._flags &= ~(amqp_flags_t)(AMQP_BASIC_EXPIRATION_FLAG |
                                        AMQP_BASIC_USER_ID_FLAG);
            p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG |
                        AMQP_BASIC_HEADERS_FLAG |
                        AMQP_BASIC_DELIVERY_MODE_FLAG;
            p.message_id = sym_amqp_cstring_bytes(origin);
            p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
            struct tm_amqp_hdrs h = {0};
            tm_amqp_hdr_user(&h, oh);
            p.headers = tm_amqp_hdr_table(&h);
            rc = tm_amqp_cli_publish(ab, t->queue, &p, dm.msg.body.bytes,
                                     dm.msg.body.len, NULL,
                                     tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS);
            tm_free(h.e);
            tm_free(origin);
            if (rc != 0) {
                /* not replayed, or not known to be (no confirm in
                 * time): this one and the ones held back go back to
                 * the dead-letter queue now, not when the broker object
                 * is destroyed */
                sym_amqp_destroy_message(&dm.msg);
                if (ab->cli != NULL)
                    tm_amqp_cli_lost(ab);
                return -1;
            }
        }
        sym_amqp_destroy_message(&dm.msg);
        if (sym_amqp_basic_ack(ab->cli, TM_AMQP_CLI_GET, dm.tag, 0) !=
            AMQP_STATUS_OK) {
            tm_broker_set_error(&ab->base, EIO, "basic.ack on '%s' failed",
                                t->dead_letter);
            tm_amqp_cli_lost(ab);
            return -1;
        }
        done++;
        sym_amqp_maybe_release_buffers(ab->cli);
        if (id != NULL)
            break;
    }
    if (kept != 0 && sym_amqp_basic_nack(ab->cli, TM_AMQP_CLI_GET, kept,
                                         /* multiple = */ 1,
                                         /* requeue = */ 1) != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.nack on '%s' failed",
                            t->dead_letter);
        tm_amqp_cli_lost(ab);
        return -1;
    }
    /* a round trip, so that the acks are through before the exit */
    sym_amqp_basic_qos(ab->cli, TM_AMQP_CLI_GET, 0, 0, 0);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(ab->cli);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_broker_set_error(&ab->base, EIO, "%s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    return done;
}

long tm_amqp_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, const struct tm_dlq_filter *f)
{
    return dlq_walk((struct tm_amqp_broker *)b, t, id, f, 1);
}

long tm_amqp_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id, const struct tm_dlq_filter *f)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    if (id != NULL || tm_dlq_filter_set(f))
        return dlq_walk(ab, t, id, f, 0);
    if (tm_amqp_cli_declare(ab, t) != 0)
        return -1;
    amqp_queue_purge_ok_t *ok = sym_amqp_queue_purge(
        ab->cli, TM_AMQP_CLI_GET, sym_amqp_cstring_bytes(t->dead_letter));
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(ab->cli);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_broker_set_error(b, EIO, "queue.purge '%s': %s", t->dead_letter,
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(ab);
        return -1;
    }
    return (long)ok->message_count;
}
