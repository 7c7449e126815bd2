/* amqp/delayed.c - RabbitMQ delayed messages for operators: list, run
 * one now, delete one, on the CLI connection (admin.c).
 *
 * A delayed message waits in one of its task's delay queues (delay.c),
 * "Q.delay.<L>ms". Those are read as amqp/dlq.c reads a dead-letter
 * queue: basic.get without acknowledging, each queue from its head up to
 * its count at the start, and what is not taken given back in place with
 * one nack (requeue). A message got here is delivered to no one else
 * until it is acknowledged or given back, so of two calls on one id
 * (run-now and delete, or two of either) exactly one finds it; the other
 * answers that no such message waits. While a walk holds a queue's
 * messages they do not expire; given back, the due ones expire at once
 * and go on to the task queue as usual.
 *
 * Only the delay queues are read: a delayed message just published (to
 * the task queue, with x-not-before) is parked by the first daemon that
 * receives it, and until then it is not listed (docs/delivery.md). */
#include "amqp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* visit's answer: go on, stop here, or the message was taken (stop; it
 * was acknowledged by visit, not to be given back) */
enum { WALK_ON = 0, WALK_STOP = 1, WALK_TAKEN = 2 };

/* struct walk is one walk over a task's delay queues. */
struct walk {
    struct tm_amqp_broker *ab;
    const struct tm_cfg_task *t;
    int (*visit)(struct walk *w, const amqp_message_t *msg, uint64_t tag);
    void *arg;
};

/* level_count reads the count of delay queue name with a passive
 * declare: *count, or -1 when the queue does not exist (the channel,
 * closed by RabbitMQ for that, is opened again). 0, or -1 on a failure
 * (the connection is then closed). */
static int level_count(struct tm_amqp_broker *ab, const char *name,
                       long *count)
{
    char eb[256];
    amqp_queue_declare_ok_t *ok = sym_amqp_queue_declare(
        ab->cli, TM_AMQP_CLI_GET, sym_amqp_cstring_bytes(name),
        /* passive = */ 1, 0, 0, 0, TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(ab->cli);
    if (ok != NULL && r.reply_type == AMQP_RESPONSE_NORMAL) {
        *count = (long)ok->message_count;
        return 0;
    }
    *count = -1;
    if (tm_amqp_channel_error(r) && tm_amqp_reply_code(r) == 404 &&
        tm_amqp_channel_closed_ok(ab->cli, TM_AMQP_CLI_GET) ==
            AMQP_STATUS_OK &&
        tm_amqp_channel(ab->cli, TM_AMQP_CLI_GET, 0, eb, sizeof eb) == 0)
        return 0;
    tm_broker_set_error(&ab->base, EIO, "delay queue '%s': %s", name,
                        tm_amqp_strerror(r, eb, sizeof eb));
    tm_amqp_cli_lost(ab);
    return -1;
}

/* walk_level visits up to count messages of delay queue name, then gives
 * back every one not taken. Sets *stop when a visit ended the walk.
 * 0, or -1 on a failure (the connection is closed, which gives back what
 * it holds). */
static int walk_level(struct walk *w, const char *name, long count,
                      int *stop)
{
    struct tm_amqp_broker *ab = w->ab;
    char eb[256];
    uint64_t last = 0;
    for (long i = 0; i < count && !*stop; i++) {
        amqp_rpc_reply_t r = sym_amqp_basic_get(
            ab->cli, TM_AMQP_CLI_GET, sym_amqp_cstring_bytes(name),
            /* no_ack = */ 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_broker_set_error(&ab->base, EIO, "basic.get '%s': %s", name,
                                tm_amqp_strerror(r, eb, sizeof eb));
            tm_amqp_cli_lost(ab);
            return -1;
        }
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
            break;
        uint64_t tag = ((const amqp_basic_get_ok_t *)r.reply.decoded)
                           ->delivery_tag;
        amqp_message_t msg;
        r = sym_amqp_read_message(ab->cli, TM_AMQP_CLI_GET, &msg, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_broker_set_error(&ab->base, EIO, "reading from '%s': %s",
                                name, tm_amqp_strerror(r, eb, sizeof eb));
            tm_amqp_cli_lost(ab);
            return -1;
        }
        int v = w->visit(w, &msg, tag);
        sym_amqp_destroy_message(&msg);
        sym_amqp_maybe_release_buffers(ab->cli);
        if (v < 0)
            return -1;
        if (v != WALK_TAKEN)
            last = tag;
        *stop = v != WALK_ON;
    }
    if (last != 0 &&
        sym_amqp_basic_nack(ab->cli, TM_AMQP_CLI_GET, last,
                            /* multiple = */ 1,
                            /* requeue = */ 1) != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.nack on '%s' failed",
                            name);
        tm_amqp_cli_lost(ab);
        return -1;
    }
    return 0;
}

