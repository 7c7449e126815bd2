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
 *
 * Here: the levels, and the settle thread's taking of what intake parked
 * into delay copies. x-not-before is read where deliveries are assembled
 * (delivery.c), the delay queues are declared with the other queues
 * (topology.c), and the delay copies built with the other copies
 * (copies.c).
 */
#include "amqp.h"

#include <assert.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* The levels: the shortest wait, and the longest (2^24 of the shortest,
 * about 24 days; longer delays take several hops). */
#define TM_AMQP_DELAY_MIN_MS 125LL
#define TM_AMQP_DELAY_MAX_SHIFT 24

int64_t tm_amqp_delay_level(int64_t left_ms)
{
    int64_t level = TM_AMQP_DELAY_MIN_MS;
    for (int k = 0; k < TM_AMQP_DELAY_MAX_SHIFT && level * 2 <= left_ms; k++)
        level *= 2;
    return level;
}

int64_t tm_amqp_delay_level_at(int k)
{
    return k < 0 || k > TM_AMQP_DELAY_MAX_SHIFT ? -1
                                                : TM_AMQP_DELAY_MIN_MS << k;
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
