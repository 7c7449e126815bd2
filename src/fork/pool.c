/* fork/pool.c - the pre-forked process pool, parent side: crashing task
 * code costs an attempt of its own task, never the daemon nor the other
 * tasks: its queues, the dispatcher, timers, starting children and the
 * pool interface. Answers and deaths are fork/reap.c (the two share
 * fork/pool_private.h); the child side is fork/child.c, the frames
 * fork/wire.c. */
#include "fork/pool_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "task/task.h"
#include "fork/child_private.h"
#include "fork/link_private.h"
#include "fork/wire.h"
#include "fork/zygote_private.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "pool:fork"

/*
 * The parent keeps the broker; children only run tasks. The parent puts
 * a few messages at once into a child's request ring (fork/ring.h, one
 * copy of each body; the socket only wakes the child when it sleeps) and
 * the child answers each in its answer ring as soon as it has run it, so
 * a crash is charged to exactly the message that was running: the ones
 * after it in the batch go back to the queue, never started. An answer is
 * read only once the child has published it whole.
 *
 * One dispatcher thread in the parent owns every child: it polls their
 * sockets (wake-ups, large data, EOF), looks at every child's answer ring
 * each round, writes batches, checks answers, enforces timeouts
 * (SIGTERM, then SIGKILL after a grace period), reaps and restarts
 * children.
 *
 * Messages wait in one queue per task, served in turn. A task whose
 * messages keep killing their process is damped on its own: after a
 * second crash or timeout in a row its queue is held back for a delay
 * that doubles with each further one, and while its circuit breaker is
 * open it is not served at all; the dead child is replaced at once, so
 * the other tasks lose nothing but the fork.
 */

/* wake_sleeper wakes the dispatcher when it sleeps (mu held): awake, it
 * sees what was pushed before it goes to sleep (pushed). */
static void wake_sleeper(struct fpool *fp)
{
    if (fp->sleeping) {
        fp->sleeping = 0;
        fp_wake(fp);
    }
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* held says whether task t's queue waits at now (updating *next to when
 * to look again): damped after crashes, or its circuit breaker open. */
static int held(struct fpool *fp, size_t t, int64_t now, int64_t *next)
{
    const struct fp_tq *q = &fp->tq[t];
    if (q->hold_until_ns > now) {
        if (q->hold_until_ns < *next)
            *next = q->hold_until_ns;
        return 1;
    }
    const struct tm_circuit *cb = &fp->base.tasks[t]->circuit;
    if (tm_circuit_state(cb, now / 1000000LL) == TM_CIRCUIT_OPEN) {
        int64_t until = atomic_load(&cb->until_ms) * 1000000LL;
        if (until < *next)
            *next = until;
        return 1;
    }
    return 0;
}

/* next_task says whose message runs next, serving the tasks in turn and
 * skipping held ones: a task index, or ntasks when none may run now. */
static size_t next_task(struct fpool *fp, int64_t now, int64_t *next)
{
    size_t n = fp->base.ntasks;
    for (size_t i = 0; i < n; i++) {
        size_t t = (fp->rr + i) % n;
        if (fp->tq[t].len == 0 || held(fp, t, now, next))
            continue;
        return t;
    }
    return n;
}

/* take_from takes the next message of task t (next_task's answer). */
static struct tm_msg *take_from(struct fpool *fp, size_t t)
{
    fp->rr = (t + 1) % fp->base.ntasks;
    return tq_pop(fp, &fp->tq[t]);
}


/* fits says whether c takes one more message of task t at now: an idle
 * child always does; a busy one while the runs it has out are expected to
 * end within FP_FILL_NS and the one it runs started (start) less than
 * FP_FILL_NS ago (a run that takes longer than its task's usual, the
 * estimate was wrong: what waits behind it in the ring waits for it, so
 * no more goes there; an idle child's first run starts now when it ran
 * within FP_PACK_IDLE_NS); or, when the queue (left) holds two for every
 * child, one behind the one it runs, so that it never waits for work
 * between runs. Messages of slow tasks stay in the queue otherwise: a
 * stop leaves them to the broker, unstarted. */
static int fits(const struct fpool *fp, const struct fp_child *c, size_t t,
                size_t left, int64_t now, int64_t start)
{
    if (c->nout >= FP_OUT_MAX)
        return 0;
    if (c->nout == 0)
        return 1;
    if (c->out_est_ns + fp->tq[t].est_ns <= FP_FILL_NS &&
        now - start <= FP_FILL_NS)
        return 1;
    return c->nout < 2 && left >= 2 * (size_t)fp->base.size;
}

