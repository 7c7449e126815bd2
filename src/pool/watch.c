/* watch.c - the pthread pool's deadline watchdog: it settles a run
 * TP_STUCK_GRACE_NS past its deadline as a timeout while its code still
 * runs, hands the rest of that worker's chunk to the others, and starts
 * a replacement worker in the stuck one's slot. */
#include "pool/pool_private.h"

#include <pthread.h>

#include "util/log.h"
#include "util/util.h"

/* take_run settles the run that worker w published as state s, if it is
 * still in task code, as a timeout at its deadline, and the rest of w's
 * chunk with it, under tp->mu; it returns what is to be passed to done,
 * or NULL when the run ended meanwhile. w becomes stuck (see struct
 * tp_worker) and its slot empty, for fill_slots. The run's code keeps
 * reading the message's id and body, and the message itself (host
 * calls), until it returns: the batch is held for it (tm_batch_hold, and
 * m->held for the broker) until then, and nothing the run does from now
 * on writes to the message (tm_exec_run_watched). Runs in the watchdog. */
static struct tm_msg *take_run(struct tpool *tp, struct tp_worker *w,
                               uint_fast64_t s)
{
    uint_fast64_t want = s;
    /* a stopped pool: the drain let go of what still runs */
    if (tp->stop ||
        !atomic_compare_exchange_strong_explicit(
            &w->watch.state, &want, s | TM_RUN_TAKEN, memory_order_acq_rel,
            memory_order_relaxed))
        return NULL;
    struct tm_msg *m = w->chunk[w->at];
    int64_t deadline = atomic_load_explicit(&w->watch.deadline_ns,
                                            memory_order_relaxed);
    long long limit_ms = (long long)m->task->cfg->timeout_ms;
    m->outcome = TM_OUT_TIMEOUT;
    m->t_end_ns = deadline;
    m->held = 1;
    tm_msg_set_error(m, "ran past the limit of %lld ms; still running",
                     limit_ms);
    if (m->batch != NULL)
        tm_batch_hold(m->batch);
    w->held = m->batch;
    w->stuck_task = m->task_index;
    w->stuck_id = m->id;
    w->stuck_id_len = m->id_len;
    w->stuck_deadline_ns = deadline;
    tm_tpool_append(w, m);
    /* the rest of the chunk, never started, goes to the other workers;
     * if the queue cannot take it (a drain has taken the queue already,
     * or it is full), back unsettled */
    size_t rest = w->k - w->at - 1;
    if (rest > 0) {
        if (tm_tpool_requeue_front(tp, &w->chunk[w->at + 1], rest) == 0) {
            tm_tpool_wake(tp, tp->base.size);
        } else {
            for (size_t i = w->at + 1; i < w->k; i++) {
                w->chunk[i]->outcome = TM_OUT_NONE;
                tm_tpool_append(w, w->chunk[i]);
            }
        }
    }
    struct tm_msg *list = w->done_head;
    w->done_head = NULL;
    w->in_call = 0;
    w->next_stuck = tp->stuck_list;
    tp->stuck_list = w;
    tp->workers[w->index] = NULL;
    tp->stuck++;
    tp->live--;
    pthread_detach(w->thread);
    w->started = 0;
    if (tp->running == tp->stuck)
        pthread_cond_broadcast(&tp->idle);
    tm_log_write(TM_LOG_WARNING, "task", m->task->cfg->name, m->id,
                 "ran past the limit of %lld ms and is still running: "
                 "settled as timeout; worker %u replaced", limit_ms,
                 w->index);
    return list;
}

/* fill_slots starts a replacement worker in each empty slot (a stuck
 * worker's), under tp->mu, unless the pool is draining. The new thread
 * runs the tasks' cb_worker_init itself (init_here), so that no task's
 * init ever holds up the watchdog; one that is refused leaves its slot
 * empty again, tried again TP_REFILL_NS later. Runs in the watchdog. */
static void fill_slots(struct tpool *tp)
{
    struct tm_pool *p = &tp->base;
    if (tp->draining)
        return;
    for (unsigned i = 0; i < p->size; i++) {
        if (tp->workers[i] != NULL || tm_now_ns() < tp->refill_ns)
            continue;
        struct tp_worker *w = tm_tpool_worker_alloc(tp, i);
        w->init_here = 1;
        int rc = pthread_create(&w->thread, NULL, tm_tpool_worker_main, w);
        if (rc != 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err("pool:thread", "cannot start a worker in place of "
                       "stuck worker %u: %s", i,
                       tm_strerror(rc, eb, sizeof eb));
            tm_free(w->wdata);
            tm_free(w);
            tp->refill_ns = tm_now_ns() + TP_REFILL_NS;
            continue;
        }
        w->started = 1;
        tp->workers[i] = w;
        tp->live++;
    }
}

/* tm_tpool_watch_main is the watchdog: under tp->mu, once per watch_ns or at
 * the next deadline it saw, it looks at the workers' published runs (struct
 * tm_run_watch; the workers publish without the lock), settles those
 * TP_STUCK_GRACE_NS past their deadline (take_run), hands them to done
 * without the lock, and replaces their workers (fill_slots). */
void *tm_tpool_watch_main(void *arg) {
    struct tpool *tp = arg;
    struct tm_pool *p = &tp->base;
    pthread_mutex_lock(&tp->mu);
    while (!tp->watch_stop) {
        int64_t now = tm_now_ns();
        int64_t next = now + tp->watch_ns;
        struct tm_msg *settled = NULL;
        for (unsigned i = 0; i < p->size; i++) {
            struct tp_worker *w = tp->workers[i];
            if (w == NULL)
                continue;
            uint_fast64_t s = atomic_load_explicit(&w->watch.state,
                                                   memory_order_acquire);
            if (!(s & TM_RUN_ACTIVE))
                continue;
            int64_t due = atomic_load_explicit(&w->watch.deadline_ns,
                                               memory_order_relaxed) +
                          TP_STUCK_GRACE_NS;
            if (due > now) {
                if (due < next)
                    next = due;
                continue;
            }
            struct tm_msg *list = take_run(tp, w, s);
            if (list != NULL) {
                struct tm_msg *tail = list;
                while (tail->next != NULL)
                    tail = tail->next;
                tail->next = settled;
                settled = list;
            }
        }
        fill_slots(tp);
        if (settled != NULL) {
            tp->handing++;
            pthread_mutex_unlock(&tp->mu);
            p->done(p->done_ctx, settled);
            pthread_mutex_lock(&tp->mu);
            tp->handing--;
            pthread_cond_broadcast(&tp->idle);
            continue; /* look again: time went by */
        }
        int64_t wait = next - tm_now_ns();
        if (!tp->watch_stop && wait > 0)
            tm_cond_wait_ns(&tp->watch_cv, &tp->mu, wait);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}
