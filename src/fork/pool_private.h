/* fork/pool_private.h - the fork pool's parent side, shared by
 * fork/pool.c (queues, dispatch, timers, children's start, the pool
 * interface) and fork/reap.c (answers, deaths and what they cost). The
 * dispatcher thread owns every struct fp_child; fields marked "mu" are
 * shared with the submitting threads under fpool.mu. */
#ifndef TASKMILL_FORK_POOL_PRIVATE_H
#define TASKMILL_FORK_POOL_PRIVATE_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "task/task.h"
#include "fork/link_private.h"
#include "fork/ring.h"
#include "pool/pool.h"

/* Queue slots per worker, per task: as in the thread pool. */
#define FP_SLOTS_PER_WORKER 64
/* Most messages sent to one child at once. */
#define FP_BATCH_MAX 64
/* Most messages out to one child at once, which its link and its answer
 * ring must hold (fork/link.h, fork/ring.h). */
#define FP_OUT_MAX (FP_BATCH_MAX / 2 + FP_BATCH_MAX)
_Static_assert(FP_OUT_MAX <= TM_RING_ANSWERS_MAX &&
                   TM_RING_ANSWERS_MAX < TM_FORK_LINK_OUT,
               "the rings hold every message out to a child");
/* Work is packed into as few children as keep up: a child gets more
 * messages while the runs it has out are expected to take less than
 * FP_FILL_NS together (a task's run time is learnt from its answers,
 * FP_EST_INIT_NS before the first; FP_EST_COST_NS is what a run costs the
 * child besides the task). Each child woken costs a context switch on
 * both sides; a message waiting behind fast ones in a ring costs little.
 * Slow tasks still get a child each. */
#define FP_FILL_NS (200LL * 1000LL)
/* An idle child whose last run ended less than FP_PACK_IDLE_NS ago is
 * packed as if its next run had just started: it is between the short
 * runs of a stream, and the estimates are fresh. One idle for longer gets
 * one message at a time (a burst after a quiet spell may be of slow runs:
 * it is spread over the children). */
#define FP_PACK_IDLE_NS (2LL * 1000000LL)
#define FP_EST_INIT_NS (1000LL * 1000LL)
#define FP_EST_COST_NS (2LL * 1000LL)
/* While a child has several messages out, the dispatcher looks at the
 * rings at least this often: a child tells of its answers when its ring
 * is empty (fork/child.c), so the answers before a long run are picked up
 * here. */
#define FP_LOOK_NS (10LL * 1000000LL)
/* A child idle this long gives its rings' pages back. */
#define FP_TRIM_IDLE_NS (1000LL * 1000000LL)
/* Time a child gets to exit after SIGTERM before SIGKILL. */
#define FP_KILL_GRACE_NS (1000LL * 1000000LL)
/* A child that dies young while idle (no message charged: a worker init
 * that fails, a broken environment) is restarted after a delay doubling
 * from FP_RESTART_MIN to FP_RESTART_MAX. */
#define FP_YOUNG_NS (1000LL * 1000000LL)
#define FP_RESTART_MIN_NS (100LL * 1000000LL)
#define FP_RESTART_MAX_NS (5000LL * 1000000LL)
/* A task whose runs crash or time out n >= 2 times in a row is held back
 * FP_HOLD_MIN * 2^(n-2), at most FP_HOLD_MAX. */
#define FP_HOLD_MIN_NS (50LL * 1000000LL)
#define FP_HOLD_MAX_NS (2000LL * 1000000LL)

/* struct fp_list is a list of messages linked by next, in order. */
struct fp_list {
    struct tm_msg *head, *tail;
};

/* fp_list_add appends m to l. */
static inline void fp_list_add(struct fp_list *l, struct tm_msg *m)
{
    m->next = NULL;
    if (l->tail != NULL)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
}

/* fp_list_push_front puts m before the first message of l. */
static inline void fp_list_push_front(struct fp_list *l, struct tm_msg *m)
{
    m->next = l->head;
    l->head = m;
    if (l->tail == NULL)
        l->tail = m;
}

/* fp_list_pop takes the first message of l (NULL when empty). */
static inline struct tm_msg *fp_list_pop(struct fp_list *l)
{
    struct tm_msg *m = l->head;
    if (m == NULL)
        return NULL;
    l->head = m->next;
    if (l->head == NULL)
        l->tail = NULL;
    m->next = NULL;
    return m;
}

/* struct fp_tq is one task's queue of messages not sent to a child. */
struct fp_tq {
    struct fp_list q;           /* under mu */
    size_t len;                 /* under mu */
    int64_t hold_until_ns;      /* dispatcher only: damped until then */
    int64_t est_ns;             /* dispatcher only: a run's usual cost */
    unsigned failures;          /* dispatcher only: crashes in a row */
};

