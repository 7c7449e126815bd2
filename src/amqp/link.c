/* amqp/link.c - RabbitMQ consuming connections shared by tasks: opening
 * them and each task's channel, reading their frames and handing each to
 * its task, and losing them.
 *
 * A daemon consumes on ceil(tasks / TM_AMQP_LINK_TASKS) connections, each
 * read by one intake lane, rather than one connection and one thread per
 * task: the broker's cost (connections, heartbeats, processes) does not
 * grow with the number of tasks. Each task keeps a channel of its own, so
 * its prefetch window, consumer and acks are its own as before, and a
 * channel the broker closes (a bad ack, a queue deleted) takes down that
 * task only; the connection and the other tasks go on.
 *
 * A link owns its socket, its frames and its channels, and knows nothing
 * of what a channel carries: each frame of a task's channel, each channel
 * opened and each channel gone is reported to the link's owner through
 * the callbacks it was given (struct tm_amqp_link_cbs, intake.c).
 */
#include "amqp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

/* The broker is up while every task has its channel; the reconnect
 * counter counts recoveries after a loss. */
static void task_up(struct tm_amqp_task *at)
{
    struct tm_amqp_broker *ab = at->ab;
    if (!at->counted_down)
        return;
    at->counted_down = 0;
    if (atomic_fetch_sub(&ab->ndown, 1) == 1) {
        if (atomic_exchange(&ab->base.up, 1) == 0 &&
            atomic_load(&ab->ever_up))
            atomic_fetch_add(&ab->base.reconnects, 1);
        atomic_store(&ab->ever_up, 1);
    }
}

static void task_down(struct tm_amqp_task *at)
{
    struct tm_amqp_broker *ab = at->ab;
    if (at->counted_down)
        return;
    at->counted_down = 1;
    atomic_fetch_add(&ab->ndown, 1);
    atomic_store(&ab->base.up, 0);
}

int tm_amqp_links_init(struct tm_amqp_broker *ab,
                       const struct tm_amqp_link_cbs *cbs)
{
    size_t n = (ab->ntasks + TM_AMQP_LINK_TASKS - 1) / TM_AMQP_LINK_TASKS;
    ab->links = tm_calloc(n ? n : 1, sizeof *ab->links);
    if (n == 0)
        return 0;
    /* as many tasks on each, give or take one */
    size_t per = (ab->ntasks + n - 1) / n;
    for (size_t li = 0; li < n; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        l->ab = ab;
        l->cbs = cbs;
        l->index = li;
        l->efd = -1;
        pthread_mutex_init(&l->io_mu, NULL);
        l->tasks = tm_calloc(per, sizeof *l->tasks);
        ab->nlinks = li + 1;
        l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (l->efd < 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err(TM_AMQP_SRC, "eventfd: %s",
                       tm_strerror(errno, eb, sizeof eb));
            return -1;
        }
    }
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct tm_amqp_task *at = &ab->tasks[i];
        struct tm_amqp_link *l = &ab->links[i / per];
        at->link = l;
        at->io_mu = &l->io_mu;
        at->ch = (amqp_channel_t)(TM_AMQP_CH_TASK0 + l->ntasks);
        l->tasks[l->ntasks++] = at;
    }
    return 0;
}

void tm_amqp_link_close(struct tm_amqp_link *l)
{
    for (size_t k = 0; k < l->ntasks; k++) {
        struct tm_amqp_task *at = l->tasks[k];
        at->conn = NULL;
        l->cbs->cb_reset(at);
    }
    if (l->conn != NULL) {
        tm_amqp_lowat_off(l);
        tm_amqp_close(l->conn);
    }
    l->conn = NULL;
}

void tm_amqp_links_free(struct tm_amqp_broker *ab)
{
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        pthread_mutex_destroy(&l->io_mu);
        if (l->efd >= 0)
            close(l->efd);
        tm_free(l->tasks);
    }
    tm_free(ab->links);
    ab->links = NULL;
    ab->nlinks = 0;
}