/* walk_all visits the messages of every delay queue of w->t, shortest
 * level first, until a visit stops it. 0, or -1. */
static int walk_all(struct walk *w)
{
    if (tm_amqp_cli_declare(w->ab, w->t) != 0)
        return -1;
    int stop = 0;
    int64_t ms;
    for (int k = 0; !stop && (ms = tm_amqp_delay_level_at(k)) > 0; k++) {
        char name[TM_AMQP_SHORTSTR_MAX + 64];
        long count = 0;
        tm_amqp_delay_name(w->t, ms, name, sizeof name);
        if (level_count(w->ab, name, &count) != 0)
            return -1;
        if (count > 0 && walk_level(w, name, count, &stop) != 0)
            return -1;
    }
    /* a round trip, so that the acks and nacks are through */
    sym_amqp_basic_qos(w->ab->cli, TM_AMQP_CLI_GET, 0, 0, 0);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(w->ab->cli);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_broker_set_error(&w->ab->base, EIO, "%s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_cli_lost(w->ab);
        return -1;
    }
    return 0;
}

/* msg_id is a delayed message's id: its message_id ("" for none). */
static char *msg_id(const amqp_message_t *msg)
{
    const amqp_basic_properties_t *p = &msg->properties;
    return (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
               ? tm_amqp_bytes_dup(p->message_id)
               : tm_strdup("");
}

/* msg_due is its x-not-before (0 when it has none). */
static int64_t msg_due(const amqp_message_t *msg)
{
    const amqp_basic_properties_t *p = &msg->properties;
    int64_t due = 0;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG) ||
        tm_amqp_not_before(&p->headers, &due) != 0)
        return 0;
    return due;
}

/* ---- the list: a first walk for the order, a second for the bodies -- */

/* struct keys is every delayed message's id and due time, as read */
struct keys {
    struct tm_delayed_entry *v; /* id and due_ms only, then the page */
    size_t k, cap;
    size_t want, found;         /* the second walk: the page's count */
    size_t body_max;
};

static int keys_visit(struct walk *w, const amqp_message_t *msg,
                      uint64_t tag)
{
    (void)tag;
    struct keys *a = w->arg;
    if (a->k == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = tm_realloc(a->v, a->cap * sizeof *a->v);
    }
    memset(&a->v[a->k], 0, sizeof a->v[a->k]);
    a->v[a->k].id = msg_id(msg);
    a->v[a->k].due_ms = msg_due(msg);
    a->k++;
    return WALK_ON;
}

static int by_due(const void *x, const void *y)
{
    const struct tm_delayed_entry *a = x, *b = y;
    if (a->due_ms != b->due_ms)
        return a->due_ms < b->due_ms ? -1 : 1;
    return strcmp(a->id, b->id);
}

/* body_visit gives each entry of the page whose id is the message's its
 * body (cut at body_max), and stops once every one has it. */
static int body_visit(struct walk *w, const amqp_message_t *msg,
                      uint64_t tag)
{
    (void)tag;
    struct keys *a = w->arg;
    char *id = msg_id(msg);
    for (size_t i = 0; i < a->k; i++) {
        struct tm_delayed_entry *e = &a->v[i];
        if (e->body != NULL || strcmp(e->id, id) != 0)
            continue;
        size_t keep = msg->body.len;
        e->body_len = keep;
        if (keep > a->body_max) {
            keep = tm_dlq_utf8_cut(msg->body.bytes, a->body_max);
            e->truncated = 1;
        }
        e->body = tm_strndup(msg->body.bytes, keep);
        e->due_ms = msg_due(msg);
        a->found++;
        break;
    }
    tm_free(id);
    return a->found >= a->want ? WALK_STOP : WALK_ON;
}

/*
 * tm_amqp_delayed_browse lists the delayed messages soonest first: a
 * first walk reads every delay queue for the ids and due times only (no
 * body is kept), the page is chosen from them (after q->after, q->max at
 * most), and a second walk reads the page's bodies, stopping once it has
 * them all. So what is kept is the ids of all and the bodies of one
 * page; a message taken or expired between the walks leaves the page
 * without it. The page's bytes are bounded by q->max bodies of at most
 * q->body_max bytes (the API bounds its answer further).
 */
