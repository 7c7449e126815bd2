/* thread.c - the pthread pool: fixed workers, bounded hand-off, the
 * queue workers take chunks from; the deadline watchdog that replaces a
 * stuck worker is in watch.c. */
#include "pool/pool_private.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "task/task.h"
#include "util/crash.h"
#include "util/log.h"
#include "util/util.h"

static void worker_fini(struct tp_worker *w)
{
    struct tm_pool *p = &w->pool->base;
    for (size_t i = 0; i < p->ntasks; i++) {
        const struct tm_task_plugin *d = &p->tasks[i]->plugin->desc;
        if (d->cb_worker_fini != NULL)
            d->cb_worker_fini(p->tasks[i]->plugin->task_data, w->wdata[i]);
    }
}

/* tm_tpool_wake wakes, under tp->mu, sleeping workers for the queued messages:
 * at most max, and only as many as the queued work is worth at the
 * recent time per run (see TP_WAKE_WORK_NS). A worker that takes its
 * share wakes the next one the same way, so a long queue of slow runs
 * wakes them all, and a burst of fast ones only one or two. */
void tm_tpool_wake(struct tpool *tp, unsigned max)
{
    if (tp->count == 0 || tp->sleeping == 0)
        return;
    /* the runs queued that one wake-up is worth */
    size_t per_wake = tp->run_ns > 0
                          ? (size_t)(TP_WAKE_WORK_NS / tp->run_ns)
                          : SIZE_MAX;
    size_t want = per_wake == 0 ? tp->count : tp->count / per_wake;
    /* none awake to take them: one at least */
    if (want == 0 && tp->sleeping == tp->live)
        want = 1;
    if (want > max)
        want = max;
    if (want == 0 && tp->timed == 0)
        /* none worth waking: one looks again in TP_STALE_NS (take) */
        pthread_cond_signal(&tp->not_empty);
    else if (want >= tp->sleeping)
        pthread_cond_broadcast(&tp->not_empty);
    else
        for (size_t i = 0; i < want; i++)
            pthread_cond_signal(&tp->not_empty);
}

/* note_runs folds n runs that took ns in all into the recent time per
 * run (under tp->mu): a moving average over chunks, each weighing 1/8. */
static void note_runs(struct tpool *tp, int64_t ns, size_t n)
{
    assert(n > 0 && ns >= 0);
    int64_t per = ns / (int64_t)n;
    tp->run_ns += (per - tp->run_ns) / 8;
}

/* take says whether an awake worker (not counted in sleeping) with no
 * chunk takes from the non-empty queue, under tp->mu: when no other is
 * awake, when the queued work is worth a worker (wake), or when it has
 * waited past TP_STALE_NS. Otherwise it waits, for TP_STALE_NS at most. */
static int take(const struct tpool *tp)
{
    assert(tp->count > 0 && tp->sleeping < tp->live);
    if (tp->sleeping + 1 == tp->live || tp->stop)
        return 1;
    if (tp->run_ns <= 0 ||
        tp->count >= (size_t)(TP_WAKE_WORK_NS / tp->run_ns))
        return 1;
    return tm_now_ns() - tp->taken_ns >= TP_STALE_NS;
}

/* tp_grow doubles the queue (under tp->mu) when it has no room for n
 * more messages and is below TP_RING_MAX; 0 when it did. The messages
 * keep their order, from slot 0 on. */
static int tp_grow(struct tpool *tp, size_t n)
{
    if (tp->cap - tp->count >= n || tp->cap >= TP_RING_MAX)
        return -1;
    size_t cap = tp->cap * 2;
    struct tm_msg **ring = tm_malloc(cap * sizeof *ring);
    for (size_t i = 0; i < tp->count; i++)
        ring[i] = tp->ring[(tp->head + i) % tp->cap];
    tm_free(tp->ring);
    tp->ring = ring;
    tp->cap = cap;
    tp->head = 0;
    return 0;
}

/* tm_tpool_requeue_front puts the n unstarted messages rest[0 .. n) back at
 * the head of the queue, under tp->mu, in their order and before what was
 * queued after them. Returns 0, or -1 (nothing put back) when the pool is
 * draining (tp_drain has taken the queue already) or the queue is full at
 * TP_RING_MAX. */
