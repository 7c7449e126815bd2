/* schedule.c - RabbitMQ side of periodic schedules: a leader per
 * schedule, elected by the broker, publishes each slot once.
 *
 * Each schedule has a lock queue "taskmill.schedule.<name>" (durable,
 * classic, x-single-active-consumer) that holds one message, the state:
 * the last slot fired ("-1": none yet). Every daemon with the schedule
 * consumes it with manual acks; RabbitMQ delivers to one consumer only,
 * the active one, which keeps the state message unacknowledged: holding
 * it is leading. When the leader's connection ends (stop, crash, lost
 * node) the broker requeues the state and delivers it to the next
 * consumer, which then knows the last slot fired and leads.
 *
 * The leader fires slot S in one AMQP transaction on its consuming
 * channel: the task message (message_id "<name>:<S>", headers x-schedule,
 * x-slot and x-dedup-key "schedule:<name>:<S>"), the new state S to the
 * lock queue, S to the last-value queue "taskmill.schedule.<name>.last"
 * (x-max-length 1: the newest only, for `taskmill schedules` and the
 * API), and the ack of the old state. A leader killed before tx.commit changed nothing; after it, all
 * of it took place. So the next leader never fires a slot the old one
 * fired, and never misses one the old one did not.
 *
 * Limits: atomicity across queues holds against a daemon's death, not
 * against a broker node's crash in the middle of the commit (RabbitMQ's
 * transactions are atomic per queue); the lock and last-value queues are
 * classic queues on one node, so losing that node stops firing until it
 * is back (declared again on the next connection).
 */
#include "amqp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "schedule/schedule.h"
#include "util/util.h"

#define SRC TM_AMQP_SRC

/* Channels of a schedule session's connection. */
enum {
    TM_AMQP_SCH_LEAD = 1, /* tx mode: lock consumers, fires */
    TM_AMQP_SCH_ADMIN = 2 /* declarations, reads of the last slot */
};

/* How long a new session waits for the states of the schedules it may
 * lead before it fires anything (a queue's state comes at once to the
 * first consumer), and how long a leader waits for its own new state to
 * come back after a fire. */
#define TM_AMQP_SCH_SETTLE_MS 1000
#define TM_AMQP_SCH_RETURN_MS 3000

#define TM_AMQP_SCH_PREFIX "taskmill.schedule."

/* struct lock is one schedule's election on this connection. */
struct lock {
    const struct tm_cfg_schedule *s;
    char queue[TM_AMQP_SHORTSTR_MAX + 1];  /* lock queue */
    char lastq[TM_AMQP_SHORTSTR_MAX + 1];  /* last-value queue */
    char tag[TM_AMQP_SHORTSTR_MAX + 1];    /* our consumer tag */
    int leader;       /* a state came to us: we lead until we close */
    uint64_t held;    /* delivery tag of the state we hold, 0: none (our
                         own new state is on its way back) */
    int64_t last;     /* the last slot fired, per the state; -1 none */
};

struct tm_amqp_sched {
    struct tm_sched_session base;
    struct tm_amqp_broker *ab;
    amqp_connection_state_t c;
    int fire;
    struct lock *locks;
    size_t n;
};

static struct tm_amqp_broker *ab_of(struct tm_amqp_sched *as)
{
    return as->ab;
}

/* fail records why the session broke; returns -1. */
static int fail(struct tm_amqp_sched *as, const char *what,
                amqp_rpc_reply_t r)
{
    char eb[300];
    tm_sched_session_error(&as->base, "schedules: %s: %s", what,
                           tm_amqp_strerror(r, eb, sizeof eb));
    return -1;
}

static struct lock *lock_of(struct tm_amqp_sched *as,
                            const struct tm_cfg_schedule *s)
{
    for (size_t i = 0; i < as->n; i++)
        if (as->locks[i].s == s)
            return &as->locks[i];
    return NULL;
}

/* parse_slot reads a state body: a slot, or -1. */
static int64_t parse_slot(amqp_bytes_t b)
{
    char buf[32];
    if (b.len == 0 || b.len >= sizeof buf)
        return -1;
    memcpy(buf, b.bytes, b.len);
    buf[b.len] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    return errno == 0 && *end == '\0' && v >= 0 ? v : -1;
}

