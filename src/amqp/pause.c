/* amqp/pause.c - RabbitMQ pause state: a durable control queue per task,
 * read by every daemon, written by `taskmill pause|resume` and the admin
 * API, and a notice of each change on a fanout exchange.
 *
 * The control queue "<queue>.paused" (durable, the task queue's type,
 * x-max-length 1 with drop-head) holds one persistent message while the
 * task is paused and none otherwise: pause publishes one (with a publisher
 * confirm), resume purges the queue. Nothing ever consumes it, so its
 * ready count, which every queue.declare answers, is the state; a declare
 * also creates the queue where it is missing, so that reading needs no
 * error path. The state survives daemon restarts and, the queue being
 * durable and the message persistent, broker restarts.
 *
 * Each daemon reads it when a task's connection opens, before it starts
 * the consumer (a daemon started during a pause consumes nothing). After
 * that it learns of changes by notice: a writer, once the state is set,
 * publishes the task queue's name (routing key and body, with a publisher
 * confirm) to the durable fanout exchange TM_AMQP_PAUSE_EXCHANGE, and
 * every daemon's pause connection (settle thread) consumes an exclusive,
 * auto-delete, server-named queue bound to it. Each tick reads the
 * notices that arrived, without blocking, and reads again the state of
 * the tasks they name (one declare each); a notice for a queue no task of
 * the daemon consumes is ignored. A daemon that changes the state itself
 * (admin API) acts at once.
 *
 * No change is missed: whenever the pause connection opens (at start,
 * after its loss, after a broker restart, which deletes the notice
 * queue), it binds its queue first and only then reads every task's state
 * once (the sweep, TM_AMQP_PAUSE_SWEEP_MAX tasks a tick). A write before
 * the bind is seen by the sweep; a write after it is followed by a notice
 * that reaches the queue. While the connection lives, nothing is read
 * but what a notice names. The connection has the consuming connections'
 * heartbeat, so a dead node is noticed and the connection opened again
 * (and the sweep made again) elsewhere.
 *
 * On a pause the task's consumer is cancelled (basic.cancel): RabbitMQ
 * sends it nothing more. Deliveries it had sent before (at most the
 * task's prefetch, including any in flight when the cancel went out) are
 * run and settled as usual; nothing is given back (nacked), so no
 * delivery count grows. On resume the consumer starts again.
 */
#include "amqp.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* The pause connection's channels: declarations (also the writer's own,
 * in confirm mode), and the notices' consumer. */
#define TM_AMQP_PAUSE_CH 1
#define TM_AMQP_PAUSE_CH_NOTICE 2

/* The exchange of the pause notices: fanout, durable. */
#define TM_AMQP_PAUSE_EXCHANGE "taskmill.pause"

/* Tasks whose state the sweep reads per tick, and frames read per tick
 * on the pause connection: a broker slow to answer holds the settle
 * thread only so long. */
#define TM_AMQP_PAUSE_SWEEP_MAX 100
#define TM_AMQP_PAUSE_FRAMES_MAX 256

/* note_state records task at's state as read; a change wakes its intake,
 * which applies it (tm_amqp_pause_apply). */
static void note_state(struct tm_amqp_task *at, int paused)
{
    if (atomic_exchange(&at->paused, paused) != paused)
        tm_amqp_signal_intake(at->link);
}

/* frame_wait reads one frame on c within tv: 1 read, 0 none in time, -1
 * when the connection failed (reason in buf). */
static int frame_wait(amqp_connection_state_t c, amqp_frame_t *f,
                      struct timeval *tv, char *buf, size_t size)
{
    int rc = sym_amqp_simple_wait_frame_noblock(c, f, tv);
    if (rc == AMQP_STATUS_TIMEOUT)
        return 0;
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(buf, size, "%s", sym_amqp_error_string2(rc));
        return -1;
    }
    return 1;
}

/* shortstr copies b, an AMQP short string, into q as a C string. */
static void shortstr(char q[TM_AMQP_SHORTSTR_MAX + 1], amqp_bytes_t b)
{
    size_t n = b.len <= TM_AMQP_SHORTSTR_MAX ? b.len : TM_AMQP_SHORTSTR_MAX;
    if (n > 0)
        memcpy(q, b.bytes, n);
    q[n] = '\0';
}

