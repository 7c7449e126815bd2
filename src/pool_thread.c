/* pool_thread.c - the pthread pool: fixed workers, bounded hand-off. */
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core.h"
#include "crash.h"
#include "log.h"
#include "util.h"

/* Queue slots per worker at start: enough to keep workers fed between
 * intake batches. The queue grows, up to TP_RING_MAX slots, when one
 * read brings more (per-task prefetch bounds what is unacknowledged
 * anyway): a submitter that waited for room would be woken once per
 * chunk a worker takes. */
#define TP_SLOTS_PER_WORKER 64
#define TP_RING_MAX 65536
/* Most messages a worker takes per lock acquisition. */
#define TP_CHUNK_MAX 64
/* A sleeping worker is woken for queued work of at least this much (ns,
 * at the pool's recent time per run): for less, the wake-up costs more
 * than the runs, which the workers awake take on their next loop. */
#define TP_WAKE_WORK_NS 50000
/* Queued messages no worker has taken from for this long are taken by a
 * sleeping worker all the same: the awake ones are held up in slow runs
 * (among fast ones, which set the pace). */
#define TP_STALE_NS 1000000
/* A worker whose chunk's runs have taken this long (ns) so far hands the
 * unstarted rest back to the queue, where idle workers take it: runs that
 * turned slow keep no queued message waiting behind them. Fast runs (a
 * chunk of 64 noop runs takes a tenth of it) never reach it, so they pay
 * no lock and no wake-up for it. */
#define TP_HOLD_NS 1000000
/* A run this long (ns) past its deadline is settled by the watchdog as a
 * timeout, and its worker replaced: a host that looks at should_stop()
 * returns within it and files its own timeout, keeping its thread. */
#define TP_STUCK_GRACE_NS 100000000LL
/* The watchdog looks at the workers every quarter of the shortest task
 * timeout, within these bounds (ns): a run is seen before its deadline,
 * and then settled at deadline + TP_STUCK_GRACE_NS. */
#define TP_WATCH_MIN_NS 10000000LL
#define TP_WATCH_MAX_NS 1000000000LL
/* After a replacement worker's init was refused, the next try waits this
 * long (ns). */
#define TP_REFILL_NS 1000000000LL

struct tp_worker {
    struct tpool *pool;
    pthread_t thread;
    unsigned index;           /* its slot in pool->workers */
    int started;
    int in_call;              /* under pool->mu: runs a chunk it took */
    int init_here;            /* a replacement: its thread runs the
                                 tasks' cb_worker_init (fill_slots) */
    void **wdata;             /* per task: cb_worker_init's data */
    struct tm_run_watch watch; /* the run in task code, for the watchdog */
    /* The chunk it took: chunk[0 .. k), chunk[at] the run in task code,
     * the finished ones on done_head, not handed to done yet. Written by
     * the worker only, before it publishes a run (watch); read by the
     * watchdog only once it took that run, under mu. */
    struct tm_msg *chunk[TP_CHUNK_MAX];
    size_t k, at;
    struct tm_msg *done_head, **done_tail;
    /* Set by the watchdog under mu when it took the run (the worker is
     * then stuck: out of its slot, on pool->stuck_list, detached), and
     * read under mu: the batch held for the run's code (tm_batch_hold)
     * and what /status shows of the run. */
    struct tp_worker *next_stuck;
    struct tm_batch *held;
    size_t stuck_task;
    const char *stuck_id;     /* in held's storage */
    size_t stuck_id_len;
    int64_t stuck_deadline_ns;
};

struct tpool {
    struct tm_pool base;
    pthread_mutex_t mu;
    pthread_cond_t not_empty; /* workers wait here */
    pthread_cond_t not_full;  /* submitters wait here */
    pthread_cond_t idle;      /* drain waits here */
    struct tm_msg **ring;
    size_t cap, head, count;
    unsigned running;         /* workers inside cb_run (under mu) */
    unsigned sleeping;        /* workers waiting on not_empty (under mu) */
    unsigned timed;           /* of them, waiting at most TP_STALE_NS */
    int64_t taken_ns;         /* when a worker last took from the queue */
    int64_t run_ns;           /* recent time per run, moving average
                                 (under mu) */
    atomic_uint busy;         /* same, for lock-free readers */
    int draining;             /* no more submissions */
    atomic_int dropping;      /* set with draining: a worker hands back
                                 the messages of its chunk not started
                                 yet, as the drain does with the queue */
    int stop;                 /* workers exit when the queue is empty */
    /* size slots; NULL while the watchdog has not replaced a stuck
     * worker. Set by tp_start, then changed under mu (by the watchdog,
     * and by a replacement whose init was refused), then by tp_destroy
     * once the watchdog stopped. */
    struct tp_worker **workers;
    unsigned live;            /* workers taking from the queue (under mu) */
    unsigned stuck;           /* of running: runs settled at their
                                 deadline still in task code (under mu) */
    struct tp_worker *stuck_list; /* their workers (under mu) */
    unsigned handing;         /* lists the watchdog settled and is
                                 handing to done (under mu): a drain
                                 waits for them, so that the settle
                                 thread, stopped after it, gets them */
    /* the watchdog: started when a task has a timeout */
    pthread_t watch_thread;
    int watch_started;
    int watch_stop;           /* under mu */
    pthread_cond_t watch_cv;
    int64_t watch_ns;         /* how often it looks at the workers */
    int64_t refill_ns;        /* no replacement tried before (watchdog) */
};

