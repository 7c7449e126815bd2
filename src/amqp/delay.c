/* amqp/delay.c - delayed messages on RabbitMQ: x-not-before and the
 * delay queues.
 *
 * A delivery whose header x-not-before (epoch ms) lies in the future is
 * not run: intake puts it on its task's park list (tm_amqp_park_take),
 * and the settle thread republishes it, with a publisher confirm, to one
 * of taskmill's delay queues, then acknowledges the original (the same
 * path as a retry copy: the original is acked only once the copy is
 * confirmed). So a delayed message is always held by the broker, never
 * by a consumer's memory.
 *
 * The delay queues of a task queue Q are "Q.delay.<L>ms", one per level
 * L = TM_AMQP_DELAY_MIN_MS * 2^k up to TM_AMQP_DELAY_MAX_MS. Each has a
 * queue-level x-message-ttl of L and dead-letters expired messages
 * through the default exchange back to Q. All messages of one queue wait
 * the same time, so they expire in the order they came in and none waits
 * behind another (which per-message expiration would cause: RabbitMQ
 * expires only at the head of a queue). A message with R ms left goes to
 * the largest level not above R (the smallest when R is below it); when
 * it comes back still early it is parked again for the rest. Each hop
 * leaves less than half of R, so a delay of 30 days takes at most
 * about 25 hops, and a message is never delivered early: what runs has
 * x-not-before in the past by this daemon's clock.
 *
 * The delay queues never expire (unlike the retry queues): a message may
 * wait in one for weeks while no daemon runs. They are declared on first
 * use on each publishing connection, durable, quorum queues when
 * broker.amqp.queue_type is quorum.
 */
#include "amqp.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* The levels: the shortest wait, and the longest (2^24 of the shortest,
 * about 24 days; longer delays take several hops). */
#define TM_AMQP_DELAY_MIN_MS 125LL
#define TM_AMQP_DELAY_MAX_SHIFT 24

int tm_amqp_not_before(const amqp_table_t *headers, int64_t *due_ms)
{
    const amqp_field_value_t *v = tm_amqp_table_get(headers, "x-not-before");
    long long x;
    if (v == NULL)
        return -1;
    if (v->kind == AMQP_FIELD_KIND_F64 || v->kind == AMQP_FIELD_KIND_F32) {
        double f = v->kind == AMQP_FIELD_KIND_F64 ? v->value.f64
                                                  : (double)v->value.f32;
        if (!isfinite(f) || f < 0 || f > 9.0e15)
            return -1;
        *due_ms = (int64_t)ceil(f);
        return 0;
    }
    if (tm_amqp_field_int(v, &x) != 0)
        return -1;
    *due_ms = x;
    return 0;
}