/* apply_locked applies task at's state as last noted to its connection,
 * under its io_mu. Applied here too, not only by the intake: an intake
 * waiting for room (prefetch reached) calls no fetch, and its consumer
 * would otherwise go on receiving as runs end. */
static void apply_locked(struct tm_amqp_task *at)
{
    pthread_mutex_lock(at->io_mu);
    if (tm_amqp_pause_apply(at) != 0)
        tm_amqp_conn_lost(at, "pause");
    pthread_mutex_unlock(at->io_mu);
}

/* read_task reads task at's state on the pause connection and applies
 * it. -1 when the connection failed (reason in buf). */
static int read_task(struct tm_amqp_broker *ab, struct tm_amqp_task *at,
                     char *buf, size_t size)
{
    int p = tm_amqp_pause_declare(ab->pause_conn, TM_AMQP_PAUSE_CH, ab,
                                  at->cfg, buf, size);
    if (p < 0)
        return -1;
    note_state(at, p);
    apply_locked(at);
    return 0;
}

/* notice_exchange declares the notices' exchange on c/ch. */
static int notice_exchange(amqp_connection_state_t c, amqp_channel_t ch,
                           char *buf, size_t size)
{
    char eb[256];
    sym_amqp_exchange_declare(c, ch,
                              sym_amqp_cstring_bytes(TM_AMQP_PAUSE_EXCHANGE),
                              sym_amqp_cstring_bytes("fanout"),
                              /* passive = */ 0, /* durable = */ 1,
                              /* auto_delete = */ 0, /* internal = */ 0,
                              TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "exchange.declare '%s': %s",
                    TM_AMQP_PAUSE_EXCHANGE,
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    return 0;
}

/* notice_listen makes c's notice queue (server-named, exclusive,
 * auto-delete), binds it to the exchange and consumes it (no-ack) on
 * TM_AMQP_PAUSE_CH_NOTICE: from the bind-ok on, every notice published
 * reaches it. */
static int notice_listen(amqp_connection_state_t c, char *buf, size_t size)
{
    char eb[256], q[TM_AMQP_SHORTSTR_MAX + 1];
    const char *what = "queue.declare (notices)";
    amqp_queue_declare_ok_t *ok = sym_amqp_queue_declare(
        c, TM_AMQP_PAUSE_CH, TM_AMQP_EMPTY_BYTES, /* passive = */ 0,
        /* durable = */ 0, /* exclusive = */ 1, /* auto_delete = */ 1,
        TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    shortstr(q, ok->queue);
    what = "queue.bind (notices)";
    sym_amqp_queue_bind(c, TM_AMQP_PAUSE_CH, sym_amqp_cstring_bytes(q),
                        sym_amqp_cstring_bytes(TM_AMQP_PAUSE_EXCHANGE),
                        TM_AMQP_EMPTY_BYTES, TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    what = "basic.consume (notices)";
    amqp_basic_consume_ok_t *cok = sym_amqp_basic_consume(
        c, TM_AMQP_PAUSE_CH_NOTICE, sym_amqp_cstring_bytes(q),
        TM_AMQP_EMPTY_BYTES, /* no_local = */ 0, /* no_ack = */ 1,
        /* exclusive = */ 1, TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (cok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    return 0;
fail:
    tm_snprintf(buf, size, "%s: %s", what,
                tm_amqp_strerror(r, eb, sizeof eb));
    return -1;
}

/* watch_open opens the pause connection, ready for the sweep: its
 * channels, the exchange, and the notice queue bound and consumed. */
static amqp_connection_state_t watch_open(struct tm_amqp_broker *ab,
                                          char *buf, size_t size)
{
    amqp_connection_state_t c = tm_amqp_open(
        ab, "pause", tm_amqp_heartbeat_s(ab), NULL, buf, size);
    if (c == NULL)
        return NULL;
    tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, NULL, NULL,
                 "pause state: listening for notices on exchange '%s', "
                 "then reading every task's state once",
                 TM_AMQP_PAUSE_EXCHANGE);
    if (tm_amqp_channel(c, TM_AMQP_PAUSE_CH, 0, buf, size) != 0 ||
        tm_amqp_channel(c, TM_AMQP_PAUSE_CH_NOTICE, 0, buf, size) != 0 ||
        notice_exchange(c, TM_AMQP_PAUSE_CH, buf, size) != 0 ||
        notice_listen(c, buf, size) != 0) {
        tm_amqp_drop(c);
        return NULL;
    }
    return c;
}

/* read_notices reads, without blocking, the frames that arrived on the
 * pause connection (at most TM_AMQP_PAUSE_FRAMES_MAX; the rest wait for
 * the next tick), and for each notice reads the state of the tasks of
 * the queue it names. rabbitmq-c also sends a heartbeat when one is due
 * and notices a broker silent for two (a 1 us timeout rather than 0
 * keeps that check alive). -1 when the connection failed or the notices
 * stopped (reason in buf). */
static int read_notices(struct tm_amqp_broker *ab, char *buf, size_t size)
{
    amqp_connection_state_t c = ab->pause_conn;
    int rc = 0;
    for (int i = 0; i < TM_AMQP_PAUSE_FRAMES_MAX && rc == 0; i++) {
        amqp_frame_t f;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 1};
        int got = frame_wait(c, &f, &tv, buf, size);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        /* the header and body frames of a notice say nothing more */
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        const amqp_method_t *m = &f.payload.method;
        if (m->id == AMQP_BASIC_DELIVER_METHOD) {
            const amqp_basic_deliver_t *d = m->decoded;
            char q[TM_AMQP_SHORTSTR_MAX + 1];
            shortstr(q, d->routing_key);
            for (size_t k = 0; k < ab->ntasks && rc == 0; k++)
                if (strcmp(ab->tasks[k].cfg->queue, q) == 0)
                    rc = read_task(ab, &ab->tasks[k], buf, size);
        } else if (m->id == AMQP_BASIC_CANCEL_METHOD) {
            tm_snprintf(buf, size, "the broker cancelled the notices' "
                        "consumer");
            return -1;
        } else if (tm_amqp_closed_why(&f, buf, size)) {
            return -1;
        }
    }
    sym_amqp_maybe_release_buffers(c);
    return rc;
}

void tm_amqp_pause_poll(struct tm_amqp_broker *ab)
{
    char eb[512];
    /* after failures less and less often: a broker that does not answer
     * must not hold up the settle thread every tick */
    if (tm_now_ms() < ab->pause_next_ms || ab->ntasks == 0)
        return;
    if (ab->pause_conn == NULL) {
        ab->pause_conn = watch_open(ab, eb, sizeof eb);
        if (ab->pause_conn == NULL)
            goto failed;
        ab->pause_sweep = 0;
    }
    if (read_notices(ab, eb, sizeof eb) != 0)
        goto lost;
    size_t end = ab->pause_sweep + TM_AMQP_PAUSE_SWEEP_MAX;
    if (end > ab->ntasks)
        end = ab->ntasks;
    for (; ab->pause_sweep < end; ab->pause_sweep++)
        if (read_task(ab, &ab->tasks[ab->pause_sweep], eb, sizeof eb) != 0)
            goto lost;
    ab->pause_backoff_ms = 0;
    return;
lost:
    tm_amqp_drop(ab->pause_conn);
    ab->pause_conn = NULL;
failed:
    /* the last state read stays in force; a task's connection reads it
     * again when it opens, and the next pause connection sweeps */
    tm_log_write(ab->pause_backoff_ms > 0 ? TM_LOG_DEBUG : TM_LOG_WARNING,
                 TM_AMQP_SRC, NULL, NULL,
                 "reading the pause state: %s; trying again", eb);
    ab->pause_backoff_ms = ab->pause_backoff_ms == 0
                               ? TM_AMQP_PAUSE_POLL_MS
                               : ab->pause_backoff_ms * 2;
    if (ab->pause_backoff_ms > TM_AMQP_PAUSE_BACKOFF_MAX_MS)
        ab->pause_backoff_ms = TM_AMQP_PAUSE_BACKOFF_MAX_MS;
    ab->pause_next_ms = tm_now_ms() + ab->pause_backoff_ms;
}

void tm_amqp_pause_connected(struct tm_amqp_task *at, int paused)
{
    atomic_store(&at->paused, paused);
    at->pause_held = paused;
    if (paused)
        tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, at->cfg->name, NULL,
                     "paused: not consuming queue '%s' until resumed",
                     at->cfg->queue);
}

int tm_amqp_pause_apply(struct tm_amqp_task *at)
{
    if (at->conn == NULL)
        return 0;
    if (atomic_load(&at->paused)) {
        if (!at->pause_held) {
            /* after a wake() the consumer is cancelled already */
            if (!at->stopped) {
                amqp_basic_cancel_t cancel;
                memset(&cancel, 0, sizeof cancel);
                cancel.consumer_tag = sym_amqp_cstring_bytes(at->consumer_tag);
                cancel.nowait = 1;
                if (sym_amqp_send_method(at->conn, at->ch,
                                         AMQP_BASIC_CANCEL_METHOD,
                                         &cancel) != AMQP_STATUS_OK) {
                    tm_snprintf(at->errstr, sizeof at->errstr,
                                "basic.cancel failed");
                    return -1;
                }
            }
            at->pause_held = 1;
            tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, at->cfg->name, NULL,
                         "paused: consumer of queue '%s' cancelled; what "
                         "it received runs", at->cfg->queue);
        }
        /* no consumer, for the pause: deliveries still arriving from
         * before the cancel are kept and run, not given back */
        at->stopped = 0;
        return 0;
    }
    if (at->pause_held) {
        at->pause_held = 0;
        /* the caller starts the consumer again, as after a wake() */
        at->stopped = 1;
        tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, at->cfg->name, NULL,
                     "resumed: consuming queue '%s' again", at->cfg->queue);
    }
    return 0;
}