static void worker_fini(struct tp_worker *w)
{
    struct tm_pool *p = &w->pool->base;
    for (size_t i = 0; i < p->ntasks; i++) {
        const struct tm_task_plugin *d = &p->tasks[i]->plugin->desc;
        if (d->cb_worker_fini != NULL)
            d->cb_worker_fini(p->tasks[i]->plugin->task_data, w->wdata[i]);
    }
}

/* wake wakes, under tp->mu, sleeping workers for the queued messages:
 * at most max, and only as many as the queued work is worth at the
 * recent time per run (see TP_WAKE_WORK_NS). A worker that takes its
 * share wakes the next one the same way, so a long queue of slow runs
 * wakes them all, and a burst of fast ones only one or two. */
static void wake(struct tpool *tp, unsigned max)
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

/* requeue_front puts the n unstarted messages rest[0 .. n) back at the
 * head of the queue, under tp->mu, in their order and before what was
 * queued after them. Returns 0, or -1 (nothing put back) when the pool is
 * draining (tp_drain has taken the queue already) or the queue is full at
 * TP_RING_MAX. */
static int requeue_front(struct tpool *tp, struct tm_msg *const *rest,
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
 * chunk back at the head of the queue (requeue_front) once the chunk's
 * runs so far (ran of them, ns in all) have taken TP_HOLD_NS: those runs
 * go into the recent time per run, and sleeping workers are woken as the
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
    if (requeue_front(tp, rest, n) == 0) {
        note_runs(tp, ns, ran);
        wake(tp, tp->base.size);
        rc = 0;
    }
    pthread_mutex_unlock(&tp->mu);
    return rc;
}

/* append adds m to the worker's list of finished messages. */
static void append(struct tp_worker *w, struct tm_msg *m)
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

static struct tp_worker *worker_alloc(struct tpool *tp, unsigned i)
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

static void *worker_main(void *arg)
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
        wake(tp, 1); /* the next worker, if what is left is worth it */
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
                append(w, m);
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
            append(w, m);
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
    append(w, m);
    /* the rest of the chunk, never started, goes to the other workers;
     * if the queue cannot take it (a drain has taken the queue already,
     * or it is full), back unsettled */
    size_t rest = w->k - w->at - 1;
    if (rest > 0) {
        if (requeue_front(tp, &w->chunk[w->at + 1], rest) == 0) {
            wake(tp, tp->base.size);
        } else {
            for (size_t i = w->at + 1; i < w->k; i++) {
                w->chunk[i]->outcome = TM_OUT_NONE;
                append(w, w->chunk[i]);
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
        struct tp_worker *w = worker_alloc(tp, i);
        w->init_here = 1;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
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

/* watch_main is the watchdog: under tp->mu, once per watch_ns or at the
 * next deadline it saw, it looks at the workers' published runs (struct
 * tm_run_watch; the workers publish without the lock), settles those
 * TP_STUCK_GRACE_NS past their deadline (take_run), hands them to done
 * without the lock, and replaces their workers (fill_slots). */
static void *watch_main(void *arg)
{
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
        struct tp_worker *w = worker_alloc(tp, i);
        if (worker_init(w) != 0) {
            tm_free(w->wdata);
            tm_free(w);
            goto fail;
        }
        tp->workers[i] = w;
        pthread_mutex_lock(&tp->mu);
        tp->live++;
        pthread_mutex_unlock(&tp->mu);
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err("pool:thread", "cannot start worker %u: %s", i,
                       tm_strerror(rc, eb, sizeof eb));
            goto fail;
        }
        w->started = 1;
    }
    if (tp->watch_ns > 0) {
        int rc = pthread_create(&tp->watch_thread, NULL, watch_main, tp);
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
            wake(tp, tp->base.size);
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
        wake(tp, tp->base.size);
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