int64_t tm_amqp_delay_level(int64_t left_ms)
{
    int64_t level = TM_AMQP_DELAY_MIN_MS;
    for (int k = 0; k < TM_AMQP_DELAY_MAX_SHIFT && level * 2 <= left_ms; k++)
        level *= 2;
    return level;
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

void tm_amqp_delay_name(const struct tm_cfg_task *t, int64_t ms, char *name,
                        size_t size)
{
    tm_snprintf(name, size, "%s.delay.%lldms", t->queue, (long long)ms);
    if (strlen(name) > TM_AMQP_SHORTSTR_MAX)
        tm_snprintf(name, size, "%.200s.%016llx.delay.%lldms", t->queue,
                    (unsigned long long)tm_amqp_fnv64(
                        t->queue, strlen(t->queue), TM_AMQP_FNV64_INIT),
                    (long long)ms);
}

int64_t tm_amqp_delay_level_at(int k)
{
    return k < 0 || k > TM_AMQP_DELAY_MAX_SHIFT ? -1
                                                : TM_AMQP_DELAY_MIN_MS << k;
}

/* delay_queue returns the name of task t's delay queue of level ms,
 * declaring it on first use on this connection (kept in pc->levels with
 * the retry queues; a declared_at of INT64_MAX marks it as never to be
 * declared again there, unless a copy found it deleted). NULL with the
 * reason in buf when it cannot be declared; *dead is set when the
 * connection failed. */
static const char *delay_queue(struct tm_amqp_publisher *pc,
                               const struct tm_cfg_task *t, int64_t ms,
                               char *buf, size_t size, int *dead)
{
    char name[TM_AMQP_SHORTSTR_MAX + 64];
    tm_amqp_delay_name(t, ms, name, sizeof name);
    struct tm_amqp_level *lv = NULL;
    for (size_t i = 0; i < pc->nlevels && lv == NULL; i++)
        if (strcmp(pc->levels[i].name, name) == 0)
            lv = &pc->levels[i];
    if (lv != NULL && lv->declared_at == INT64_MAX)
        return lv->name;
    /* new here, or TM_AMQP_LEVEL_STALE: a copy found it gone */
    if (delay_declare(pc, t, name, ms, buf, size, dead) != 0)
        return NULL;
    if (lv != NULL) {
        lv->declared_at = INT64_MAX;
        return lv->name;
    }
    if (pc->nlevels == pc->caplevels) {
        pc->caplevels = pc->caplevels ? pc->caplevels * 2 : 8;
        pc->levels =
            tm_realloc(pc->levels, pc->caplevels * sizeof *pc->levels);
    }
    lv = &pc->levels[pc->nlevels++];
    lv->name = tm_strdup(name);
    lv->declared_at = INT64_MAX;
    return lv->name;
}

int tm_amqp_prepare_park(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r)
{
    const struct tm_cfg_task *t = pc->ab->tasks[r->task].cfg;
    char why[512];
    int dead = 0;
    r->rk = delay_queue(pc, t, r->delay_ms, why, sizeof why, &dead);
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

uint64_t tm_amqp_publish_park(struct tm_amqp_publisher *pc,
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
        tm_amqp_pub_send(pc, &pc->copies, r->rk, &p, d->body, d->body_len,
                         /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

int tm_amqp_park_due(const struct tm_amqp_delivery *d, int64_t now_ms,
                     int64_t *left_ms)
{
    int64_t due;
    if (d->oversized || tm_amqp_not_before(&d->headers, &due) != 0 ||
        due <= now_ms)
        return 0;
    *left_ms = due - now_ms;
    return 1;
}

/* tm_amqp_park_take moves the deliveries intake parked (x-not-before in
 * the future) into the publisher as delay copies: each is acked once its
 * copy in a delay queue is confirmed. Settle thread. */
void tm_amqp_park_take(struct tm_amqp_broker *ab)
{
    int64_t now = 0;
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct tm_amqp_task *at = &ab->tasks[i];
        size_t n = 0, ready = 0;
        /* nothing parked (the common case): io_mu is not taken, nor the
         * clock read */
        if (!atomic_load_explicit(&at->parked, memory_order_relaxed))
            continue;
        if (now == 0)
            now = tm_wall_ms();
        pthread_mutex_lock(at->io_mu);
        struct tm_amqp_delivery *list = at->park;
        at->park = at->park_tail = NULL;
        atomic_store_explicit(&at->parked, 0, memory_order_relaxed);
        /* due meanwhile: to the ready list, to run now (a requeue would
         * count as a redelivery on quorum queues) */
        struct tm_amqp_delivery **pp = &list;
        while (*pp != NULL) {
            struct tm_amqp_delivery *d = *pp;
            int64_t left;
            if (tm_amqp_park_due(d, now, &left)) {
                pp = &d->next;
                continue;
            }
            *pp = d->next;
            if (at->conn != NULL && d->gen == at->gen) {
                tm_amqp_ready_push(at, d);
                ready++;
            } else {
                tm_amqp_delivery_free(d); /* redelivered by RabbitMQ */
            }
        }
        pthread_mutex_unlock(at->io_mu);
        if (ready > 0)
            tm_amqp_signal_intake(at->link);
        while (list != NULL) {
            struct tm_amqp_delivery *d = list;
            list = d->next;
            d->next = NULL;
            int64_t left = 0;
            struct tm_amqp_rec r;
            memset(&r, 0, sizeof r);
            r.task = i;
            r.tag = d->tag;
            r.gen = d->gen;
            r.attempt = d->attempt;
            r.failed_at = now;
            r.d = d;
            int parks = tm_amqp_park_due(d, now, &left);
            assert(parks);
            (void)parks;
            r.settle = TM_SETTLE_RETRY;
            r.outcome = TM_OUT_NONE;
            r.park = 1;
            r.delay_ms = tm_amqp_delay_level(left);
            n++;
            tm_amqp_recvec_push(&ab->pub.out, &r);
        }
        if (n > 0)
            tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, at->cfg->name, NULL,
                         "%zu delayed message(s) parked until their time",
                         n);
    }
}
