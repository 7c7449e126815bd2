/*
 * pool.h - the worker pool interface: one vtable (struct tm_pool_ops), a
 * kind per implementation. The thread pool is this folder's (thread.c,
 * its deadline watchdog watch.c, their state pool_private.h); the fork
 * pool is fork/'s; pool.c holds what every kind shares.
 *
 * cycle: thread.c watch.c - one pool in two files: thread.c starts the
 * watchdog thread (tm_tpool_watch_main), and the watchdog replaces the
 * worker of a run it settled at its deadline (tm_tpool_worker_alloc,
 * tm_tpool_worker_main) and gives back that worker's queued messages
 * (tm_tpool_requeue_front) under the pool's one lock.
 */
#ifndef TASKMILL_POOL_H
#define TASKMILL_POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "task/msg.h"

struct tm_pool;
struct tm_task;

/* struct tm_pool_stuck describes a run settled at its deadline as a
 * timeout whose code has not returned yet. */
#define TM_POOL_STUCK_ID_MAX 128
struct tm_pool_stuck {
    size_t task_index;          /* index in the pool's tasks */
    char id[TM_POOL_STUCK_ID_MAX]; /* message id, cut to fit */
    int64_t deadline_ns;        /* monotonic: when it should have ended */
};

/* tm_pool_done_fn receives finished messages (a list linked by next) from
 * whichever thread finished them; it must be cheap and thread-safe. */
typedef void (*tm_pool_done_fn)(void *ctx, struct tm_msg *list);

/*
 * struct tm_pool_ops is filled by each pool kind (pool/thread.c, fork/pool.c).
 * submit is called by intake threads (several at once); drain and destroy
 * by the main thread.
 */
struct tm_pool_ops {
    const char *kind; /* "thread", "fork" */

    /* create allocates a pool of cfg->pool_size workers for the tasks
     * (cfg and tasks are borrowed; they outlive the pool). No worker
     * starts yet. */
    struct tm_pool *(*create)(const struct tm_cfg *cfg,
                              struct tm_task **tasks, size_t ntasks,
                              tm_pool_done_fn done, void *done_ctx);

    /* prepare, optional, is called for a reload's pool right after
     * create, before the running configuration's intake stops: what it
     * refuses (-1 with a reason in err, FILE:LINE:COL: ... when it is a
     * task's) refuses the reload with nothing stopped. The fork pool
     * has its worker zygote load the generation there (each new task's
     * cb_init). NULL: nothing to do. */
    int (*prepare)(struct tm_pool *p, char *err, size_t errlen);

    /* start starts the workers; each runs every task's cb_worker_init.
     * Returns 0, or -1 (nothing left running). */
    int (*start)(struct tm_pool *p);

    /* submit hands the n messages of the array msgs (usually a batch's
     * msgs[]) to the workers. It blocks while the pool is full
     * (backpressure; the fork pool counts per task, so that a task held
     * back never blocks another's intake), and returns how many it
     * accepted, in array order: n,
     * or fewer once the pool is draining (the caller leaves the rest
     * unacknowledged). */
    size_t (*submit)(struct tm_pool *p, struct tm_msg *msgs, size_t n);

    /* submit_runs, optional, hands nruns runs at once (run i: the lens[i]
     * messages of the array runs[i]), as submit would one run after the
     * other, and writes submit's answer for run i to accepted[i]. One
     * lock and one wake-up of the workers per filling of the queue, not
     * per run: a lane reading a hundred tasks hands over their hundred
     * small batches as one. NULL: the caller calls submit per run. */
    void (*submit_runs)(struct tm_pool *p, struct tm_msg *const *runs,
                        const size_t *lens, size_t nruns, size_t *accepted);

    /* drain stops intake, lets running messages finish until deadline_ns
     * (monotonic) and passes queued, never-started messages to done with
     * outcome TM_OUT_NONE. Runs already settled at their own deadline
     * (stuck) are not waited for. Returns 0 when everything finished in
     * time, -1 when runs were abandoned at the deadline or stuck runs
     * are still in task code (the plugins must stay loaded). */
    int (*drain)(struct tm_pool *p, int64_t deadline_ns);

    /* busy returns how many workers are running a message now. */
    unsigned (*busy)(struct tm_pool *p);

    /* stuck, optional, copies up to max of the runs settled at their
     * deadline that have not returned (struct tm_pool_stuck) to out and
     * returns how many there are. NULL: the pool has none (the fork pool
     * kills a child past its limit). */
    size_t (*stuck)(struct tm_pool *p, struct tm_pool_stuck *out,
                    size_t max);

    /* destroy stops the workers (after drain) and frees the pool. */
    void (*destroy)(struct tm_pool *p);
};

/* struct tm_pool is the common head of every pool kind's state. */
struct tm_pool {
    const struct tm_pool_ops *ops;
    unsigned size;
    struct tm_task **tasks;
    size_t ntasks;
    tm_pool_done_fn done;
    void *done_ctx;
    atomic_ulong restarts;          /* workers replaced */
};

/* tm_pool_stuck_runs sets *out to an allocated array (tm_free it) of
 * the pool's stuck runs (tm_pool_ops.stuck) and returns its length; 0 and
 * NULL when there are none (p may be NULL). */
size_t tm_pool_stuck_runs(struct tm_pool *p, struct tm_pool_stuck **out);

extern const struct tm_pool_ops tm_pool_thread_ops;
extern const struct tm_pool_ops tm_pool_fork_ops;

#endif /* TASKMILL_POOL_H */