/* link_task is the task on channel ch of l, NULL for none. */
static struct tm_amqp_task *link_task(const struct tm_amqp_link *l,
                                      amqp_channel_t ch)
{
    if (ch < TM_AMQP_CH_TASK0 || (size_t)(ch - TM_AMQP_CH_TASK0) >= l->ntasks)
        return NULL;
    struct tm_amqp_task *at = l->tasks[ch - TM_AMQP_CH_TASK0];
    assert(at->ch == ch && at->link == l);
    return at;
}

/* tm_amqp_start_consumer sets the prefetch and starts the task's consumer
 * (manual acks) on its channel of c; its consumer tag is written to ctag
 * (TM_AMQP_SHORTSTR_MAX + 1 bytes). */
int tm_amqp_start_consumer(const struct tm_amqp_task *at,
                          amqp_connection_state_t c, char *ctag, char *buf,
                          size_t size)
{
    const struct tm_cfg_task *t = at->cfg;
    char eb[256], tag[TM_AMQP_SHORTSTR_MAX + 1];
    sym_amqp_basic_qos(c, at->ch, /* prefetch_size = */ 0,
                       (uint16_t)t->prefetch, /* global = */ 0);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.qos: %s",
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(tag, sizeof tag, "taskmill.%s.%s.%llu",
                at->ab->base.cfg->instance ? at->ab->base.cfg->instance : "",
                t->name, (unsigned long long)tm_rand64() % 1000000);
    amqp_basic_consume_ok_t *ok = sym_amqp_basic_consume(
        c, at->ch, sym_amqp_cstring_bytes(t->queue),
        sym_amqp_cstring_bytes(tag), /* no_local = */ 0, /* no_ack = */ 0,
        /* exclusive = */ 0, TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.consume '%s': %s", t->queue,
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(ctag, TM_AMQP_SHORTSTR_MAX + 1, "%.*s",
                (int)ok->consumer_tag.len,
                (const char *)ok->consumer_tag.bytes);
    return 0;
}

/* admin_recover opens the admin channel again after a declaration
 * failed on it: a refusal closes the channel and nothing else. -1 when
 * the connection failed too. */
static int admin_recover(amqp_connection_state_t c)
{
    char eb[256];
    return tm_amqp_channel_closed_ok(c, TM_AMQP_CH_ADMIN) == AMQP_STATUS_OK &&
                   tm_amqp_channel(c, TM_AMQP_CH_ADMIN, 0, eb, sizeof eb) == 0
               ? 0
               : -1;
}

/*
 * channel_open opens task at's channel on c: the channel, the task's
 * topology and pause state (on the admin channel), and, unless the task
 * is paused (*paused set to 1), its prefetch and consumer with manual
 * acks. It touches no state io_mu guards, so it runs without io_mu on a
 * connection not installed yet. Returns 0, or -1 with the reason in buf,
 * *perm set when the broker refused the topology for good, and *dead set
 * when the connection failed with it (a refusal closes only a channel,
 * which is answered here).
 */
static int channel_open(const struct tm_amqp_task *at,
                        amqp_connection_state_t c, char *ctag, char *buf,
                        size_t size, int *perm, int *dead, int *paused)
{
    *perm = 0;
    *dead = 0;
    *paused = 0;
    ctag[0] = '\0';
    if (tm_amqp_channel(c, at->ch, 0, buf, size) != 0) {
        *dead = 1; /* a free channel number: only a connection fails it */
        return -1;
    }
    int p = -1;
    if (tm_amqp_declare(c, TM_AMQP_CH_ADMIN, at->ab, at->cfg, buf, size,
                        perm) == 0)
        p = tm_amqp_pause_declare(c, TM_AMQP_CH_ADMIN, at->ab, at->cfg, buf,
                                  size);
    if (p < 0) {
        /* the admin channel was closed by the refusal: open it again,
         * and give back the task's channel, opened for nothing */
        *dead = admin_recover(c) != 0 ||
                sym_amqp_channel_close(c, at->ch, AMQP_REPLY_SUCCESS)
                        .reply_type != AMQP_RESPONSE_NORMAL;
        return -1;
    }
    *paused = p;
    if (!p && tm_amqp_start_consumer(at, c, ctag, buf, size) != 0) {
        /* qos or consume refused: the broker closed the task's channel */
        *dead = tm_amqp_channel_closed_ok(c, at->ch) != AMQP_STATUS_OK;
        return -1;
    }
    return 0;
}

/* install makes the task's channel on the link's connection live (io_mu
 * held). */
static void install(struct tm_amqp_task *at, const char *ctag, int paused)
{
    struct tm_amqp_link *l = at->link;
    const struct tm_cfg_task *t = at->cfg;
    at->conn = l->conn;
    tm_snprintf(at->consumer_tag, sizeof at->consumer_tag, "%s", ctag);
    at->gen = atomic_fetch_add(&at->ab->gens, 1) + 1;
    tm_snprintf(at->salt, sizeof at->salt, "%016llx",
                (unsigned long long)(tm_rand64() ^ at->gen));
    at->salt[8] = '\0';
    l->cbs->cb_reset(at);
    at->close_due = 0;
    at->reopen_ms = 0;
    /* no consumer tag: the task is paused, no consumer was started */
    tm_log_write(TM_LOG_INFO, TM_AMQP_SRC, t->name, NULL,
                 "%s queue '%s' on %s, channel %u "
                 "(prefetch %u; dead letters to '%s')",
                 ctag[0] != '\0' ? "consuming" : "connected for",
                 t->queue, l->node->redacted, at->ch, t->prefetch,
                 t->dead_letter);
    at->was_up = 1;
    tm_log_repeat_reset(&at->err_seen);
    task_up(at);
    l->cbs->cb_opened(at, paused);
}

/* open_failed logs why task at's channel could not be opened (a new
 * reason is worth a line, the same again is noise) and sets its next try
 * (io_mu held). */
static void open_failed(struct tm_amqp_task *at, int perm)
{
    tm_log_write(tm_log_repeat_level(&at->err_seen,
                                     perm ? TM_LOG_ERR : TM_LOG_WARNING,
                                     at->errstr),
                 TM_AMQP_SRC, at->cfg->name, NULL, "%s; retrying",
                 at->errstr);
    task_down(at);
    at->reopen_ms = tm_backoff_next(at->reopen_ms, TM_AMQP_REOPEN_MIN_MS,
                                    TM_AMQP_REOPEN_MAX_MS);
    at->reopen_at = tm_now_ms() + at->reopen_ms;
}

/* struct opened is what channel_open gave for one task of a link being
 * connected, kept until the connection is installed. */
struct opened {
    int rc, perm, paused;
    char ctag[TM_AMQP_SHORTSTR_MAX + 1];
    char err[512];
};

int tm_amqp_link_connect(struct tm_amqp_link *l, int *perm)
{
    char eb[512], role[64];
    const struct tm_url *node = NULL;
    *perm = 0;
    tm_snprintf(role, sizeof role, "consume %zu/%zu", l->index + 1,
                l->ab->nlinks);
    struct opened *o = tm_calloc(l->ntasks ? l->ntasks : 1, sizeof *o);
    pthread_mutex_unlock(&l->io_mu);
    amqp_connection_state_t c =
        tm_amqp_open(l->ab, role, tm_amqp_heartbeat_s(l->ab), &node, eb,
                     sizeof eb);
    if (c != NULL &&
        tm_amqp_channel(c, TM_AMQP_CH_ADMIN, 0, eb, sizeof eb) != 0) {
        tm_amqp_drop(c);
        c = NULL;
    }
    for (size_t k = 0; c != NULL && k < l->ntasks; k++) {
        int dead = 0;
        o[k].rc = channel_open(l->tasks[k], c, o[k].ctag, o[k].err,
                               sizeof o[k].err, &o[k].perm, &dead,
                               &o[k].paused);
        if (dead) {
            tm_snprintf(eb, sizeof eb, "%s", o[k].err);
            *perm = o[k].perm;
            tm_amqp_drop(c);
            c = NULL;
        }
    }
    pthread_mutex_lock(&l->io_mu);
    int rc = 0;
    if (c == NULL) {
        tm_snprintf(l->errstr, sizeof l->errstr, "%s", eb);
        rc = -1;
    } else if (l->conn != NULL) {
        tm_amqp_close(c); /* another thread connected meanwhile */
    } else {
        l->conn = c;
        l->node = node;
        l->was_up = 1;
        tm_log_repeat_reset(&l->err_seen);
        l->lowat = 0; /* a new connection's socket has none */
        l->announce = 1;
        for (size_t k = 0; k < l->ntasks; k++) {
            struct tm_amqp_task *at = l->tasks[k];
            if (o[k].rc == 0) {
                install(at, o[k].ctag, o[k].paused);
            } else {
                tm_snprintf(at->errstr, sizeof at->errstr, "%s", o[k].err);
                open_failed(at, o[k].perm);
            }
        }
    }
    tm_free(o);
    return rc;
}

int tm_amqp_task_open(struct tm_amqp_task *at, int *perm, int *link_dead)
{
    struct tm_amqp_link *l = at->link;
    char ctag[TM_AMQP_SHORTSTR_MAX + 1];
    int paused = 0;
    *perm = *link_dead = 0;
    assert(l->conn != NULL && at->conn == NULL);
    tm_amqp_lowat_off(l); /* the answers are short */
    if (at->close_due) {
        /* its consumer was cancelled by the broker: the channel goes,
         * and with it the delivery tags it numbered */
        amqp_rpc_reply_t r =
            sym_amqp_channel_close(l->conn, at->ch, AMQP_REPLY_SUCCESS);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(at->errstr, sizeof at->errstr, "channel.close: %s",
                        tm_amqp_strerror(r, ctag, sizeof ctag));
            *link_dead = 1;
            return -1;
        }
        at->close_due = 0;
    }
    if (channel_open(at, l->conn, ctag, at->errstr, sizeof at->errstr, perm,
                     link_dead, &paused) != 0) {
        if (!*link_dead)
            open_failed(at, *perm);
        return -1;
    }
    install(at, ctag, paused);
    return 0;
}