int tm_tpool_requeue_front(struct tpool *tp, struct tm_msg *const *rest,
                           size_t n)
{
    if (tp->draining)
        return -1;
    while (tp->cap - tp->count < n)
        if (tp_grow(tp, n) != 0)
            return -1;
    /* the ring holds [head, head + count): the n slots before head are
     * free since count + n <= cap */
    assert(tp->count + n <= tp->cap);
    tp->head = (tp->head + tp->cap - n) % tp->cap;
    for (size_t i = 0; i < n; i++)
        tp->ring[(tp->head + i) % tp->cap] = rest[i];
    tp->count += n;
    return 0;
}

/* give_back puts the n unstarted messages rest[0 .. n) of a worker's
 * chunk back at the head of the queue (tm_tpool_requeue_front) once the
 * chunk's runs so far (ran of them, ns in all) have taken TP_HOLD_NS: those
 * runs go into the recent time per run, and sleeping workers are woken as the
 * rest is worth at that time (wake). Takes tp->mu. Returns 0, or -1 when
 * it gave nothing back and the worker keeps its chunk: the pool is
 * draining (the worker hands the rest back unsettled, see dropping,
 * which is set with draining), or the queue is full (every message
 * queued waits for a worker anyway; the worker asks again after its next
 * run). */
static int give_back(struct tpool *tp, struct tm_msg *const *rest, size_t n,
                     int64_t ns, size_t ran)
{
    int rc = -1;
    pthread_mutex_lock(&tp->mu);
    if (tm_tpool_requeue_front(tp, rest, n) == 0) {
        note_runs(tp, ns, ran);
        tm_tpool_wake(tp, tp->base.size);
        rc = 0;
    }
    pthread_mutex_unlock(&tp->mu);
    return rc;
}

/* tm_tpool_append adds m to the worker's list of finished messages. */
void tm_tpool_append(struct tp_worker *w, struct tm_msg *m)
{
    m->next = NULL;
    *w->done_tail = m;
    w->done_tail = &m->next;
}

/* stuck_return ends the thread of a worker whose run the watchdog took,
 * once that run's code returned: its worker data is finalised, the batch
 * held for the run given back, and it leaves the pool's counts (the pool
 * kept its size with a replacement). Nothing of the pool is touched after
 * that: a pool waiting for its last call to return may be freed at once
 * (tm_gen_wait_idle). The thread is detached. */
static void stuck_return(struct tp_worker *w)
{
    struct tpool *tp = w->pool;
    /* the watchdog took the run under mu and is done with w once it
     * lets go of mu */
    pthread_mutex_lock(&tp->mu);
    struct tm_batch *held = w->held;
    pthread_mutex_unlock(&tp->mu);
    worker_fini(w);
    tm_batch_drop(held);
    tm_crash_thread_fini();
    pthread_mutex_lock(&tp->mu);
    struct tp_worker **pp = &tp->stuck_list;
    while (*pp != w)
        pp = &(*pp)->next_stuck;
    *pp = w->next_stuck;
    tp->stuck--;
    tp->running--;
    atomic_store_explicit(&tp->busy, tp->running, memory_order_relaxed);
    pthread_cond_broadcast(&tp->idle);
    pthread_mutex_unlock(&tp->mu);
    tm_free(w->wdata);
    tm_free(w);
}

/* worker_init runs every task's cb_worker_init for w. Returns 0, or -1,
 * logged, when a task refused (the inits done are finalised then). */
static int worker_init(struct tp_worker *w)
{
    struct tm_pool *p = &w->pool->base;
    for (size_t t = 0; t < p->ntasks; t++) {
        const struct tm_task_plugin *d = &p->tasks[t]->plugin->desc;
        if (d->cb_worker_init != NULL &&
            d->cb_worker_init(p->tasks[t]->plugin->task_data,
                              &w->wdata[t]) != 0) {
            tm_log_err("pool:thread", "worker %u: task '%s' refused "
                       "its worker init", w->index, p->tasks[t]->cfg->name);
            for (size_t u = 0; u < t; u++) {
                const struct tm_task_plugin *du = &p->tasks[u]->plugin->desc;
                if (du->cb_worker_fini != NULL)
                    du->cb_worker_fini(p->tasks[u]->plugin->task_data,
                                       w->wdata[u]);
            }
            return -1;
        }
    }
    return 0;
}