/* struct pause_wait is a wait for one confirm on a pause connection. */
struct pause_wait {
    struct tm_amqp_confirm w;
    char *buf;
    size_t size;
};

static int cb_pause_frame(void *arg, const amqp_frame_t *f)
{
    struct pause_wait *pw = arg;
    tm_amqp_confirm_note(&pw->w, f);
    return tm_amqp_closed_why(f, pw->buf, pw->size) ? -1 : 0;
}

static int cb_pause_step(void *arg)
{
    const struct pause_wait *pw = arg;
    return pw->w.state != TM_AMQP_WAITING;
}

/* wait_confirm waits on c until the broker confirms publish seq on ch or
 * deadline (monotonic ms) passes. 0 acked, -1 otherwise (reason in
 * buf). */
static int wait_confirm(amqp_connection_state_t c, amqp_channel_t ch,
                        uint64_t seq, int64_t deadline, char *buf,
                        size_t size)
{
    struct pause_wait pw = {
        .w = {.ch = ch, .seq = seq, .state = TM_AMQP_WAITING},
        .buf = buf,
        .size = size,
    };
    int rc = tm_amqp_confirm_wait(c, deadline, cb_pause_frame, cb_pause_step,
                                  &pw, buf, size);
    if (rc > 0)
        tm_snprintf(buf, size, "no publisher confirm in time");
    else if (rc == 0 && pw.w.state == TM_AMQP_NACKED)
        tm_snprintf(buf, size, "the broker refused the pause message");
    return rc == 0 && pw.w.state == TM_AMQP_ACKED ? 0 : -1;
}