int tm_amqp_delayed_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                           const struct tm_dlq_query *q,
                           struct tm_delayed_entry **out, size_t *n,
                           int *more)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    *out = NULL;
    *n = 0;
    *more = 0;
    struct keys a = {.body_max = q->body_max};
    struct walk w = {.ab = ab, .t = t, .visit = keys_visit, .arg = &a};
    if (walk_all(&w) != 0) {
        tm_delayed_entries_free(a.v, a.k);
        return -1;
    }
    if (a.k > 1)
        qsort(a.v, a.k, sizeof *a.v, by_due);
    size_t from = 0;
    if (q->after != NULL) {
        from = a.k; /* a cursor no longer there: an empty last page */
        for (size_t i = 0; i < a.k; i++)
            if (strcmp(a.v[i].id, q->after) == 0)
                from = i + 1;
    }
    size_t max = q->max > 0 ? q->max : 1;
    size_t take = a.k - from < max ? a.k - from : max;
    *more = from + take < a.k;
    /* keep the page only, at the front */
    for (size_t i = 0; i < a.k; i++) {
        if (i >= from && i < from + take)
            a.v[i - from] = a.v[i];
        else
            tm_free(a.v[i].id);
    }
    a.k = take;
    a.want = take;
    if (take > 0) {
        w.visit = body_visit;
        if (walk_all(&w) != 0) {
            for (size_t i = 0; i < a.k; i++)
                tm_free(a.v[i].body);
            tm_delayed_entries_free(a.v, a.k);
            return -1;
        }
    }
    /* the ones taken meanwhile drop out */
    size_t k = 0;
    for (size_t i = 0; i < a.k; i++) {
        if (a.v[i].body != NULL)
            a.v[k++] = a.v[i];
        else
            tm_free(a.v[i].id);
    }
    if (k == 0) {
        tm_free(a.v);
        a.v = NULL;
    }
    *out = a.v;
    *n = k;
    return 0;
}

/* ---- take one: run it now, or delete it ------------------------------- */

struct take {
    const char *id;
    int run_now;
    int took;
};

/* run_now publishes msg to the task queue as it would come back from its
 * delay queue, due now: its body, properties and headers, but
 * x-not-before (so that no daemon parks it again) and RabbitMQ's x-death.
 * 0 once confirmed, or -1. */
static int run_now(struct walk *w, const amqp_message_t *msg)
{
    const amqp_basic_properties_t *op = &msg->properties;
    amqp_basic_properties_t p = *op;
    const amqp_table_t *oh =
        (op->_flags & AMQP_BASIC_HEADERS_FLAG) ? &op->headers : NULL;
    int nh = oh != NULL ? oh->num_entries : 0, k = 0;
    amqp_table_entry_t *e = tm_calloc(nh > 0 ? (size_t)nh : 1, sizeof *e);
    for (int i = 0; i < nh; i++) {
        amqp_bytes_t key = oh->entries[i].key;
        if ((key.len == 12 && memcmp(key.bytes, "x-not-before", 12) == 0) ||
            (key.len == 7 && memcmp(key.bytes, "x-death", 7) == 0))
            continue;
        e[k++] = oh->entries[i];
    }
    p._flags &= ~(amqp_flags_t)AMQP_BASIC_EXPIRATION_FLAG;
    p._flags |= AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.headers.num_entries = k;
    p.headers.entries = e;
    int rc = tm_amqp_cli_publish(w->ab, w->t->queue, &p, msg->body.bytes,
                                 msg->body.len, NULL,
                                 tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS);
    tm_free(e);
    return rc;
}

static int take_visit(struct walk *w, const amqp_message_t *msg,
                      uint64_t tag)
{
    struct take *a = w->arg;
    char *id = msg_id(msg);
    int match = strcmp(id, a->id) == 0;
    tm_free(id);
    if (!match)
        return WALK_ON;
    /* not known to be published (no confirm in time): the connection
     * closes and gives the message back to its delay queue */
    if (a->run_now && run_now(w, msg) != 0) {
        if (w->ab->cli != NULL)
            tm_amqp_cli_lost(w->ab);
        return -1;
    }
    if (sym_amqp_basic_ack(w->ab->cli, TM_AMQP_CLI_GET, tag, 0) !=
        AMQP_STATUS_OK) {
        tm_broker_set_error(&w->ab->base, EIO, "basic.ack of delayed "
                            "message '%s' failed", a->id);
        tm_amqp_cli_lost(w->ab);
        return -1;
    }
    a->took = 1;
    return WALK_TAKEN;
}

int tm_amqp_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id, int run_now_)
{
    struct take a = {.id = id, .run_now = run_now_};
    struct walk w = {.ab = (struct tm_amqp_broker *)b, .t = t,
                     .visit = take_visit, .arg = &a};
    if (walk_all(&w) != 0)
        return -1;
    return a.took;
}
