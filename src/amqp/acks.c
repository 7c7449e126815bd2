/* amqp/acks.c - the ack floor of a RabbitMQ task channel: the delivery
 * tags settled, and the acks held back to go out together (one
 * basic.ack with multiple=1 for many), nacks sent at once. */
#include "amqp.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* tm_amqp_floor_add records n delivery tags as settled, raising the floor over
 * every run of settled tags right above it. */
void tm_amqp_floor_add(struct tm_amqp_acks *k, const uint64_t *tags,
                       size_t n)
{
    if (n == 0)
        return;
    if (k->n + n > k->cap) {
        k->cap = (k->n + n) * 2;
        k->above = tm_realloc(k->above, k->cap * sizeof *k->above);
    }
    memcpy(k->above + k->n, tags, n * sizeof *tags);
    k->n += n;
    qsort(k->above, k->n, sizeof *k->above, u64_cmp);
    size_t drop = 0;
    while (drop < k->n && k->above[drop] <= k->floor + 1) {
        if (k->above[drop] == k->floor + 1)
            k->floor++;
        drop++;
    }
    memmove(k->above, k->above + drop, (k->n - drop) * sizeof *k->above);
    k->n -= drop;
    /* invariant: every tag left above the floor is beyond floor + 1 */
    assert(k->n == 0 || k->above[0] > k->floor + 1);
}

/* ack_quarter is a quarter of the task's prefetch window, at least one. */
static size_t ack_quarter(const struct tm_amqp_task *at)
{
    return at->cfg->prefetch / 4 > 0 ? at->cfg->prefetch / 4 : 1;
}

/* ack_due says whether the acks held back go out now: forced, held for
 * TM_AMQP_ACK_HOLD_MS, a quarter of the prefetch window (at least one: a
 * window under 8 holds nothing back) waiting on them, or fewer than a
 * quarter of the window's deliveries still unsettled. Holding pays only
 * while the stream is busy, with more settlements about to come that go
 * out with the held ones: under a light load (a message now and then, or
 * the end of a burst) an ack goes out as it is decided. */
static int ack_due(const struct tm_amqp_task *at, int force, int64_t now)
{
    const struct tm_amqp_acks *k = &at->acks;
    size_t quarter = ack_quarter(at);
    /* every tag up to dlv_tag was delivered; floor + n of them settled */
    assert(k->floor + k->n <= at->dlv_tag);
    uint64_t unsettled = at->dlv_tag - k->floor - k->n;
    return k->nheld > 0 &&
           (force || k->nheld >= quarter || unsettled < quarter ||
            now - k->held_since >= TM_AMQP_ACK_HOLD_MS);
}

/*
 * tm_amqp_acks_flush sends the acks held back when they are due (or
 * force): the largest held tag under the floor with multiple=1, which
 * acknowledges every tag up to it still unacknowledged (all of them are
 * settled: nacks and rejects went out as they were decided), then each
 * held tag above the floor on its own. Returns -1 when the connection
 * failed (at->errstr). io_mu held.
 */
int tm_amqp_acks_flush(struct tm_amqp_task *at, int force, int64_t now)
{
    struct tm_amqp_acks *k = &at->acks;
    amqp_connection_state_t c = at->conn;
    if (c == NULL || !ack_due(at, force, now))
        return 0;
    uint64_t multi = 0;
    size_t nabove = 0;
    for (size_t i = 0; i < k->nheld; i++) {
        if (k->held[i] > k->floor)
            nabove++;
        else if (k->held[i] > multi)
            multi = k->held[i];
    }
    /* A tag above the floor (settled out of turn: a delivery before it is
     * still unsettled) would go on its own, a write each. Unless forced,
     * it waits on while its hold lasts (TM_AMQP_ACK_HOLD_MS since
     * held_since) and fewer than a quarter of the window wait so: the
     * floor most often rises past it meanwhile, and a later multiple=1
     * covers it. A tag that the floor passed is never acked twice: it is
     * under the next multi (the largest held tag under the floor). */
    int keep = !force && now - k->held_since < TM_AMQP_ACK_HOLD_MS &&
               nabove < ack_quarter(at);
    int rc = AMQP_STATUS_OK;
    if (multi > 0)
        rc = sym_amqp_basic_ack(c, at->ch, multi,
                                /* multiple = */ 1);
    size_t kept = 0;
    for (size_t i = 0; i < k->nheld && rc == AMQP_STATUS_OK; i++) {
        if (k->held[i] <= k->floor)
            continue;
        if (keep)
            k->held[kept++] = k->held[i];
        else
            rc = sym_amqp_basic_ack(c, at->ch, k->held[i], 0);
    }
    k->nheld = rc == AMQP_STATUS_OK ? kept : 0;
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.ack: %s",
                    sym_amqp_error_string2(rc));
        return -1;
    }
    return 0;
}