/* dispatch hands queued messages to children, filling the first ones as
 * far as they keep up (fits) before it wakes the next: a burst of fast
 * messages goes to one child in one wake-up, slow ones one per child.
 * *next learns when a held task may run again. */
static void dispatch(struct fpool *fp, int64_t now, int64_t *next,
                     struct fp_list *done)
{
    struct tm_pool *p = &fp->base;
    for (unsigned i = 0; i < p->size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid == 0 || c->killing)
            continue;
        /* the answers in its ring first: what it has out, and since when
         * it runs the oldest (fits) */
        if (c->nout > 0 && tm_fp_read_answers(fp, c, done, 0) != 0) {
            tm_fp_reap(fp, c, done);
            continue;
        }
        if (c->nout >= FP_OUT_MAX)
            continue;
        pthread_mutex_lock(&fp->mu);
        if (fp->qlen == 0 || fp->draining) {
            pthread_mutex_unlock(&fp->mu);
            break;
        }
        size_t share = FP_BATCH_MAX;
        if (fp->max_tasks > 0) {
            size_t left = fp->max_tasks > c->tasks_done + c->nout
                              ? fp->max_tasks - c->tasks_done - c->nout
                              : 0;
            if (share > left)
                share = left;
        }
        int low = 0; /* a queue taken from is down to its low mark */
        int was_idle = c->nout == 0;
        int64_t start = c->cur_start_ns;
        if (was_idle && now - c->last_end_ns <= FP_PACK_IDLE_NS)
            start = now;
        struct tm_msg *before = c->out.tail; /* the last one already out */
        int64_t est_before = c->out_est_ns;
        struct tm_msg *first = NULL;
        size_t k = 0;
        while (k < share) {
            size_t t = next_task(fp, now, next);
            if (t == p->ntasks || !fits(fp, c, t, fp->qlen, now, start))
                break;
            struct tm_msg *m = take_from(fp, t);
            if (fp->tq[t].len <= fp->qcap / 2)
                low = 1;
            fp_list_add(&c->out, m);
            c->nout++;
            c->out_est_ns += fp->tq[t].est_ns;
            if (first == NULL)
                first = m;
            k++;
        }
        fp->outstanding += k;
        if (low && fp->full_waiters > 0)
            pthread_cond_broadcast(&fp->not_full);
        int more_queued = fp->qlen > 0;
        pthread_mutex_unlock(&fp->mu);
        if (k == 0)
            continue;
        /* into the ring; what finds no room there goes back to its queue
         * (the ring fills up with large bodies) */
        struct tm_msg *prev = NULL, *m = first;
        int64_t est_put = est_before;
        for (; m != NULL; prev = m, m = m->next) {
            if (tm_fork_link_put(&c->link, m, c->seq_next) != 0)
                break;
            c->seq_next++;
            est_put += fp->tq[m->task_index].est_ns;
        }
        if (m != NULL) {
            struct fp_list unsent = {0};
            /* m and those after it leave the child's list */
            if (prev == NULL)
                prev = before;
            if (prev != NULL)
                prev->next = NULL;
            else
                c->out.head = NULL;
            c->out.tail = prev;
            c->out_est_ns = est_put;
            for (struct tm_msg *n; m != NULL; m = n) {
                n = m->next;
                c->nout--;
                fp->popped++;
                fp_list_add(&unsent, m);
            }
            tm_fp_give_back(fp, &unsent, done);
        }
        assert(c->seq_next - c->seq_head == c->nout);
        assert(c->nout <= FP_OUT_MAX);
        if (c->nout == 0)
            continue;
        c->ring_used = 1;
        /* while messages wait in the queues, the child tells of its
         * answers when it has run about half of what is out, so that its
         * ring is refilled before it runs dry; else when it has run all
         * (a wake-up halfway would find nothing to hand it; what is
         * pushed meanwhile wakes this thread anyway) */
        tm_fork_link_publish(&c->link, more_queued
                                           ? c->seq_head + (c->nout - 1) / 2
                                           : c->seq_next - 1);
        if (was_idle)
            c->cur_start_ns = tm_now_ns();
        if (tm_fork_link_flush(&c->link, c->fd) != 0) {
            /* the child is gone; its socket's EOF reaps it */
            tm_log_debug(SRC, "worker %u: write failed", c->index);
        }
    }
}