/* commit ends the channel's transaction. */
static int commit(struct tm_amqp_sched *as)
{
    sym_amqp_tx_commit(as->c, TM_AMQP_SCH_LEAD);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(as->c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return fail(as, "tx.commit", r);
    return 0;
}

/* publish_state publishes slot (or -1) as a state to queue, within the
 * channel's transaction. */
static int publish_state(struct tm_amqp_sched *as, const char *queue,
                         int64_t slot)
{
    char body[32];
    tm_snprintf(body, sizeof body, "%lld", (long long)slot);
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
    p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p.content_type = sym_amqp_cstring_bytes("text/plain");
    int rc = sym_amqp_basic_publish(as->c, TM_AMQP_SCH_LEAD,
                                    TM_AMQP_EMPTY_BYTES,
                                    sym_amqp_cstring_bytes(queue), 0, 0, &p,
                                    sym_amqp_cstring_bytes(body));
    if (rc != AMQP_STATUS_OK) {
        tm_sched_session_error(&as->base, "schedules: publish to '%s': %s",
                               queue, sym_amqp_error_string2(rc));
        return -1;
    }
    return 0;
}

/*
 * take_state handles a state delivered to us: we lead the schedule. Two
 * states can meet only after several daemons declared a new lock queue
 * at once (each published a "-1"), or after a crash between publishing
 * and acking at a node failure: the greater slot is kept, the other
 * acknowledged (dropped).
 */
static int take_state(struct tm_amqp_sched *as, struct lock *l,
                      uint64_t tag, int64_t slot)
{
    uint64_t drop = 0;
    if (!l->leader)
        tm_log_info(SRC, "schedule '%s': this daemon leads it now (last "
                    "slot fired: %lld)", l->s->name, (long long)slot);
    l->leader = 1;
    if (l->held == 0 || slot > l->last) {
        drop = l->held;
        l->held = tag;
        if (slot > l->last)
            l->last = slot;
    } else {
        drop = tag;
    }
    if (drop == 0)
        return 0;
    if (sym_amqp_basic_ack(as->c, TM_AMQP_SCH_LEAD, drop, 0) !=
        AMQP_STATUS_OK) {
        tm_sched_session_error(&as->base, "schedules: ack failed");
        return -1;
    }
    return commit(as);
}

/* serve reads what the broker sends for up to ms (0: only what is
 * there): states delivered to us. -1 when the connection or channel
 * ended. */
static int serve(struct tm_amqp_sched *as, int64_t ms)
{
    int64_t until = tm_now_ms() + ms;
    for (;;) {
        int64_t left = until - tm_now_ms();
        struct timeval tv = tm_amqp_tv_ms(left > 0 ? left : 0);
        amqp_envelope_t env;
        sym_amqp_maybe_release_buffers(as->c);
        amqp_rpc_reply_t r = sym_amqp_consume_message(as->c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            struct lock *l = NULL;
            for (size_t i = 0; i < as->n && l == NULL; i++)
                if (env.consumer_tag.len == strlen(as->locks[i].tag) &&
                    memcmp(env.consumer_tag.bytes, as->locks[i].tag,
                           env.consumer_tag.len) == 0)
                    l = &as->locks[i];
            int rc = 0;
            if (l != NULL)
                rc = take_state(as, l, env.delivery_tag,
                                parse_slot(env.message.body));
            sym_amqp_destroy_envelope(&env);
            if (rc != 0)
                return -1;
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            return 0;
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            /* a frame other than a delivery: closes end the session, a
             * cancelled consumer (its queue deleted) too */
            char what[128];
            if (tm_amqp_frame_ends(as->c, what, sizeof what)) {
                tm_sched_session_error(
                    &as->base, "schedules: the broker sent %s", what);
                return -1;
            }
            continue;
        }
        return fail(as, "reading", r);
    }
}

/* declare_locks declares, for each schedule, its task's topology, its
 * lock queue and its last-value queue, and with fire set consumes the
 * lock queue; a lock queue nobody uses and that holds nothing gets a
 * first state, "-1". */
static int declare_locks(struct tm_amqp_sched *as)
{
    struct tm_amqp_broker *ab = ab_of(as);
    char eb[300], what[300];
    for (size_t i = 0; i < as->n; i++) {
        struct lock *l = &as->locks[i];
        const struct tm_cfg_task *t = tm_cfg_find_task(ab->base.cfg,
                                                       l->s->task);
        int perm = 0;
        if (t != NULL && as->fire &&
            tm_amqp_declare(as->c, TM_AMQP_SCH_ADMIN, ab, t, eb, sizeof eb,
                            &perm) != 0) {
            (void)perm; /* refused or not, the session cannot go on */
            tm_sched_session_error(&as->base, "schedules: %s", eb);
            return -1;
        }
        amqp_table_entry_t e;
        memset(&e, 0, sizeof e);
        e.key = sym_amqp_cstring_bytes("x-max-length");
        e.value.kind = AMQP_FIELD_KIND_I64;
        e.value.value.i64 = 1;
        amqp_table_t targs = {.num_entries = 1, .entries = &e};
        sym_amqp_queue_declare(as->c, TM_AMQP_SCH_ADMIN,
                           sym_amqp_cstring_bytes(l->lastq), 0, 1, 0, 0, targs);
        amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(as->c);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(what, sizeof what, "declaring '%s'", l->lastq);
            return fail(as, what, r);
        }
        if (!as->fire)
            continue;
        e.key = sym_amqp_cstring_bytes("x-single-active-consumer");
        e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
        e.value.value.boolean = 1;
        amqp_queue_declare_ok_t *ok = sym_amqp_queue_declare(
            as->c, TM_AMQP_SCH_ADMIN, sym_amqp_cstring_bytes(l->queue), 0, 1, 0,
            0, targs);
        r = sym_amqp_get_rpc_reply(as->c);
        if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(what, sizeof what, "declaring '%s'", l->queue);
            return fail(as, what, r);
        }
        if (ok->message_count == 0 && ok->consumer_count == 0) {
            if (publish_state(as, l->queue, -1) != 0 || commit(as) != 0)
                return -1;
        }
        amqp_basic_consume_ok_t *cok = sym_amqp_basic_consume(
            as->c, TM_AMQP_SCH_LEAD, sym_amqp_cstring_bytes(l->queue),
            TM_AMQP_EMPTY_BYTES, 0, /* no_ack = */ 0, /* exclusive = */ 0,
            TM_AMQP_EMPTY_TABLE);
        r = sym_amqp_get_rpc_reply(as->c);
        if (cok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(what, sizeof what, "consuming '%s'", l->queue);
            return fail(as, what, r);
        }
        size_t n = cok->consumer_tag.len < sizeof l->tag
                       ? cok->consumer_tag.len
                       : sizeof l->tag - 1;
        memcpy(l->tag, cok->consumer_tag.bytes, n);
        l->tag[n] = '\0';
    }
    return 0;
}