struct fp_child {
    unsigned index;
    pid_t pid;                  /* 0: not running */
    int fd;                     /* parent's end, non-blocking */
    struct fp_list out;         /* sent, not answered, in order */
    size_t nout;
    int64_t out_est_ns;         /* the expected cost of the runs out */
    /* sequence numbers: out.head's, and the next one to send; the i-th
     * unanswered message has seq_head + i, so seq_next - seq_head == nout.
     * They go on across restarts: a reply never matches another child's
     * request. */
    uint64_t seq_head, seq_next;
    int64_t cur_start_ns;       /* the running message started (about) */
    int64_t last_end_ns;        /* no run of this child started earlier */
    unsigned tasks_done;        /* since the child started */
    /* the shared rings and the socket's buffers; the socket only wakes
     * the other side, carries bodies and results too large for a ring,
     * and tells of the child's death (EOF) */
    struct tm_fork_link link;
    int64_t idle_since_ns;      /* nout fell to 0 then */
    int ring_used;              /* rings written since the last trim */
    int killing;                /* 1: SIGTERM sent; 2: SIGKILL sent */
    int timed_out;              /* killed for the limit of message kill_seq */
    uint64_t kill_seq;
    const char *corrupt;        /* killed for a malformed reply: why */
    int64_t kill_at_ns;         /* SIGKILL after this */
    int64_t born_ns;
    int64_t respawn_at_ns;      /* 0: no restart pending */
    unsigned young_deaths;
    unsigned zygote;            /* the zygote that forked it and reaps it
                                 * (tm_zygote_spawn) */
};

struct fpool {
    struct tm_pool base;
    unsigned max_tasks;         /* max_tasks_per_child; 0 = never */
    pthread_mutex_t mu;
    pthread_cond_t not_full;    /* submitters */
    pthread_cond_t idle;        /* drain */
    struct fp_tq *tq;           /* per task */
    size_t qlen;                /* queued in every tq (mu) */
    size_t qcap;                /* per task */
    /* submitters waiting on not_full (mu); each waits until its task's
     * queue is down to qcap / 2, so that a full queue costs one wake-up
     * per half a queue of messages, not one per dispatch */
    unsigned full_waiters;
    size_t rr;                  /* dispatcher: the task served next */
    size_t outstanding;         /* sent to children, not answered (mu) */
    size_t popped;              /* dispatcher only */
    atomic_uint busy;
    int draining;
    int abandon;                /* drain deadline passed: kill and drop */
    int shutdown;               /* dispatcher exits */
    int wake_fd;                /* eventfd: the dispatcher has work */
    /* under mu: the dispatcher sleeps in poll (submit writes wake_fd only
     * then), and how many messages were pushed (the dispatcher does not
     * sleep when some were pushed after it last looked at the queues) */
    int sleeping;
    uint64_t pushed;
    pthread_t thread;
    int thread_started;
    struct fp_child *kids;
    const struct tm_cfg *cfg;   /* borrowed; outlives the pool */
    unsigned zgen;              /* generation in the zygote */
    unsigned zattached;         /* the same, as attached (to detach) */
};

/* fp_wake wakes the dispatcher (its eventfd). */
static inline void fp_wake(struct fpool *fp)
{
    uint64_t one = 1;
    if (write(fp->wake_fd, &one, sizeof one) < 0) {
        /* saturated: the dispatcher is awake anyway */
    }
}

/* ---- task queues (under mu) ------------------------------------------ */

static inline void tq_push(struct fpool *fp, struct tm_msg *m)
{
    assert(m->task_index < fp->base.ntasks);
    struct fp_tq *q = &fp->tq[m->task_index];
    fp_list_add(&q->q, m);
    q->len++;
    fp->qlen++;
}

static inline void tq_push_front(struct fpool *fp, struct tm_msg *m)
{
    struct fp_tq *q = &fp->tq[m->task_index];
    fp_list_push_front(&q->q, m);
    q->len++;
    fp->qlen++;
}

static inline struct tm_msg *tq_pop(struct fpool *fp, struct fp_tq *q)
{
    struct tm_msg *m = fp_list_pop(&q->q);
    if (m == NULL)
        return NULL;
    q->len--;
    fp->qlen--;
    return m;
}

/* tm_fp_give_back returns never-started messages (in order): to the
 * front of their task's queue, or unsettled (outcome none) into done when
 * the pool is draining (fork/reap.c). */
void tm_fp_give_back(struct fpool *fp, struct fp_list *unsent,
                     struct fp_list *done);

/* tm_fp_wait_child waits for c's process to end, killing it at until
 * (monotonic ns) if it has not; returns its wait status (fork/reap.c). */
int tm_fp_wait_child(const struct fp_child *c, int64_t until);

/* tm_fp_reap waits for c's process after its socket closed or it was
 * killed, charges the running message (into done), requeues the rest and
 * schedules the restart: at once when a message was charged (its task is
 * damped instead), after a growing delay when the child keeps dying idle
 * (fork/reap.c). */
void tm_fp_reap(struct fpool *fp, struct fp_child *c, struct fp_list *done);

/* tm_fp_read_answers takes c's answers from its ring (and, with sock,
 * first reads its socket: wake-ups, bulk data, EOF) and checks each
 * against the message it must answer; finished messages go to done.
 * Returns -1 when the child's socket closed, or after a malformed answer
 * (c->corrupt says why; the child is killed, the message it ran is
 * charged with a crash) (fork/reap.c). */
int tm_fp_read_answers(struct fpool *fp, struct fp_child *c,
                       struct fp_list *done, int sock);

#endif /* TASKMILL_FORK_POOL_PRIVATE_H */