void tm_amqp_link_lost(struct tm_amqp_link *l, const char *what)
{
    if (l->conn == NULL)
        return;
    if (l->was_up)
        tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, NULL, NULL,
                     "%s on %s (%zu task(s)): %s; reconnecting (RabbitMQ "
                     "redelivers what was not acknowledged)",
                     what, l->node->redacted, l->ntasks, l->errstr);
    l->was_up = 0;
    for (size_t k = 0; k < l->ntasks; k++) {
        struct tm_amqp_task *at = l->tasks[k];
        at->conn = NULL;
        at->close_due = 0;
        at->reopen_at = 0;
        at->was_up = 0;
        l->cbs->cb_reset(at);
        task_down(at);
    }
    tm_amqp_drop(l->conn);
    l->conn = NULL;
    l->lowat = 0;
}

void tm_amqp_conn_lost(struct tm_amqp_task *at, const char *what)
{
    struct tm_amqp_link *l = at->link;
    char why[600];
    tm_snprintf(why, sizeof why, "task %s: %s", at->cfg->name, at->errstr);
    tm_snprintf(l->errstr, sizeof l->errstr, "%s", why);
    tm_amqp_link_lost(l, what);
}

void tm_amqp_task_down(struct tm_amqp_task *at, int closed)
{
    if (at->was_up)
        tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, at->cfg->name, NULL,
                     "%s; opening the channel again (RabbitMQ redelivers "
                     "what was not acknowledged)", at->errstr);
    at->was_up = 0;
    at->conn = NULL;
    at->close_due = !closed;
    at->link->cbs->cb_reset(at);
    task_down(at);
    at->reopen_ms = at->reopen_ms == 0 ? TM_AMQP_REOPEN_MIN_MS
                                       : at->reopen_ms;
    at->reopen_at = tm_now_ms() + at->reopen_ms;
}