void tm_amqp_sched_close(struct tm_sched_session *ss)
{
    if (ss == NULL)
        return;
    struct tm_amqp_sched *as = (struct tm_amqp_sched *)ss;
    /* the states we hold go back to the lock queues, for the next
     * leader */
    tm_amqp_close(as->c);
    tm_free(as->locks);
    tm_free(as);
}

struct tm_sched_session *tm_amqp_sched_open(struct tm_broker *b, int fire,
                                            char *err, size_t errlen)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    const struct tm_cfg *cfg = b->cfg;
    char eb[512];
    struct tm_amqp_sched *as = tm_calloc(1, sizeof *as);
    as->base.b = b;
    as->ab = ab;
    as->fire = fire;
    as->n = cfg->nschedules;
    as->locks = tm_calloc(as->n ? as->n : 1, sizeof *as->locks);
    for (size_t i = 0; i < as->n; i++) {
        struct lock *l = &as->locks[i];
        l->s = &cfg->schedules[i];
        l->last = -1;
        tm_snprintf(l->queue, sizeof l->queue, TM_AMQP_SCH_PREFIX "%s",
                    l->s->name);
        tm_snprintf(l->lastq, sizeof l->lastq, TM_AMQP_SCH_PREFIX "%s.last",
                    l->s->name);
    }
    as->c = tm_amqp_open(ab, fire ? "schedules" : "schedules-read",
                         tm_amqp_heartbeat_s(ab), NULL, eb, sizeof eb);
    if (as->c == NULL) {
        tm_sched_session_error(&as->base, "%s", eb);
        goto fail;
    }
    if (tm_amqp_channel(as->c, TM_AMQP_SCH_LEAD, 0, eb, sizeof eb) != 0 ||
        tm_amqp_channel(as->c, TM_AMQP_SCH_ADMIN, 0, eb, sizeof eb) != 0) {
        tm_sched_session_error(&as->base, "schedules: %s", eb);
        goto fail;
    }
    if (fire) {
        sym_amqp_tx_select(as->c, TM_AMQP_SCH_LEAD);
        amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(as->c);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            fail(as, "tx.select", r);
            goto fail;
        }
    }
    if (declare_locks(as) != 0)
        goto fail;
    /* the states of the schedules no one leads come at once */
    if (fire && serve(as, TM_AMQP_SCH_SETTLE_MS) != 0)
        goto fail;
    return &as->base;
fail:
    tm_snprintf(err, errlen, "%s", as->base.errstr);
    tm_amqp_sched_close(&as->base);
    return NULL;
}

int tm_amqp_sched_serve(struct tm_sched_session *ss, int64_t timeout_ms)
{
    return serve((struct tm_amqp_sched *)ss, timeout_ms);
}