/* notice_send publishes the notice of a change of task t's state (the
 * exchange declared) on c/ch, a confirm channel whose confirm number seq
 * it is, and waits for the confirm: once it returns 0 the notice is in
 * every notice queue bound then. */
static int notice_send(amqp_connection_state_t c, amqp_channel_t ch,
                       const struct tm_cfg_task *t, uint64_t seq, char *buf,
                       size_t size)
{
    if (sym_amqp_basic_publish(c, ch,
                               sym_amqp_cstring_bytes(TM_AMQP_PAUSE_EXCHANGE),
                               sym_amqp_cstring_bytes(t->queue),
                               /* mandatory = */ 0, /* immediate = */ 0,
                               NULL, sym_amqp_cstring_bytes(t->queue)) !=
        AMQP_STATUS_OK) {
        tm_snprintf(buf, size, "basic.publish to '%s' failed",
                    TM_AMQP_PAUSE_EXCHANGE);
        return -1;
    }
    return wait_confirm(c, ch, seq,
                        tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS, buf, size);
}

/* pause_write sets task t's state on c/ch (a confirm channel, no publish
 * on it before), then sends its notice. */
static int pause_write(amqp_connection_state_t c, amqp_channel_t ch,
                       const struct tm_amqp_broker *ab,
                       const struct tm_cfg_task *t, int paused, char *buf,
                       size_t size)
{
    char name[TM_AMQP_SHORTSTR_MAX + 16], eb[256], body[64];
    /* the exchange first: the state is not changed when it cannot be */
    if (notice_exchange(c, ch, buf, size) != 0)
        return -1;
    int was = tm_amqp_pause_declare(c, ch, ab, t, buf, size);
    if (was < 0)
        return -1;
    tm_amqp_pause_queue(t, name, sizeof name);
    if (!paused) {
        amqp_queue_purge_ok_t *ok =
            sym_amqp_queue_purge(c, ch, sym_amqp_cstring_bytes(name));
        amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
        if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(buf, size, "queue.purge '%s': %s", name,
                        tm_amqp_strerror(r, eb, sizeof eb));
            return -1;
        }
        /* the channel's first publish: confirm number 1 */
        return notice_send(c, ch, t, 1, buf, size);
    }
    /* a pause over a pause replaces the message (x-max-length 1) */
    tm_snprintf(body, sizeof body, "{\"paused_at\":%lld}",
                (long long)tm_wall_ms());
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
    p.delivery_mode = 2; /* persistent */
    p.content_type = sym_amqp_cstring_bytes("application/json");
    if (sym_amqp_basic_publish(c, ch, TM_AMQP_EMPTY_BYTES,
                               sym_amqp_cstring_bytes(name),
                               /* mandatory = */ 0, /* immediate = */ 0, &p,
                               sym_amqp_cstring_bytes(body)) !=
        AMQP_STATUS_OK) {
        tm_snprintf(buf, size, "basic.publish to '%s' failed", name);
        return -1;
    }
    /* the first publish of the channel: confirm number 1; the notice
     * goes once the state is kept, as number 2 */
    if (wait_confirm(c, ch, 1, tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS, buf,
                     size) != 0)
        return -1;
    return notice_send(c, ch, t, 2, buf, size);
}