struct tp_worker *tm_tpool_worker_alloc(struct tpool *tp, unsigned i)
{
    struct tp_worker *w = tm_calloc(1, sizeof *w);
    w->pool = tp;
    w->index = i;
    w->wdata = tm_calloc(tp->base.ntasks ? tp->base.ntasks : 1,
                         sizeof(void *));
    return w;
}

/* init_refused ends the thread of a replacement worker whose init a task
 * refused (worker_init finalised the rest): it leaves the pool's counts,
 * and its slot for the watchdog to fill again after TP_REFILL_NS, unless
 * the pool is being destroyed, which then joins it and frees it. */
static void init_refused(struct tp_worker *w)
{
    struct tpool *tp = w->pool;
    pthread_mutex_lock(&tp->mu);
    tp->live--;
    tp->refill_ns = tm_now_ns() + TP_REFILL_NS;
    int own = !tp->stop;
    if (own) {
        tp->workers[w->index] = NULL;
        pthread_detach(pthread_self());
    }
    pthread_mutex_unlock(&tp->mu);
    if (own) {
        tm_free(w->wdata);
        tm_free(w);
    }
}

void *tm_tpool_worker_main(void *arg)
{
    struct tp_worker *w = arg;
    struct tpool *tp = w->pool;
    struct tm_pool *p = &tp->base;

    /* a crash in task code is reported from here (see crash.h) */
    tm_crash_thread_init();
    if (w->init_here) {
        if (worker_init(w) != 0) {
            tm_crash_thread_fini();
            init_refused(w);
            return NULL;
        }
        /* a stuck worker replaced */
        atomic_fetch_add(&p->restarts, 1);
    }
    for (;;) {
        size_t k = 0;
        pthread_mutex_lock(&tp->mu);
        /* back from a chunk (or new): what is queued is taken at once;
         * woken, only what take() finds worth it */
        for (int fresh = 1;; fresh = 0) {
            if (tp->count > 0 && (fresh || take(tp)))
                break;
            if (tp->count == 0 && tp->stop)
                break;
            tp->sleeping++;
            if (tp->count > 0) {
                tp->timed++;
                tm_cond_wait_ns(&tp->not_empty, &tp->mu,
                                TP_STALE_NS - (tm_now_ns() - tp->taken_ns));
                tp->timed--;
            } else {
                pthread_cond_wait(&tp->not_empty, &tp->mu);
            }
            tp->sleeping--;
        }
        if (tp->count == 0 && tp->stop) {
            pthread_mutex_unlock(&tp->mu);
            break;
        }
        /* take a fair share: small when the queue is short, so one worker
         * does not hoard messages the others could run */
        size_t share = tp->count / (p->size * 2);
        /* but runs so fast that no other worker would be woken for them
         * (wake) are taken as one wake-up's worth: a worker does not come
         * back to the lock, and to the settle thread, every few runs */
        if (tp->run_ns > 0 && share < TP_WAKE_WORK_NS / (size_t)tp->run_ns)
            share = TP_WAKE_WORK_NS / (size_t)tp->run_ns;
        if (share < 1)
            share = 1;
        if (share > TP_CHUNK_MAX)
            share = TP_CHUNK_MAX;
        while (k < share && tp->count > 0) {
            w->chunk[k++] = tp->ring[tp->head];
            tp->head = (tp->head + 1) % tp->cap;
            tp->count--;
        }
        w->k = k;
        tp->taken_ns = tm_now_ns();
        tp->running++;
        w->in_call = 1;
        atomic_store_explicit(&tp->busy, tp->running, memory_order_relaxed);
        pthread_cond_signal(&tp->not_full);
        /* the next worker, if what is left is worth it */
        tm_tpool_wake(tp, 1);
        pthread_mutex_unlock(&tp->mu);

        w->done_head = NULL;
        w->done_tail = &w->done_head;
        /* back to back: each run starts when the one before ended; ran
         * runs since t0 are not in the pool's time per run yet */
        int64_t t0 = tm_now_ns(), t = t0;
        size_t ran = 0;
        for (size_t i = 0; i < k; i++) {
            struct tm_msg *m = w->chunk[i];
            if (i > 0 && atomic_load_explicit(&tp->dropping,
                                              memory_order_relaxed)) {
                /* a stop: never started, back unsettled (tp_drain) */
                m->outcome = TM_OUT_NONE;
                tm_tpool_append(w, m);
                continue;
            }
            w->at = i;
            tm_crash_enter(m->task->cfg->name, m->id, m->id_len);
            if (tm_exec_run_watched(m, w->wdata[m->task_index], t,
                                    &w->watch) != 0) {
                /* the watchdog settled the run and the rest of the
                 * chunk, and a replacement has this worker's slot */
                tm_crash_leave();
                stuck_return(w);
                return NULL;
            }
            tm_crash_leave();
            assert(m->t_end_ns >= t);
            t = m->t_end_ns;
            ran++;
            tm_tpool_append(w, m);
            /* one comparison per run: the fast case stops here */
            if (i + 1 < k && t - t0 >= TP_HOLD_NS &&
                give_back(tp, &w->chunk[i + 1], k - i - 1, t - t0,
                          ran) == 0) {
                ran = 0;
                break;
            }
        }
        struct tm_msg *head = w->done_head;
        w->done_head = NULL;
        p->done(p->done_ctx, head);

        pthread_mutex_lock(&tp->mu);
        if (ran > 0)
            note_runs(tp, t - t0, ran);
        tp->running--;
        w->in_call = 0;
        atomic_store_explicit(&tp->busy, tp->running, memory_order_relaxed);
        if (tp->running == tp->stuck)
            pthread_cond_broadcast(&tp->idle);
        pthread_mutex_unlock(&tp->mu);
    }
    worker_fini(w);
    tm_crash_thread_fini();
    return NULL;
}


