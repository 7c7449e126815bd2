/* pool_private.h - the pthread pool's state, shared by its
 * workers and hand-off (thread.c) and its deadline watchdog
 * (watch.c). */
#ifndef TASKMILL_POOL_THREAD_PRIVATE_H
#define TASKMILL_POOL_THREAD_PRIVATE_H

#include <pthread.h>
#include <stdint.h>

#include "task/task.h"
#include "pool/pool.h"

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

/* tm_tpool_wake wakes, under tp->mu, sleeping workers for the queued
 * messages, at most max; tm_tpool_requeue_front puts n unstarted
 * messages back at the queue's front (under tp->mu; -1: no room);
 * tm_tpool_append adds m to w's finished messages; tm_tpool_worker_alloc
 * makes the worker of slot i, tm_tpool_worker_main is its thread. */
void tm_tpool_wake(struct tpool *tp, unsigned max);
int tm_tpool_requeue_front(struct tpool *tp, struct tm_msg *const *rest,
                           size_t n);
void tm_tpool_append(struct tp_worker *w, struct tm_msg *m);
struct tp_worker *tm_tpool_worker_alloc(struct tpool *tp, unsigned i);
void *tm_tpool_worker_main(void *arg);
/* tm_tpool_watch_main is the watchdog's thread (pool/watch.c). */
void *tm_tpool_watch_main(void *arg);

#endif /* TASKMILL_POOL_THREAD_PRIVATE_H */