int tm_amqp_pause_set(struct tm_broker *b, const struct tm_cfg_task *t,
                      int paused)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    char eb[512];
    int rc = -1;
    /* a command runs once: it tries each node in turn */
    amqp_connection_state_t c = NULL;
    for (size_t i = 0; i < ab->nnodes && c == NULL; i++)
        c = tm_amqp_open(ab, paused ? "pause" : "resume", 0, NULL, eb,
                         sizeof eb);
    if (c == NULL) {
        tm_broker_set_error(b, ECONNREFUSED, "%s", eb);
        goto out;
    }
    if (tm_amqp_channel(c, TM_AMQP_PAUSE_CH, /* confirm = */ 1, eb,
                        sizeof eb) != 0 ||
        pause_write(c, TM_AMQP_PAUSE_CH, ab, t, paused, eb, sizeof eb) != 0) {
        tm_broker_set_error(b, EIO, "%s", eb);
        tm_amqp_drop(c);
        c = NULL;
        goto out;
    }
    rc = 0;
out:
    tm_amqp_close(c);
    return rc;
}

int tm_amqp_paused(struct tm_broker *b, size_t ti)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    return ti < ab->ntasks ? atomic_load(&ab->tasks[ti].paused) : 0;
}

void tm_amqp_pause_note(struct tm_broker *b, size_t ti, int paused)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    if (ti < ab->ntasks)
        note_state(&ab->tasks[ti], paused != 0);
}