/* check_timers enforces running messages' limits and kill grace. A
 * child's answers are read first, so that a run that has just finished is
 * never taken for the one running past its limit. */
static void check_timers(struct fpool *fp, int64_t now, int64_t *next,
                         struct fp_list *done)
{
    for (unsigned i = 0; i < fp->base.size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid == 0)
            continue;
        if (c->killing) {
            if (now >= c->kill_at_ns && c->killing == 1) {
                kill(c->pid, SIGKILL);
                c->killing = 2;
            } else if (c->kill_at_ns < *next) {
                *next = c->kill_at_ns;
            }
            continue;
        }
        if (c->out.head == NULL)
            continue;
        int64_t limit = c->out.head->task->cfg->timeout_ms;
        if (limit <= 0)
            continue;
        int64_t deadline = c->cur_start_ns + limit * 1000000LL;
        if (now < deadline) {
            if (deadline < *next)
                *next = deadline;
            continue;
        }
        if (tm_fp_read_answers(fp, c, done, 1) != 0) {
            tm_fp_reap(fp, c, done);
            continue;
        }
        if (c->out.head == NULL)
            continue;
        limit = c->out.head->task->cfg->timeout_ms;
        deadline = c->cur_start_ns + limit * 1000000LL;
        if (limit <= 0 || now < deadline) {
            if (limit > 0 && deadline < *next)
                *next = deadline;
            continue;
        }
        tm_log_write(TM_LOG_WARNING, SRC, c->out.head->task->cfg->name,
                     c->out.head->id, "worker %u ran past the %lld ms "
                     "limit; killing it", i, (long long)limit);
        /* the message at fault; the kill may land after it answered */
        c->timed_out = 1;
        c->kill_seq = c->seq_head;
        c->killing = 1;
        c->kill_at_ns = now + FP_KILL_GRACE_NS;
        kill(c->pid, SIGTERM);
        if (c->kill_at_ns < *next)
            *next = c->kill_at_ns;
    }
}

/* spawn starts child c, forked by the zygote (never by this process,
 * which has threads). Returns 0, or -1 with a restart scheduled: when the
 * zygote is down, at the time it may be back. */
static int spawn(struct fpool *fp, struct fp_child *c)
{
    int fd = -1;
    int64_t retry = 0;
    pid_t pid = tm_zygote_spawn(fp->zgen, c->index, fp->max_tasks, &fd,
                                &c->zygote, &retry);
    if (pid < 0) {
        c->respawn_at_ns =
            retry > 0 ? retry : tm_now_ns() + FP_RESTART_MAX_NS;
        return -1;
    }
    if (set_nonblock(fd) != 0)
        tm_log_warn(SRC, "worker %u: cannot make its socket non-blocking",
                    c->index);
    if (tm_fork_link_open(&c->link, fd) != 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_err(SRC, "worker %u: cannot share its rings: %s", c->index,
                   tm_strerror(errno, eb, sizeof eb));
        kill(pid, SIGKILL);
        c->pid = pid;
        tm_fp_wait_child(c, tm_now_ns() + FP_KILL_GRACE_NS);
        c->pid = 0;
        close(fd);
        c->respawn_at_ns = tm_now_ns() + FP_RESTART_MAX_NS;
        return -1;
    }
    c->fd = fd;
    c->pid = pid;
    c->born_ns = tm_now_ns();
    c->last_end_ns = c->born_ns;
    c->respawn_at_ns = 0;
    c->tasks_done = 0;
    c->killing = 0;
    c->timed_out = 0;
    c->corrupt = NULL;
    c->idle_since_ns = c->born_ns;
    c->ring_used = 0;
    assert(c->nout == 0 && c->seq_head == c->seq_next);
    tm_log_debug(SRC, "worker %u started (pid %d)", c->index, (int)pid);
    return 0;
}

/* trim_idle gives back the ring pages of children idle for a while
 * (after a burst of large bodies they would stay resident). */
static void trim_idle(struct fpool *fp, int64_t now)
{
    for (unsigned i = 0; i < fp->base.size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid != 0 && c->ring_used && c->nout == 0 && !c->killing &&
            now - c->idle_since_ns >= FP_TRIM_IDLE_NS) {
            tm_fork_link_trim(&c->link);
            c->ring_used = 0;
        }
    }
}