static struct tm_pool *tp_create(const struct tm_cfg *cfg,
                                 struct tm_task **tasks, size_t ntasks,
                                 tm_pool_done_fn done, void *done_ctx)
{
    unsigned size = cfg->pool_size;
    struct tpool *tp = tm_calloc(1, sizeof *tp);
    tp->base.ops = &tm_pool_thread_ops;
    tp->base.size = size;
    tp->base.tasks = tasks;
    tp->base.ntasks = ntasks;
    tp->base.done = done;
    tp->base.done_ctx = done_ctx;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->not_empty, NULL);
    pthread_cond_init(&tp->not_full, NULL);
    pthread_cond_init(&tp->idle, NULL);
    tm_cond_init(&tp->watch_cv);
    tp->cap = (size_t)size * TP_SLOTS_PER_WORKER;
    /* until runs are timed, each is taken as worth a wake-up */
    tp->run_ns = TP_WAKE_WORK_NS;
    tp->taken_ns = tm_now_ns();
    tp->ring = tm_calloc(tp->cap, sizeof *tp->ring);
    tp->workers = tm_calloc(size, sizeof *tp->workers);
    /* a watchdog only for a pool with a task that has a timeout */
    for (size_t i = 0; i < ntasks; i++) {
        int64_t ns = tasks[i]->cfg->timeout_ms * 1000000LL / 4;
        if (tasks[i]->cfg->timeout_ms > 0 &&
            (tp->watch_ns == 0 || ns < tp->watch_ns))
            tp->watch_ns = ns;
    }
    if (tp->watch_ns > 0 && tp->watch_ns < TP_WATCH_MIN_NS)
        tp->watch_ns = TP_WATCH_MIN_NS;
    if (tp->watch_ns > TP_WATCH_MAX_NS)
        tp->watch_ns = TP_WATCH_MAX_NS;
    return &tp->base;
}

static int tp_start(struct tm_pool *p)
{
    struct tpool *tp = (struct tpool *)p;
    for (unsigned i = 0; i < p->size; i++) {
        /* cb_worker_init runs here, before the thread starts, so a
         * refusal is reported synchronously; the data is then only used
         * by it */
        struct tp_worker *w = tm_tpool_worker_alloc(tp, i);
        if (worker_init(w) != 0) {
            tm_free(w->wdata);
            tm_free(w);
            goto fail;
        }
        tp->workers[i] = w;
        pthread_mutex_lock(&tp->mu);
        tp->live++;
        pthread_mutex_unlock(&tp->mu);
        int rc = pthread_create(&w->thread, NULL, tm_tpool_worker_main, w);
        if (rc != 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err("pool:thread", "cannot start worker %u: %s", i,
                       tm_strerror(rc, eb, sizeof eb));
            goto fail;
        }
        w->started = 1;
    }
    if (tp->watch_ns > 0) {
        int rc =
            pthread_create(&tp->watch_thread, NULL, tm_tpool_watch_main, tp);
        if (rc != 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err("pool:thread", "cannot start the watchdog: %s",
                       tm_strerror(rc, eb, sizeof eb));
            goto fail;
        }
        tp->watch_started = 1;
    }
    return 0;
fail:
    pthread_mutex_lock(&tp->mu);
    tp->stop = 1;
    tp->draining = 1;
    pthread_cond_broadcast(&tp->not_empty);
    pthread_mutex_unlock(&tp->mu);
    for (unsigned i = 0; i < p->size; i++) {
        struct tp_worker *w = tp->workers[i];
        if (w == NULL)
            continue;
        if (w->started)
            pthread_join(w->thread, NULL); /* it ran worker fini */
        else
            worker_fini(w);
        tm_free(w->wdata);
        tm_free(w);
        tp->workers[i] = NULL;
    }
    return -1;
}