int tm_amqp_sched_last(struct tm_sched_session *ss,
                       const struct tm_cfg_schedule *s, int64_t *slot_ms)
{
    struct tm_amqp_sched *as = (struct tm_amqp_sched *)ss;
    struct lock *l = lock_of(as, s);
    char what[300];
    *slot_ms = -1;
    if (l == NULL)
        return 0;
    if (l->leader) {
        *slot_ms = l->last;
        return 0;
    }
    /* peek at the last-value queue: get, then reject with requeue */
    amqp_rpc_reply_t r = sym_amqp_basic_get(as->c, TM_AMQP_SCH_ADMIN,
                                        sym_amqp_cstring_bytes(l->lastq), 0);
    tm_snprintf(what, sizeof what, "reading '%s'", l->lastq);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return fail(as, what, r);
    if (r.reply.id != AMQP_BASIC_GET_OK_METHOD)
        return 0; /* empty: never fired (or a reader holds it now) */
    uint64_t tag = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
    amqp_message_t m;
    r = sym_amqp_read_message(as->c, TM_AMQP_SCH_ADMIN, &m, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return fail(as, what, r);
    *slot_ms = parse_slot(m.body);
    sym_amqp_destroy_message(&m);
    if (sym_amqp_basic_reject(as->c, TM_AMQP_SCH_ADMIN, tag, 1) !=
        AMQP_STATUS_OK) {
        tm_sched_session_error(&as->base, "schedules: reject failed");
        return -1;
    }
    return 0;
}

int tm_amqp_sched_fire(struct tm_sched_session *ss,
                       const struct tm_cfg_schedule *s, int64_t slot_ms,
                       int64_t *last_ms)
{
    struct tm_amqp_sched *as = (struct tm_amqp_sched *)ss;
    struct lock *l = lock_of(as, s);
    if (last_ms != NULL)
        *last_ms = -1;
    if (l == NULL || !as->fire)
        return 0;
    if (serve(as, 0) != 0)
        return -1;
    if (!l->leader)
        return 0; /* another daemon leads it */
    if (last_ms != NULL)
        *last_ms = l->last;
    if (l->last >= slot_ms)
        return 0;
    /* our previous fire's state is on its way back to us */
    int64_t until = tm_now_ms() + TM_AMQP_SCH_RETURN_MS;
    while (l->held == 0 && tm_now_ms() < until)
        if (serve(as, 50) != 0)
            return -1;
    if (l->held == 0) {
        tm_sched_session_error(&as->base,
                               "schedule '%s': its state did not come back",
                               s->name);
        return -1;
    }
    const struct tm_cfg_task *t = tm_cfg_find_task(ss->b->cfg, s->task);
    if (t == NULL)
        return 0; /* the configuration checked it */
    char id[TM_AMQP_SHORTSTR_MAX + 1];
    tm_snprintf(id, sizeof id, "%s:%lld", s->name, (long long)slot_ms);
    amqp_basic_properties_t p;
    tm_amqp_new_message_props(&p, t, -1, id);
    struct tm_amqp_hdrs h = {0};
    tm_amqp_hdr_str(&h, "x-schedule", s->name, TM_AMQP_SHORTSTR_MAX);
    tm_amqp_hdr_i64(&h, "x-slot", slot_ms);
    char *dkey = tm_sched_dedup_key(s->name, slot_ms);
    tm_amqp_hdr_str(&h, "x-dedup-key", dkey, strlen(dkey));
    p._flags |= AMQP_BASIC_HEADERS_FLAG;
    p.headers = tm_amqp_hdr_table(&h);
    int rc = sym_amqp_basic_publish(as->c, TM_AMQP_SCH_LEAD,
                                    TM_AMQP_EMPTY_BYTES,
                                    sym_amqp_cstring_bytes(t->queue), 0, 0,
                                    &p, sym_amqp_cstring_bytes(s->body_json));
    tm_free(h.e);
    tm_free(dkey);
    if (rc != AMQP_STATUS_OK) {
        tm_sched_session_error(&as->base, "schedule '%s': publish: %s",
                               s->name, sym_amqp_error_string2(rc));
        return -1;
    }
    /* one transaction: the message, the new state, the last value, and
     * the old state's ack */
    if (publish_state(as, l->queue, slot_ms) != 0 ||
        publish_state(as, l->lastq, slot_ms) != 0)
        return -1;
    if (sym_amqp_basic_ack(as->c, TM_AMQP_SCH_LEAD, l->held, 0) !=
        AMQP_STATUS_OK) {
        tm_sched_session_error(&as->base, "schedules: ack failed");
        return -1;
    }
    if (commit(as) != 0)
        return -1;
    l->held = 0;
    l->last = slot_ms;
    if (last_ms != NULL)
        *last_ms = slot_ms;
    return 1;
}