static void *dispatcher_main(void *arg)
{
    struct fpool *fp = arg;
    struct tm_pool *p = &fp->base;
    struct pollfd *pfd = tm_calloc(p->size + 1, sizeof *pfd);
    int *who = tm_calloc(p->size + 1, sizeof *who);

    for (;;) {
        struct fp_list done = {0};
        int64_t now = tm_now_ns();
        int64_t next = now + 1000LL * 1000000LL;

        pthread_mutex_lock(&fp->mu);
        int shutdown = fp->shutdown, abandon = fp->abandon;
        uint64_t pushed = fp->pushed; /* dispatch() below sees these */
        pthread_mutex_unlock(&fp->mu);
        if (shutdown)
            break;
        if (abandon) {
            for (unsigned i = 0; i < p->size; i++) {
                struct fp_child *c = &fp->kids[i];
                if (c->pid != 0 && c->nout > 0) {
                    kill(c->pid, SIGKILL);
                    tm_fp_reap(fp, c, &done);
                }
            }
        }

        /* (re)start children whose time has come */
        for (unsigned i = 0; i < p->size && !abandon; i++) {
            struct fp_child *c = &fp->kids[i];
            if (c->pid == 0 && c->respawn_at_ns > 0) {
                if (now >= c->respawn_at_ns)
                    spawn(fp, c);
                else if (c->respawn_at_ns < next)
                    next = c->respawn_at_ns;
            }
        }
        dispatch(fp, now, &next, &done);
        check_timers(fp, now, &next, &done);
        unsigned busy_now = 0;
        int stacked = 0;
        for (unsigned i = 0; i < p->size; i++) {
            if (fp->kids[i].nout > 0)
                busy_now++;
            if (fp->kids[i].nout > 1)
                stacked = 1;
        }
        atomic_store_explicit(&fp->busy, busy_now, memory_order_relaxed);
        /* answers not told of yet (fork/child.c: only a child with more
         * than one request out may hold one back) are looked for */
        if (stacked && now + FP_LOOK_NS < next)
            next = now + FP_LOOK_NS;

        size_t n = 0;
        int hurry = 0;
        pfd[n].fd = fp->wake_fd;
        pfd[n].events = POLLIN;
        who[n++] = -1;
        for (unsigned i = 0; i < p->size; i++) {
            struct fp_child *c = &fp->kids[i];
            if (c->pid == 0)
                continue;
            pfd[n].fd = c->fd;
            pfd[n].events = POLLIN |
                            (tm_fork_link_pending(&c->link) ? POLLOUT : 0);
            who[n++] = (int)i;
            /* answers that came while this thread was busy: no sleep */
            if (tm_fork_link_arm(&c->link))
                hurry = 1;
        }
        /* messages pushed since dispatch() looked: no sleep; pushed
         * after this: submit wakes this thread */
        pthread_mutex_lock(&fp->mu);
        if (fp->pushed != pushed)
            hurry = 1;
        fp->sleeping = !hurry;
        pthread_mutex_unlock(&fp->mu);
        int64_t wait_ms = (next - now) / 1000000LL + 1;
        if (wait_ms < 0 || hurry)
            wait_ms = 0;
        if (wait_ms > 1000)
            wait_ms = 1000;
        int rc = poll(pfd, n, (int)wait_ms);
        if (!hurry) {
            pthread_mutex_lock(&fp->mu);
            fp->sleeping = 0;
            pthread_mutex_unlock(&fp->mu);
        }
        for (unsigned i = 0; i < p->size; i++)
            if (fp->kids[i].pid != 0)
                tm_fork_link_disarm(&fp->kids[i].link);
        if (rc > 0) {
            if (pfd[0].revents & POLLIN) {
                uint64_t cnt;
                if (read(fp->wake_fd, &cnt, sizeof cnt) < 0) {
                    /* spurious */
                }
            }
        }
        /* every child's ring: most answers come without a wake-up */
        for (size_t k = 1; k < n; k++) {
            struct fp_child *c = &fp->kids[who[k]];
            short ev = rc > 0 ? pfd[k].revents : 0;
            if (c->pid == 0)
                continue; /* reaped by check_timers' read meanwhile */
            if (ev & POLLOUT && tm_fork_link_flush(&c->link, c->fd) != 0)
                ev |= POLLHUP;
            if (rc >= 0 && (ev & (POLLIN | POLLHUP | POLLERR)) == 0)
                tm_fork_link_sock_quiet(&c->link);
            if (tm_fp_read_answers(fp, c, &done,
                             (ev & (POLLIN | POLLHUP | POLLERR)) != 0) != 0)
                tm_fp_reap(fp, c, &done);
        }
        trim_idle(fp, tm_now_ns());
        unsigned busy = 0;
        for (unsigned i = 0; i < p->size; i++)
            if (fp->kids[i].nout > 0)
                busy++;
        atomic_store_explicit(&fp->busy, busy, memory_order_relaxed);
        if (done.head != NULL)
            p->done(p->done_ctx, done.head);
        if (fp->popped > 0) {
            pthread_mutex_lock(&fp->mu);
            fp->outstanding -= fp->popped;
            fp->popped = 0;
            if (fp->outstanding == 0)
                pthread_cond_broadcast(&fp->idle);
            pthread_mutex_unlock(&fp->mu);
        }
    }

    /* shutdown: closing the sockets tells idle children to run their
     * worker fini and exit; stragglers are killed */
    for (unsigned i = 0; i < p->size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid != 0)
            shutdown(c->fd, SHUT_WR);
    }
    int64_t until = tm_now_ns() + FP_KILL_GRACE_NS;
    for (unsigned i = 0; i < p->size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid == 0)
            continue;
        tm_fp_wait_child(c, until);
        tm_fork_link_close(&c->link);
        close(c->fd);
        c->fd = -1;
        c->pid = 0;
    }
    tm_free(pfd);
    tm_free(who);
    return NULL;
}