static size_t tp_submit(struct tm_pool *p, struct tm_msg *msgs, size_t n)
{
    struct tpool *tp = (struct tpool *)p;
    size_t done = 0;
    pthread_mutex_lock(&tp->mu);
    while (done < n) {
        while (tp->count == tp->cap && !tp->draining && tp_grow(tp, 1) != 0)
            pthread_cond_wait(&tp->not_full, &tp->mu);
        if (tp->draining)
            break;
        size_t before = tp->count;
        while (done < n && tp->count < tp->cap) {
            tp->ring[(tp->head + tp->count) % tp->cap] = &msgs[done++];
            tp->count++;
        }
        if (tp->count > before)
            tm_tpool_wake(tp, tp->base.size);
    }
    pthread_mutex_unlock(&tp->mu);
    return done;
}

/* tp_submit_runs is tp_submit for several runs under one lock. Workers
 * are woken when the queue fills up (they must empty it before more
 * fits) and once at the end, as many as the work is worth (wake). */
static void tp_submit_runs(struct tm_pool *p, struct tm_msg *const *runs,
                           const size_t *lens, size_t nruns,
                           size_t *accepted)
{
    struct tpool *tp = (struct tpool *)p;
    size_t added = 0; /* since the last wake-up */
    pthread_mutex_lock(&tp->mu);
    for (size_t r = 0; r < nruns; r++) {
        size_t done = 0;
        while (done < lens[r]) {
            if (tp->count == tp->cap && !tp->draining && tp_grow(tp, 1) != 0) {
                pthread_cond_broadcast(&tp->not_empty);
                added = 0;
                while (tp->count == tp->cap && !tp->draining)
                    pthread_cond_wait(&tp->not_full, &tp->mu);
            }
            if (tp->draining)
                break;
            while (done < lens[r] && tp->count < tp->cap) {
                tp->ring[(tp->head + tp->count) % tp->cap] = &runs[r][done++];
                tp->count++;
                added++;
            }
        }
        accepted[r] = done;
    }
    if (added > 0)
        tm_tpool_wake(tp, tp->base.size);
    pthread_mutex_unlock(&tp->mu);
}

static int tp_drain(struct tm_pool *p, int64_t deadline_ns)
{
    struct tpool *tp = (struct tpool *)p;
    struct tm_msg *head = NULL, **tail = &head;
    pthread_mutex_lock(&tp->mu);
    tp->draining = 1;
    atomic_store_explicit(&tp->dropping, 1, memory_order_relaxed);
    pthread_cond_broadcast(&tp->not_full);
    /* never-started messages go back unsettled, the queue's here and the
     * rest of each worker's chunk by that worker */
    while (tp->count > 0) {
        struct tm_msg *m = tp->ring[tp->head];
        tp->head = (tp->head + 1) % tp->cap;
        tp->count--;
        m->outcome = TM_OUT_NONE;
        m->next = NULL;
        *tail = m;
        tail = &m->next;
    }
    /* the watchdog goes on settling runs past their deadline meanwhile:
     * a stuck run is not waited for */
    int rc = 0;
    while (tp->running > tp->stuck || tp->handing > 0) {
        int64_t now = tm_now_ns();
        if (now >= deadline_ns) {
            rc = -1;
            break;
        }
        int64_t wait = deadline_ns - now;
        if (wait > 100000000LL)
            wait = 100000000LL;
        tm_cond_wait_ns(&tp->idle, &tp->mu, wait);
    }
    /* settled, but their code runs on: the plugins must stay loaded */
    if (tp->stuck > 0)
        rc = -1;
    tp->stop = 1;
    pthread_cond_broadcast(&tp->not_empty);
    pthread_mutex_unlock(&tp->mu);
    if (head != NULL)
        p->done(p->done_ctx, head);
    return rc;
}

