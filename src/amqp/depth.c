/* amqp/depth.c - RabbitMQ queue depths for monitoring: the task queue's
 * and the dead-letter queue's ready counts on a connection of their own,
 * and this daemon's unsettled deliveries. */
#include "amqp.h"

#include <assert.h>

#include "util/log.h"
#include "util/util.h"

/* depth_count reads a queue's ready count with a passive declare: 0 for a
 * queue that does not exist; -1 when the connection failed. */
static long long depth_count(struct tm_amqp_broker *ab, const char *queue,
                             int *dead)
{
    char eb[256];
    amqp_queue_declare_ok_t *ok = sym_amqp_queue_declare(
        ab->dconn, 1, sym_amqp_cstring_bytes(queue), /* passive = */ 1, 0, 0, 0,
        TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(ab->dconn);
    if (ok != NULL && r.reply_type == AMQP_RESPONSE_NORMAL)
        return (long long)ok->message_count;
    if (tm_amqp_channel_error(r) &&
        tm_amqp_channel_closed_ok(ab->dconn, 1) == AMQP_STATUS_OK &&
        tm_amqp_channel(ab->dconn, 1, 0, eb, sizeof eb) == 0)
        return tm_amqp_reply_code(r) == AMQP_NOT_FOUND ? 0 : -1;
    tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, NULL, NULL, "depth of '%s': %s",
                 queue, tm_amqp_strerror(r, eb, sizeof eb));
    *dead = 1;
    return -1;
}

/* unacked counts task at's deliveries on its current connection that
 * RabbitMQ holds unacknowledged: delivery tags run from 1 on the
 * connection's consume channel; a settled one whose ack is held back
 * (a few milliseconds, to go out with others) still counts. */
static long long unacked(struct tm_amqp_task *at)
{
    pthread_mutex_lock(at->io_mu);
    long long n = 0;
    if (at->conn != NULL)
        n = (long long)tm_amqp_acks_unacked(&at->acks, at->dlv_tag);
    pthread_mutex_unlock(at->io_mu);
    return n;
}

/* tm_amqp_depth reads, on a monitoring connection of its own, the task
 * queue's and the dead-letter queue's ready counts. AMQP does not tell
 * how many deliveries a queue has unacknowledged: pending is this
 * daemon's share, its deliveries not settled yet. Nor does it tell the
 * age of a queue's first message without taking it (basic.get), or
 * which delayed messages are due (each waits out its TTL in a delay
 * queue, then RabbitMQ moves it): oldest_age_ms and delayed_due stay
 * -1. */
int tm_amqp_depth(struct tm_broker *b, size_t ti, struct tm_broker_depth *out)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    int rc = -1;
    char eb[512];
    pthread_mutex_lock(&ab->depth_mu);
    if (ti == TM_BROKER_DEPTH_CLOSE) {
        tm_amqp_close(ab->dconn);
        ab->dconn = NULL;
        rc = 0;
        goto out;
    }
    out->depth = out->pending = out->dlq = -1;
    out->oldest_age_ms = out->delayed_due = -1;
    if (ti >= ab->ntasks)
        goto out;
    if (ab->dconn == NULL) {
        amqp_connection_state_t c =
            tm_amqp_open(ab, "monitor", 0, NULL, eb, sizeof eb);
        if (c == NULL || tm_amqp_channel(c, 1, 0, eb, sizeof eb) != 0) {
            tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, NULL, NULL, "depth: %s",
                         eb);
            tm_amqp_drop(c);
            goto out;
        }
        ab->dconn = c;
    }
    out->pending = unacked(&ab->tasks[ti]);
    int dead = 0;
    const struct tm_cfg_task *t = ab->tasks[ti].cfg;
    out->depth = depth_count(ab, t->queue, &dead);
    if (!dead)
        out->dlq = depth_count(ab, t->dead_letter, &dead);
    if (dead) {
        tm_amqp_drop(ab->dconn);
        ab->dconn = NULL;
        goto out;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&ab->depth_mu);
    return rc;
}