/* ---- the pool interface ---------------------------------------------- */

static struct tm_pool *fp_create(const struct tm_cfg *cfg,
                                 struct tm_task **tasks, size_t ntasks,
                                 tm_pool_done_fn done, void *done_ctx)
{
    struct fpool *fp = tm_calloc(1, sizeof *fp);
    fp->base.ops = &tm_pool_fork_ops;
    fp->base.size = cfg->pool_size;
    fp->base.tasks = tasks;
    fp->base.ntasks = ntasks;
    fp->base.done = done;
    fp->base.done_ctx = done_ctx;
    fp->max_tasks = cfg->max_tasks_per_child;
    fp->cfg = cfg;
    fp->qcap = (size_t)cfg->pool_size * FP_SLOTS_PER_WORKER;
    fp->tq = tm_calloc(ntasks ? ntasks : 1, sizeof *fp->tq);
    for (size_t t = 0; t < ntasks; t++)
        fp->tq[t].est_ns = FP_EST_INIT_NS;
    fp->wake_fd = -1;
    pthread_mutex_init(&fp->mu, NULL);
    pthread_cond_init(&fp->not_full, NULL);
    pthread_cond_init(&fp->idle, NULL);
    fp->kids = tm_calloc(cfg->pool_size, sizeof *fp->kids);
    for (unsigned i = 0; i < cfg->pool_size; i++) {
        fp->kids[i].index = i;
        fp->kids[i].fd = -1;
        fp->kids[i].link.memfd = -1;
    }
    return &fp->base;
}

/* fp_prepare (a reload's pool) has the zygote load the pool's tasks:
 * their cb_init runs there, before the running configuration stops. */
static int fp_prepare(struct tm_pool *p, char *err, size_t errlen)
{
    struct fpool *fp = (struct fpool *)p;
    if (tm_zygote_attach(fp->cfg, p->tasks, p->ntasks, &fp->zgen, err,
                         errlen) != 0)
        return -1;
    fp->zattached = fp->zgen;
    return 0;
}

static int fp_start(struct tm_pool *p)
{
    struct fpool *fp = (struct fpool *)p;
    char err[512];
    /* the first pool starts the zygote (its seed) here, while the daemon
     * has no other thread; a reload's was attached by fp_prepare */
    if (fp->zattached == 0) {
        if (fp_prepare(p, err, sizeof err) != 0) {
            tm_log_err(SRC, "%s", err);
            return -1;
        }
    }
    fp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fp->wake_fd < 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_err(SRC, "eventfd: %s", tm_strerror(errno, eb, sizeof eb));
        return -1;
    }
    for (unsigned i = 0; i < p->size; i++) {
        if (spawn(fp, &fp->kids[i]) != 0)
            goto fail;
    }
    if (pthread_create(&fp->thread, NULL, dispatcher_main, fp) != 0) {
        tm_log_err(SRC, "cannot start the dispatcher thread");
        goto fail;
    }
    fp->thread_started = 1;
    tm_log_info(SRC, "%u worker processes started", p->size);
    return 0;
fail:
    for (unsigned i = 0; i < p->size; i++) {
        struct fp_child *c = &fp->kids[i];
        if (c->pid != 0) {
            tm_fp_wait_child(c, tm_now_ns());
            tm_fork_link_close(&c->link);
            close(c->fd);
            c->pid = 0;
            c->fd = -1;
        }
    }
    return -1;
}