static unsigned tp_busy(struct tm_pool *p)
{
    struct tpool *tp = (struct tpool *)p;
    return atomic_load_explicit(&tp->busy, memory_order_relaxed);
}

static size_t tp_stuck(struct tm_pool *p, struct tm_pool_stuck *out,
                       size_t max)
{
    struct tpool *tp = (struct tpool *)p;
    size_t n = 0;
    pthread_mutex_lock(&tp->mu);
    for (const struct tp_worker *w = tp->stuck_list; w != NULL;
         w = w->next_stuck, n++) {
        if (n >= max)
            continue;
        struct tm_pool_stuck *o = &out[n];
        o->task_index = w->stuck_task;
        size_t len = w->stuck_id_len < sizeof o->id - 1 ? w->stuck_id_len
                                                         : sizeof o->id - 1;
        memcpy(o->id, w->stuck_id, len);
        o->id[len] = '\0';
        o->deadline_ns = w->stuck_deadline_ns;
    }
    pthread_mutex_unlock(&tp->mu);
    return n;
}

static void tp_destroy(struct tm_pool *p)
{
    if (p == NULL)
        return;
    struct tpool *tp = (struct tpool *)p;
    pthread_mutex_lock(&tp->mu);
    tp->stop = 1;
    tp->draining = 1;
    tp->watch_stop = 1;
    pthread_cond_signal(&tp->watch_cv);
    pthread_mutex_unlock(&tp->mu);
    /* the watchdog changes the slots: it ends first */
    if (tp->watch_started) {
        pthread_join(tp->watch_thread, NULL);
        tp->watch_started = 0;
    }
    pthread_mutex_lock(&tp->mu);
    /* running counts stuck runs too: their threads lock mu on return */
    int abandoned = tp->running > 0;
    if (abandoned) {
        /* only a drain that ran out of time (or found stuck runs) leaves
         * calls running, and it emptied the queue: no idle worker has
         * anything to take */
        assert(tp->count == 0);
        /* Workers still run task code past the deadline; the process is
         * about to exit, and joining them would wait for that code. Those
         * are detached (stuck ones are already). The others are joined:
         * with stop and draining set (and the queue emptied by the
         * drain) they take no more work and exit. in_call is read under
         * mu, so a worker counted idle here cannot start a call any
         * more. */
        for (unsigned i = 0; i < p->size; i++) {
            struct tp_worker *w = tp->workers[i];
            if (w != NULL && w->started && w->in_call) {
                pthread_detach(w->thread);
                w->started = 0;
            }
        }
    }
    pthread_cond_broadcast(&tp->not_empty);
    pthread_mutex_unlock(&tp->mu);
    if (abandoned) {
        for (unsigned i = 0; i < p->size; i++)
            if (tp->workers[i] != NULL && tp->workers[i]->started)
                pthread_join(tp->workers[i]->thread, NULL);
        return;
    }
    /* no run in task code: no stuck worker is left either */
    assert(tp->stuck_list == NULL);
    for (unsigned i = 0; i < p->size; i++) {
        struct tp_worker *w = tp->workers[i];
        if (w == NULL)
            continue;
        if (w->started)
            pthread_join(w->thread, NULL);
        else
            worker_fini(w);
        tm_free(w->wdata);
        tm_free(w);
    }
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->not_empty);
    pthread_cond_destroy(&tp->not_full);
    pthread_cond_destroy(&tp->idle);
    pthread_cond_destroy(&tp->watch_cv);
    tm_free(tp->workers);
    tm_free(tp->ring);
    tm_free(tp);
}

const struct tm_pool_ops tm_pool_thread_ops = {
    .kind = "thread",
    .create = tp_create,
    .start = tp_start,
    .submit = tp_submit,
    .submit_runs = tp_submit_runs,
    .drain = tp_drain,
    .busy = tp_busy,
    .stuck = tp_stuck,
    .destroy = tp_destroy,
};