/* tm_amqp_acks_wait_ms is how long the acks held back may still wait
 * (-1: none held), for a thread that would block meanwhile. io_mu held. */
int64_t tm_amqp_acks_wait_ms(const struct tm_amqp_task *at, int64_t now)
{
    const struct tm_amqp_acks *k = &at->acks;
    if (at->conn == NULL || k->nheld == 0)
        return -1;
    int64_t left = k->held_since + TM_AMQP_ACK_HOLD_MS - now;
    return left > 0 ? left : 0;
}

/*
 * tm_amqp_settle_tags acknowledges acks and gives back nacks (requeue) on the
 * consume channel. Nacks go out at once, one by one; acks are held back
 * until they are due (tm_amqp_acks_flush), so that one basic.ack with
 * multiple=1 covers many, unless now_all: the acks of messages whose
 * copy (retry, dead letter, delay, reply) was confirmed go out at once
 * with every one held, so that the window in which a crash would leave
 * both the copy and the original stays as short as it can be. A hold
 * that starts while the intake thread waits in poll wakes it up, to
 * wait no longer than the hold. *err is set on a connection error.
 */
void tm_amqp_settle_tags(struct tm_amqp_task *at, const uint64_t *acks,
                        size_t na, const uint64_t *nacks, size_t nn,
                        int now_all, int *err)
{
    struct tm_amqp_acks *k = &at->acks;
    amqp_connection_state_t c = at->conn;
    if (c == NULL || na + nn == 0)
        return;
    for (size_t i = 0; i < nn; i++) {
        if (sym_amqp_basic_nack(c, at->ch, nacks[i],
                                /* multiple = */ 0,
                                /* requeue = */ 1) != AMQP_STATUS_OK) {
            tm_snprintf(at->errstr, sizeof at->errstr, "basic.nack failed");
            *err = 1;
            return;
        }
    }
    tm_amqp_floor_add(k, acks, na);
    tm_amqp_floor_add(k, nacks, nn);
    int64_t now = tm_now_ms();
    /* settlements further apart than a hold: nothing would go out with
     * these acks, so they go now (slow runs with a large prefetch keep
     * many deliveries unsettled, and would otherwise wait for the next
     * settlement or the upkeep tick) */
    int sparse = now - k->settled_ms >= TM_AMQP_ACK_HOLD_MS;
    int starts = 0;
    k->settled_ms = now;
    if (na > 0) {
        if (k->nheld + na > k->capheld) {
            k->capheld = (k->nheld + na) * 2;
            k->held = tm_realloc(k->held, k->capheld * sizeof *k->held);
        }
        starts = k->nheld == 0;
        if (starts)
            k->held_since = now;
        memcpy(k->held + k->nheld, acks, na * sizeof *acks);
        k->nheld += na;
    }
    if (tm_amqp_acks_flush(at, now_all || sparse, now) != 0)
        *err = 1;
    /* only a hold that outlives this call needs the intake thread's
     * shorter poll: acks that went out at once (the common case while
     * the daemon keeps up, with few deliveries unsettled) wake nobody */
    if (starts && k->nheld > 0 && at->link->polling)
        tm_amqp_signal_intake(at->link);
}