static size_t fp_submit(struct tm_pool *p, struct tm_msg *msgs, size_t n)
{
    struct fpool *fp = (struct fpool *)p;
    size_t done = 0, unwoken = 0;
    pthread_mutex_lock(&fp->mu);
    while (done < n) {
        struct tm_msg *m = &msgs[done];
        assert(m->task_index < p->ntasks);
        /* backpressure per task: a task held back never blocks another
         * task's intake. A full queue takes more once it is down to half
         * (dispatch() wakes the waiters then): the queue never holds more
         * than qcap, and the dispatcher, which has half a queue left to
         * hand out, does not wake this thread for every few messages it
         * takes */
        if (fp->tq[m->task_index].len >= fp->qcap && !fp->draining) {
            if (unwoken > 0) {
                wake_sleeper(fp);
                unwoken = 0;
            }
            fp->full_waiters++;
            while (fp->tq[m->task_index].len > fp->qcap / 2 &&
                   !fp->draining)
                pthread_cond_wait(&fp->not_full, &fp->mu);
            fp->full_waiters--;
        }
        if (fp->draining)
            break;
        tq_push(fp, m);
        fp->pushed++;
        done++;
        unwoken++;
    }
    if (unwoken > 0)
        wake_sleeper(fp);
    pthread_mutex_unlock(&fp->mu);
    return done;
}

static int fp_drain(struct tm_pool *p, int64_t deadline_ns)
{
    struct fpool *fp = (struct fpool *)p;
    struct fp_list back = {0};
    pthread_mutex_lock(&fp->mu);
    fp->draining = 1;
    pthread_cond_broadcast(&fp->not_full);
    for (size_t t = 0; t < p->ntasks; t++) {
        struct tm_msg *m;
        while ((m = tq_pop(fp, &fp->tq[t])) != NULL) {
            m->outcome = TM_OUT_NONE;
            fp_list_add(&back, m);
        }
    }
    assert(fp->qlen == 0);
    int rc = 0;
    while (fp->outstanding > 0) {
        int64_t now = tm_now_ns();
        if (now >= deadline_ns) {
            rc = -1;
            fp->abandon = 1;
            break;
        }
        int64_t wait = deadline_ns - now;
        tm_cond_wait_ns(&fp->idle, &fp->mu,
                        wait < 100000000LL ? wait : 100000000LL);
    }
    pthread_mutex_unlock(&fp->mu);
    if (back.head != NULL)
        p->done(p->done_ctx, back.head);
    if (rc != 0) {
        /* the dispatcher kills busy children and hands their messages
         * back unsettled; wait for that so none is left behind */
        fp_wake(fp);
        pthread_mutex_lock(&fp->mu);
        while (fp->outstanding > 0) {
            tm_cond_wait_ns(&fp->idle, &fp->mu, 100000000LL);
        }
        pthread_mutex_unlock(&fp->mu);
    }
    return rc;
}

static unsigned fp_busy(struct tm_pool *p)
{
    struct fpool *fp = (struct fpool *)p;
    return atomic_load_explicit(&fp->busy, memory_order_relaxed);
}

static void fp_destroy(struct tm_pool *p)
{
    if (p == NULL)
        return;
    struct fpool *fp = (struct fpool *)p;
    pthread_mutex_lock(&fp->mu);
    fp->shutdown = 1;
    fp->draining = 1;
    pthread_mutex_unlock(&fp->mu);
    if (fp->thread_started) {
        fp_wake(fp);
        pthread_join(fp->thread, NULL);
    }
    for (unsigned i = 0; i < p->size; i++)
        tm_fork_link_free(&fp->kids[i].link);
    if (fp->wake_fd >= 0)
        close(fp->wake_fd);
    tm_zygote_detach(fp->zattached);
    pthread_mutex_destroy(&fp->mu);
    pthread_cond_destroy(&fp->not_full);
    pthread_cond_destroy(&fp->idle);
    tm_free(fp->kids);
    tm_free(fp->tq);
    tm_free(fp);
}

const struct tm_pool_ops tm_pool_fork_ops = {
    .kind = "fork",
    .create = fp_create,
    .prepare = fp_prepare,
    .start = fp_start,
    .submit = fp_submit,
    .drain = fp_drain,
    .busy = fp_busy,
    .destroy = fp_destroy,
};
