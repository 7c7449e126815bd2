/* amqp/settle.c - RabbitMQ settlement: acks, retries, dead letters. The
 * settle thread's side: records handed to the publisher (publish.c), the
 * originals acknowledged once it reports their copies confirmed, and the
 * periodic upkeep. */
#include "amqp.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

/* rec_task_cmp orders records by task, then by delivery tag. */
static int rec_task_cmp(const void *a, const void *b)
{
    const struct tm_amqp_rec *x = a, *y = b;
    if (x->task != y->task)
        return x->task < y->task ? -1 : 1;
    return x->tag < y->tag ? -1 : x->tag > y->tag;
}

/*
 * settle_originals acknowledges, on each task's consume channel,
 * the originals of the records in done (plain acks, and records whose
 * copies are confirmed), then empties done. A record from a
 * consuming connection since lost is dropped: RabbitMQ delivers that
 * message again. Settle thread only.
 */
static void settle_originals(struct tm_amqp_broker *ab,
                             struct tm_amqp_recvec *done)
{
    if (done->n == 0)
        return; /* done->v may be NULL: qsort wants an array */
    /* one run of records per task */
    qsort(done->v, done->n, sizeof *done->v, rec_task_cmp);
    for (size_t lo = 0, hi; lo < done->n; lo = hi) {
        size_t ti = done->v[lo].task;
        hi = lo + 1;
        while (hi < done->n && done->v[hi].task == ti)
            hi++;
        assert(ti < ab->ntasks);
        struct tm_amqp_task *at = &ab->tasks[ti];
        size_t na = 0, stale = 0, mine = hi - lo;
        int copies = 0;
        pthread_mutex_lock(at->io_mu);
        if (mine > at->tagcap) {
            at->tagcap = mine * 2;
            at->tags = tm_realloc(at->tags, at->tagcap * sizeof *at->tags);
        }
        for (size_t i = lo; i < hi; i++) {
            const struct tm_amqp_rec *r = &done->v[i];
            if (at->conn == NULL || r->gen != at->gen)
                stale++;
            else {
                at->tags[na++] = r->tag;
                copies |= r->d != NULL; /* its copy is confirmed */
            }
        }
        int err = 0;
        tm_amqp_settle_tags(at, at->tags, na, NULL, 0, copies, &err);
        if (err)
            tm_amqp_conn_lost(at, "settle");
        int ready = at->nready > 0;
        pthread_mutex_unlock(at->io_mu);
        if (ready)
            tm_amqp_signal_intake(at->link);
        if (stale > 0)
            tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, at->cfg->name, NULL,
                         "%zu settlement(s) dropped: their connection was "
                         "lost and RabbitMQ delivers those messages again",
                         stale);
    }
    tm_amqp_recvec_clear(done);
}

/* cb_copied takes a record the publisher is done with (its copies
 * confirmed), for its original to be acknowledged with the others. */
static void cb_copied(void *arg, struct tm_amqp_rec *r)
{
    struct tm_amqp_broker *ab = arg;
    tm_amqp_recvec_push(&ab->done, r);
}

void tm_amqp_settle_init(struct tm_amqp_broker *ab)
{
    tm_amqp_publisher_init(&ab->pub, ab, cb_copied, ab);
}

void tm_amqp_settle_close(struct tm_amqp_broker *ab)
{
    /* what settlement is left is still done before leaving: copies
     * confirmed (unless publishing is blocked), then their originals */
    tm_amqp_publisher_run(&ab->pub, /* wait = */ 1);
    settle_originals(ab, &ab->done);
    tm_amqp_publisher_close(&ab->pub);
    tm_free(ab->done.v);
    ab->done.v = NULL;
    ab->done.cap = 0;
}

/*
 * tm_amqp_settle turns each message's settlement into a record: a plain
 * ack needs only the delivery tag and is done at once; dead letters,
 * retries and replies take the delivery, error and result from the
 * message and go to the publishing connection, whose confirmed copies
 * release their originals' acks (a copy is always confirmed before its
 * original is acknowledged). It always returns 0: a settlement that
 * cannot be done because its connection was lost is moot, as RabbitMQ
 * redelivers every message that was not acknowledged on it.
 */
size_t tm_amqp_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    int64_t now = tm_wall_ms();
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        struct tm_amqp_delivery *d = m->bctx;
        if (m->settle == TM_SETTLE_NONE || d == NULL ||
            m->task_index >= ab->ntasks)
            continue;
        struct tm_amqp_rec r;
        memset(&r, 0, sizeof r);
        r.settle = m->settle;
        r.outcome = m->outcome;
        r.task = m->task_index;
        r.tag = d->tag;
        r.gen = d->gen;
        r.attempt = m->attempt;
        r.delay_ms = m->retry_delay_ms;
        r.failed_at = now;
        if (m->settle == TM_SETTLE_ACK &&
            (d->reply_to == NULL || d->correlation_id == NULL)) {
            tm_amqp_recvec_push(&ab->done, &r);
            continue;
        }
        r.d = d;
        if (m->held)
            /* the run's code still reads the delivery (its id and body):
             * the batch keeps it too, until that code returned (the
             * batch's release frees bctx), and the last owner frees it.
             * Settled once: this settlement never fails (see above). */
            atomic_fetch_add_explicit(&d->extra_owners, 1,
                                      memory_order_relaxed);
        else
            m->bctx = NULL;
        r.error = m->error;
        m->error = NULL;
        r.result = m->result;
        r.result_len = m->result_len;
        m->result = NULL;
        tm_amqp_recvec_push(&ab->pub.out, &r);
    }
    tm_amqp_park_take(ab);
    /* the publishing connection only when copies wait on it: with none,
     * reading it would cost a failed read and a poll per call, and its
     * notifications and heartbeats are the tick's (tm_amqp_tick) */
    if (ab->pub.out.n > 0)
        tm_amqp_publisher_run(&ab->pub, /* wait = */ 1);
    settle_originals(ab, &ab->done);
    return 0;
}

/* tm_amqp_tick does the periodic upkeep from the settle thread (intake
 * does not read while the pool is full): the publishing connection's
 * confirms and notifications (copies held while the broker blocked
 * publishing go out once it stops), then every consuming connection's
 * frames, which sends a heartbeat when one is due and notices a silent
 * broker; and it reads the tasks' pause state. */
void tm_amqp_tick(struct tm_broker *b)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    tm_amqp_park_take(ab);
    tm_amqp_publisher_run(&ab->pub, /* wait = */ 1);
    settle_originals(ab, &ab->done);
    int64_t now = tm_now_ms();
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        int ready = 0;
        pthread_mutex_lock(&l->io_mu);
        /* held acks due while neither settle() nor intake came by */
        for (size_t k = 0; k < l->ntasks && l->conn != NULL; k++) {
            struct tm_amqp_task *at = l->tasks[k];
            if (at->acks.nheld > 0 &&
                tm_amqp_acks_flush(at, /* force = */ 0, now) != 0)
                tm_amqp_conn_lost(at, "ack");
        }
        tm_amqp_serve(l, "upkeep");
        for (size_t k = 0; k < l->ntasks && !ready; k++)
            ready = l->tasks[k]->nready > 0;
        pthread_mutex_unlock(&l->io_mu);
        if (ready)
            tm_amqp_signal_intake(l);
    }
    tm_amqp_pause_poll(ab);
}