int tm_amqp_nothing_buffered(amqp_connection_state_t c)
{
    return sym_amqp_data_in_buffer(c) == 0 && sym_amqp_frames_enqueued(c) == 0;
}

/* link_frame handles a frame of the connection itself (channel 0) or of
 * the admin channel: only the broker closing either matters. */
static int link_frame(struct tm_amqp_link *l, const amqp_frame_t *f)
{
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0;
    const amqp_method_t *m = &f->payload.method;
    if (m->id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *x = m->decoded;
        tm_snprintf(l->errstr, sizeof l->errstr,
                    "connection closed by the broker: %u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        amqp_connection_close_ok_t ok;
        memset(&ok, 0, sizeof ok);
        sym_amqp_send_method(l->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD,
                             &ok);
        return -1;
    }
    if (m->id == AMQP_CHANNEL_CLOSE_METHOD) {
        /* the admin channel is used by synchronous calls only, which
         * take their answers themselves: a close outside one is a broker
         * that no longer wants this connection's declarations */
        const amqp_channel_close_t *x = m->decoded;
        tm_snprintf(l->errstr, sizeof l->errstr,
                    "channel %u closed by the broker: %u %.*s", f->channel,
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return -1;
    }
    return 0;
}

/*
 * pump reads every frame available now without blocking, and hands each
 * to its task: deliveries go to the task's ready list. It also lets
 * rabbitmq-c send a heartbeat when one is due and notice a broker silent
 * for two heartbeats (a 1 us timeout rather than 0 keeps that check
 * alive). Returns -1 when the connection failed.
 */
static int pump(struct tm_amqp_link *l)
{
    amqp_connection_state_t c = l->conn;
    l->fresh = 0;
    for (int i = 0; i < TM_AMQP_PUMP_MAX; i++) {
        /* what was read is decoded: with deliveries to hand over, they
         * go now rather than after one more read that would most often
         * find the socket empty (a failed read and a poll) */
        if (i > 0 && l->fresh > 0 && tm_amqp_nothing_buffered(c))
            break;
        amqp_frame_t f;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 1};
        int rc = sym_amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            break;
        if (rc != AMQP_STATUS_OK) {
            tm_snprintf(l->errstr, sizeof l->errstr, "%s",
                        sym_amqp_error_string2(rc));
            return -1;
        }
        int body = f.frame_type == AMQP_FRAME_BODY;
        amqp_channel_t ch = f.channel;
        struct tm_amqp_task *at = link_task(l, ch);
        if (at == NULL) {
            if (link_frame(l, &f) != 0)
                return -1;
        } else if (at->conn != NULL) {
            if (l->cbs->cb_frame(at, &f) < 0) {
                tm_snprintf(l->errstr, sizeof l->errstr, "task %s: %s",
                            at->cfg->name, at->errstr);
                return -1;
            }
        } else if (f.frame_type == AMQP_FRAME_METHOD &&
                   f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
            /* a channel already down (its consumer cancelled) closed by
             * the broker: answered, it is free to open again */
            if (tm_amqp_channel_closed_ok(c, ch) != AMQP_STATUS_OK) {
                tm_snprintf(l->errstr, sizeof l->errstr,
                            "channel.close-ok failed");
                return -1;
            }
            at->close_due = 0;
        }
        /* a body frame is copied or dropped by now: its buffer goes back
         * at once, so that a large body never piles up in rabbitmq-c */
        if (body)
            sym_amqp_maybe_release_buffers_on_channel(c, ch);
    }
    sym_amqp_maybe_release_buffers(c);
    return 0;
}

int tm_amqp_serve(struct tm_amqp_link *l, const char *what)
{
    if (l->conn == NULL)
        return 0;
    if (pump(l) != 0) {
        tm_amqp_link_lost(l, what);
        return -1;
    }
    return 0;
}

void tm_amqp_lowat_set(struct tm_amqp_link *l, int on)
{
    if (on == l->lowat || l->conn == NULL)
        return;
    int bytes = on ? TM_AMQP_LOWAT_BYTES : 1;
    /* a socket that refuses it just wakes intake for every byte */
    if (setsockopt(sym_amqp_get_sockfd(l->conn), SOL_SOCKET, SO_RCVLOWAT,
                   &bytes, sizeof bytes) == 0 || !on)
        l->lowat = on;
}

void tm_amqp_lowat_off(struct tm_amqp_link *l)
{
    tm_amqp_lowat_set(l, 0);
}

void tm_amqp_signal_intake(struct tm_amqp_link *l)
{
    uint64_t one = 1;
    if (write(l->efd, &one, sizeof one) < 0) {
        /* the counter is saturated: it is signalled anyway */
    }
}
