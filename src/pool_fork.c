/* pool_fork.c - the pre-forked process pool: crashing task code costs one
 * attempt, never the daemon. */
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "util.h"

#define SRC "pool:fork"

/*
 * The parent keeps the broker; children only run tasks. Each child talks
 * to the parent over a socketpair with a small framed protocol:
 *
 *   parent -> child   struct fp_req, then id, invalid reason, body bytes
 *   child -> parent   struct fp_resp, then error, result bytes
 *
 * The parent sends a child a few messages at once (one write for the
 * batch) and the child answers each as soon as it has run it, so a crash
 * is charged to exactly the message that was running: the ones after it
 * in the batch go back to the queue, never started.
 *
 * One dispatcher thread in the parent owns every child: it polls their
 * sockets, writes batches, reads answers, enforces timeouts (SIGTERM, then
 * SIGKILL after a grace period), reaps and restarts children, with a
 * growing delay when they keep dying young.
 */

#define FP_MAGIC_REQ 0x544d5251u  /* "TMRQ" */
#define FP_MAGIC_RESP 0x544d5253u /* "TMRS" */
/* Queue slots per worker, as in the thread pool. */
#define FP_SLOTS_PER_WORKER 64
/* Most messages sent to one child at once. */
#define FP_BATCH_MAX 16
/* Time a child gets to exit after SIGTERM before SIGKILL. */
#define FP_KILL_GRACE_NS (1000LL * 1000000LL)
/* A child that dies younger than this counts towards the crash-loop
 * damping; restart delays double from FP_RESTART_MIN to FP_RESTART_MAX. */
#define FP_YOUNG_NS (1000LL * 1000000LL)
#define FP_RESTART_MIN_NS (100LL * 1000000LL)
#define FP_RESTART_MAX_NS (5000LL * 1000000LL)

struct fp_req {
    uint32_t magic;
    uint32_t task_index;
    uint32_t attempt;
    uint32_t id_len;
    uint32_t invalid_len;
    uint32_t has_body;
    uint64_t body_len;
};

struct fp_resp {
    uint32_t magic;
    uint32_t outcome;
    uint32_t error_len;
    uint32_t pad;
    uint64_t result_len;
    int64_t t_start_ns;
    int64_t t_end_ns;
};

struct fp_buf {
    char *p;
    size_t len, off, cap;
};

struct fp_child {
    unsigned index;
    pid_t pid;                  /* 0: not running */
    int fd;                     /* parent's end, non-blocking */
    struct tm_msg *out_head;    /* sent, not answered, in order */
    struct tm_msg *out_tail;
    size_t nout;
    int64_t cur_start_ns;       /* the running message started (about) */
    unsigned tasks_done;        /* since the child started */
    struct fp_buf w, r;
    int killing;                /* 1: SIGTERM sent; 2: SIGKILL sent */
    int timed_out;              /* killed for the running message's limit */
    int64_t kill_at_ns;         /* SIGKILL after this */
    int64_t born_ns;
    int64_t respawn_at_ns;      /* 0: no restart pending */
    unsigned young_deaths;
};

struct fpool {
    struct tm_pool base;
    unsigned max_tasks;         /* max_tasks_per_child; 0 = never */
    pthread_mutex_t mu;
    pthread_cond_t not_full;    /* submitters */
    pthread_cond_t idle;        /* drain */
    struct tm_msg *q_head, *q_tail;  /* queued, not sent to a child */
    size_t qlen, qcap;
    size_t outstanding;         /* sent to children, not answered (mu) */
    size_t popped;              /* dispatcher only */
    atomic_uint busy;
    int draining;
    int abandon;                /* drain deadline passed: kill and drop */
    int shutdown;               /* dispatcher exits */
    int wake_fd;                /* eventfd: the dispatcher has work */
    pthread_t thread;
    int thread_started;
    pid_t parent_pid;
    struct fp_child *kids;
};

/* ---- buffers and I/O ------------------------------------------------ */

static void buf_put(struct fp_buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = tm_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static int write_full(int fd, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void wake(struct fpool *fp)
{
    uint64_t one = 1;
    if (write(fp->wake_fd, &one, sizeof one) < 0) {
        /* saturated: the dispatcher is awake anyway */
    }
}

/* ---- the child ------------------------------------------------------- */

/* child_take copies the next n bytes the parent sent into dst, reading
 * from fd in bulk (a whole batch per read when it fits) through b.
 * Returns 0, or -1 when the parent closed the socket. */
static int child_take(int fd, struct fp_buf *b, void *dst, size_t n)
{
    char *out = dst;
    while (n > 0) {
        if (b->off == b->len) {
            if (b->cap == 0) {
                b->cap = 256 * 1024;
                b->p = tm_malloc(b->cap);
            }
            b->off = b->len = 0;
            ssize_t r = read(fd, b->p, b->cap);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return -1;
            b->len = (size_t)r;
        }
        size_t k = b->len - b->off < n ? b->len - b->off : n;
        memcpy(out, b->p + b->off, k);
        b->off += k;
        out += k;
        n -= k;
    }
    return 0;
}

static void child_exit_now(int status, void *arg)
{
    (void)arg;
    _exit(status);
}

static void child_main(struct fpool *fp, struct fp_child *me, int fd)
{
    on_exit(child_exit_now, NULL);
    struct tm_pool *p = &fp->base;

    /* die with the parent, even when it is killed with SIGKILL */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != fp->parent_pid)
        _exit(1);
    /* the parent stops gracefully; children only obey SIGTERM/SIGKILL */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    /* other children's sockets and the parent's wake-up belong to the
     * parent */
    for (unsigned i = 0; i < p->size; i++)
        if (fp->kids[i].fd >= 0)
            close(fp->kids[i].fd);
    close(fp->wake_fd);

    /* file-level so that they stay reachable when task code calls exit()
     * in the middle of a run (leak checkers look at globals) */
    static void **wdata;
    static struct fp_buf in, out;
    wdata = tm_calloc(p->ntasks ? p->ntasks : 1, sizeof *wdata);
    for (size_t t = 0; t < p->ntasks; t++) {
        const struct tm_task_plugin *d = &p->tasks[t]->plugin->desc;
        if (d->cb_worker_init != NULL &&
            d->cb_worker_init(p->tasks[t]->plugin->task_data,
                              &wdata[t]) != 0) {
            tm_log_err(SRC, "worker %u: task '%s' refused its worker init",
                       me->index, p->tasks[t]->cfg->name);
            _exit(3);
        }
    }

    unsigned done = 0;
    static struct fp_buf rb; /* what the parent sent, read in bulk */
    for (;;) {
        struct fp_req rq;
        if (child_take(fd, &rb, &rq, sizeof rq) != 0)
            break; /* the parent closed: stop */
        if (rq.magic != FP_MAGIC_REQ || rq.task_index >= p->ntasks)
            _exit(4);
        size_t need = (size_t)rq.id_len + rq.invalid_len + rq.body_len + 3;
        if (need > in.cap) {
            in.p = tm_realloc(in.p, need);
            in.cap = need;
        }
        char *id = in.p;
        char *invalid = id + rq.id_len + 1;
        char *body = invalid + rq.invalid_len + 1;
        if (child_take(fd, &rb, id, rq.id_len) != 0 ||
            child_take(fd, &rb, invalid, rq.invalid_len) != 0 ||
            child_take(fd, &rb, body, rq.body_len) != 0)
            break;
        id[rq.id_len] = '\0';
        invalid[rq.invalid_len] = '\0';
        body[rq.body_len] = '\0';

        struct tm_msg m;
        memset(&m, 0, sizeof m);
        m.task = p->tasks[rq.task_index];
        m.task_index = rq.task_index;
        m.id = id;
        m.id_len = rq.id_len;
        m.body = rq.has_body ? body : NULL;
        m.body_len = rq.body_len;
        /* the reason is static in the parent; here it points into the
         * buffer, which lives until the run ends */
        m.invalid = rq.invalid_len > 0 ? invalid : NULL;
        m.attempt = rq.attempt;
        tm_exec_run(&m, wdata[rq.task_index]);

        struct fp_resp rs = {
            .magic = FP_MAGIC_RESP,
            .outcome = (uint32_t)m.outcome,
            .error_len = m.error ? (uint32_t)strlen(m.error) : 0,
            .result_len = m.result ? m.result_len : 0,
            .t_start_ns = m.t_start_ns,
            .t_end_ns = m.t_end_ns,
        };
        out.len = 0;
        buf_put(&out, &rs, sizeof rs);
        if (rs.error_len)
            buf_put(&out, m.error, rs.error_len);
        if (rs.result_len)
            buf_put(&out, m.result, rs.result_len);
        tm_free(m.error);
        tm_free(m.result);
        if (write_full(fd, out.p, out.len) != 0)
            break;
        done++;
        if (fp->max_tasks > 0 && done >= fp->max_tasks)
            break; /* recycled: the parent starts a fresh child */
    }
    for (size_t t = 0; t < p->ntasks; t++) {
        const struct tm_task_plugin *d = &p->tasks[t]->plugin->desc;
        if (d->cb_worker_fini != NULL)
            d->cb_worker_fini(p->tasks[t]->plugin->task_data, wdata[t]);
    }
    /* _exit: no atexit handlers or stdio flushes inherited from the
     * parent run here */
    _exit(0);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* spawn starts child c. Returns 0, or -1 with a restart scheduled. */
static int spawn(struct fpool *fp, struct fp_child *c)
{
    int sv[2];
    char eb[TM_STRERRNO_BUF];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        tm_log_err(SRC, "socketpair: %s", tm_strerror(errno, eb, sizeof eb));
        c->respawn_at_ns = tm_now_ns() + FP_RESTART_MAX_NS;
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        tm_log_err(SRC, "fork: %s", tm_strerror(errno, eb, sizeof eb));
        close(sv[0]);
        close(sv[1]);
        c->respawn_at_ns = tm_now_ns() + FP_RESTART_MAX_NS;
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        child_main(fp, c, sv[1]);
        _exit(0);
    }
    close(sv[1]);
    set_nonblock(sv[0]);
    c->fd = sv[0];
    c->pid = pid;
    c->born_ns = tm_now_ns();
    c->respawn_at_ns = 0;
    c->tasks_done = 0;
    c->killing = 0;
    c->timed_out = 0;
    c->w.len = c->w.off = 0;
    c->r.len = c->r.off = 0;
    tm_log_debug(SRC, "worker %u started (pid %d)", c->index, (int)pid);
    return 0;
}

/* ---- the parent: completion and failure ------------------------------ */

struct fp_list {
    struct tm_msg *head, *tail;
};

static void list_add(struct fp_list *l, struct tm_msg *m)
{
    m->next = NULL;
    if (l->tail != NULL)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
}

/* out_pop takes the oldest unanswered message of c. */
static struct tm_msg *out_pop(struct fpool *fp, struct fp_child *c)
{
    struct tm_msg *m = c->out_head;
    if (m == NULL)
        return NULL;
    c->out_head = m->next;
    if (c->out_head == NULL)
        c->out_tail = NULL;
    c->nout--;
    m->next = NULL;
    fp->popped++;
    return m;
}

/* give_back returns never-started messages: to the front of the queue, or
 * unsettled (outcome none) when the pool is draining. */
static void give_back(struct fpool *fp, struct fp_list *unsent,
                      struct fp_list *done)
{
    if (unsent->head == NULL)
        return;
    pthread_mutex_lock(&fp->mu);
    if (fp->draining) {
        pthread_mutex_unlock(&fp->mu);
        for (struct tm_msg *m = unsent->head, *n; m != NULL; m = n) {
            n = m->next;
            m->outcome = TM_OUT_NONE;
            list_add(done, m);
        }
    } else {
        size_t k = 0;
        for (struct tm_msg *m = unsent->head; m != NULL; m = m->next)
            k++;
        unsent->tail->next = fp->q_head;
        fp->q_head = unsent->head;
        if (fp->q_tail == NULL)
            fp->q_tail = unsent->tail;
        fp->qlen += k;
        pthread_mutex_unlock(&fp->mu);
    }
    unsent->head = unsent->tail = NULL;
}

static const char *sig_name(int sig, char *buf, size_t size)
{
    const char *n = sigabbrev_np(sig);
    if (n != NULL)
        tm_snprintf(buf, size, "SIG%s", n);
    else
        tm_snprintf(buf, size, "signal %d", sig);
    return buf;
}

/* wait_child waits for a child to end, killing it at until (monotonic
 * ns) if it has not; returns its wait status. */
static int wait_child(pid_t pid, int64_t until)
{
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return status;
        if (tm_now_ns() >= until) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return status;
        }
        tm_sleep_ms(2);
    }
}

/* reap waits for c's process after its socket closed or it was killed,
 * charges the running message, requeues the rest and schedules the
 * restart. */
static void reap(struct fpool *fp, struct fp_child *c, struct fp_list *done)
{
    int status = wait_child(c->pid, tm_now_ns() + FP_KILL_GRACE_NS);
    close(c->fd);
    c->fd = -1;

    char why[96], sb[32];
    if (WIFSIGNALED(status))
        tm_snprintf(why, sizeof why, "killed by %s",
                    sig_name(WTERMSIG(status), sb, sizeof sb));
    else if (WIFEXITED(status))
        tm_snprintf(why, sizeof why, "exited with status %d",
                    WEXITSTATUS(status));
    else
        tm_snprintf(why, sizeof why, "ended");

    int recycled = c->nout == 0 && fp->max_tasks > 0 &&
                   c->tasks_done >= fp->max_tasks && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0;
    struct tm_msg *running = out_pop(fp, c);
    if (running != NULL) {
        running->t_end_ns = tm_now_ns();
        if (running->t_start_ns == 0)
            running->t_start_ns = c->cur_start_ns;
        if (fp->abandon) {
            running->outcome = TM_OUT_NONE;
        } else if (c->timed_out) {
            running->outcome = TM_OUT_TIMEOUT;
            tm_msg_set_error(running, "ran past the limit of %2$lld ms: "
                             "the worker process was killed after %1$lld ms",
                             (long long)((running->t_end_ns -
                                          running->t_start_ns) / 1000000),
                             (long long)running->task->cfg->timeout_ms);
        } else {
            running->outcome = TM_OUT_CRASHED;
            tm_msg_set_error(running, "the worker process %s while running "
                             "the task", why);
        }
        list_add(done, running);
    }
    struct fp_list unsent = {0};
    struct tm_msg *m;
    while ((m = out_pop(fp, c)) != NULL) {
        m->t_start_ns = 0;
        if (fp->abandon) {
            m->outcome = TM_OUT_NONE;
            list_add(done, m);
        } else {
            list_add(&unsent, m);
        }
    }
    give_back(fp, &unsent, done);
    pid_t pid = c->pid;
    c->pid = 0;
    if (fp->shutdown || fp->abandon)
        return;
    atomic_fetch_add(&fp->base.restarts, 1);

    int64_t now = tm_now_ns();
    if (recycled) {
        tm_log_debug(SRC, "worker %u recycled after %u tasks", c->index,
                     c->tasks_done);
        c->young_deaths = 0;
        c->respawn_at_ns = now;
        return;
    }
    if (now - c->born_ns < FP_YOUNG_NS)
        c->young_deaths++;
    else
        c->young_deaths = 0;
    int64_t delay = 0;
    if (c->young_deaths > 1) {
        delay = FP_RESTART_MIN_NS;
        for (unsigned i = 2; i < c->young_deaths && delay < FP_RESTART_MAX_NS;
             i++)
            delay *= 2;
        if (delay > FP_RESTART_MAX_NS)
            delay = FP_RESTART_MAX_NS;
    }
    c->respawn_at_ns = now + delay;
    if (running != NULL)
        tm_log_write(TM_LOG_WARNING, SRC, running->task->cfg->name,
                     running->id, "worker %u (pid %d) %s; restarting it%s",
                     c->index, (int)pid, why,
                     delay > 0 ? " after a delay (it keeps dying)" : "");
    else
        tm_log_warn(SRC, "worker %u (pid %d) %s while idle; restarting it "
                    "in %lld ms", c->index, (int)pid, why,
                    (long long)(delay / 1000000));
}

/* read_answers reads what c wrote; finished messages go to done.
 * Returns -1 when the child's socket closed. */
static int read_answers(struct fpool *fp, struct fp_child *c,
                        struct fp_list *done)
{
    int eof = 0;
    while (!eof) {
        if (c->r.cap - c->r.len < 65536) {
            c->r.cap = c->r.cap ? c->r.cap * 2 : 65536;
            c->r.p = tm_realloc(c->r.p, c->r.cap);
        }
        ssize_t n = read(c->fd, c->r.p + c->r.len, c->r.cap - c->r.len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            eof = 1;
            break;
        }
        if (n == 0) {
            eof = 1; /* answers read before the end still count */
            break;
        }
        c->r.len += (size_t)n;
    }
    size_t off = 0;
    int64_t now = tm_now_ns();
    while (c->r.len - off >= sizeof(struct fp_resp)) {
        struct fp_resp rs;
        memcpy(&rs, c->r.p + off, sizeof rs);
        if (rs.magic != FP_MAGIC_RESP)
            return -1;
        size_t total = sizeof rs + rs.error_len + rs.result_len;
        if (c->r.len - off < total)
            break;
        struct tm_msg *m = out_pop(fp, c);
        if (m == NULL)
            return -1;
        const char *data = c->r.p + off + sizeof rs;
        m->outcome = (enum tm_outcome)rs.outcome;
        m->t_start_ns = rs.t_start_ns;
        m->t_end_ns = rs.t_end_ns;
        if (rs.error_len > 0)
            m->error = tm_strndup(data, rs.error_len);
        if (rs.result_len > 0) {
            m->result = tm_strndup(data + rs.error_len, rs.result_len);
            m->result_len = rs.result_len;
        }
        list_add(done, m);
        c->tasks_done++;
        c->cur_start_ns = now;
        off += total;
    }
    memmove(c->r.p, c->r.p + off, c->r.len - off);
    c->r.len -= off;
    return eof ? -1 : 0;
}

/* flush writes c's pending output. Returns -1 when the socket failed. */
static int flush(struct fp_child *c)
{
    while (c->w.off < c->w.len) {
        ssize_t n = write(c->fd, c->w.p + c->w.off, c->w.len - c->w.off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        c->w.off += (size_t)n;
    }
    c->w.len = c->w.off = 0;
    return 0;
}

/* encode appends m's request frame to c's output. */
static void encode(struct fp_child *c, const struct tm_msg *m)
{
    size_t invalid_len = m->invalid != NULL ? strlen(m->invalid) : 0;
    struct fp_req rq = {
        .magic = FP_MAGIC_REQ,
        .task_index = (uint32_t)m->task_index,
        .attempt = m->attempt,
        .id_len = (uint32_t)m->id_len,
        .invalid_len = (uint32_t)invalid_len,
        .has_body = m->body != NULL,
        .body_len = m->body != NULL ? m->body_len : 0,
    };
    buf_put(&c->w, &rq, sizeof rq);
    buf_put(&c->w, m->id, m->id_len);
    if (invalid_len > 0)
        buf_put(&c->w, m->invalid, invalid_len);
    if (m->body != NULL && m->body_len > 0)
        buf_put(&c->w, m->body, m->body_len);
}

/* dispatch hands queued messages to idle children. */
static void dispatch(struct fpool *fp)
{
    struct tm_pool *p = &fp->base;
    for (unsigned i = 0; i < p->size; i++) {
        struct fp_child *c = &fp->kids[i];
        /* a child gets its next batch while it runs the second half of the
         * current one, so it never waits for work between batches */
        if (c->pid == 0 || c->killing || c->nout > FP_BATCH_MAX / 2)
            continue;
        pthread_mutex_lock(&fp->mu);
        if (fp->qlen == 0 || fp->draining) {
            pthread_mutex_unlock(&fp->mu);
            break;
        }
        /* a fair share of the queue, as the thread pool takes; a child
         * that is busy gets one only when there is plenty */
        size_t share = fp->qlen / (p->size * 2);
        if (share < 1)
            share = c->nout == 0 ? 1 : 0;
        if (share > FP_BATCH_MAX)
            share = FP_BATCH_MAX;
        if (fp->max_tasks > 0) {
            size_t left = fp->max_tasks > c->tasks_done + c->nout
                              ? fp->max_tasks - c->tasks_done - c->nout
                              : 0;
            if (share > left)
                share = left;
        }
        int was_idle = c->nout == 0;
        struct tm_msg *first = NULL;
        size_t k = 0;
        while (k < share && fp->q_head != NULL) {
            struct tm_msg *m = fp->q_head;
            fp->q_head = m->next;
            if (fp->q_head == NULL)
                fp->q_tail = NULL;
            fp->qlen--;
            m->next = NULL;
            if (c->out_tail != NULL)
                c->out_tail->next = m;
            else
                c->out_head = m;
            c->out_tail = m;
            c->nout++;
            if (first == NULL)
                first = m;
            k++;
        }
        fp->outstanding += k;
        if (k > 0)
            pthread_cond_broadcast(&fp->not_full);
        pthread_mutex_unlock(&fp->mu);
        if (k == 0)
            continue;
        for (struct tm_msg *m = first; m != NULL; m = m->next)
            encode(c, m);
        if (was_idle)
            c->cur_start_ns = tm_now_ns();
        if (flush(c) != 0) {
            /* the child is gone; its socket's EOF reaps it */
            tm_log_debug(SRC, "worker %u: write failed", c->index);
        }
    }
}

/* check_timers enforces running messages' limits and kill grace. */
static void check_timers(struct fpool *fp, int64_t now, int64_t *next)
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
        if (c->out_head == NULL)
            continue;
        int64_t limit = c->out_head->task->cfg->timeout_ms;
        if (limit <= 0)
            continue;
        int64_t deadline = c->cur_start_ns + limit * 1000000LL;
        if (now >= deadline) {
            tm_log_write(TM_LOG_WARNING, SRC, c->out_head->task->cfg->name,
                         c->out_head->id, "worker %u ran past the %lld ms "
                         "limit; killing it", i, (long long)limit);
            c->timed_out = 1;
            c->killing = 1;
            c->kill_at_ns = now + FP_KILL_GRACE_NS;
            kill(c->pid, SIGTERM);
            if (c->kill_at_ns < *next)
                *next = c->kill_at_ns;
        } else if (deadline < *next) {
            *next = deadline;
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
        pthread_mutex_unlock(&fp->mu);
        if (shutdown)
            break;
        if (abandon) {
            for (unsigned i = 0; i < p->size; i++) {
                struct fp_child *c = &fp->kids[i];
                if (c->pid != 0 && c->nout > 0) {
                    kill(c->pid, SIGKILL);
                    reap(fp, c, &done);
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
        dispatch(fp);
        check_timers(fp, now, &next);
        unsigned busy_now = 0;
        for (unsigned i = 0; i < p->size; i++)
            if (fp->kids[i].nout > 0)
                busy_now++;
        atomic_store_explicit(&fp->busy, busy_now, memory_order_relaxed);

        size_t n = 0;
        pfd[n].fd = fp->wake_fd;
        pfd[n].events = POLLIN;
        who[n++] = -1;
        for (unsigned i = 0; i < p->size; i++) {
            struct fp_child *c = &fp->kids[i];
            if (c->pid == 0)
                continue;
            pfd[n].fd = c->fd;
            pfd[n].events = POLLIN | (c->w.off < c->w.len ? POLLOUT : 0);
            who[n++] = (int)i;
        }
        int64_t wait_ms = (next - now) / 1000000LL + 1;
        if (wait_ms < 0)
            wait_ms = 0;
        if (wait_ms > 1000)
            wait_ms = 1000;
        int rc = poll(pfd, n, (int)wait_ms);
        if (rc > 0) {
            if (pfd[0].revents & POLLIN) {
                uint64_t cnt;
                if (read(fp->wake_fd, &cnt, sizeof cnt) < 0) {
                    /* spurious */
                }
            }
            for (size_t k = 1; k < n; k++) {
                struct fp_child *c = &fp->kids[who[k]];
                if (pfd[k].revents & POLLOUT && flush(c) != 0)
                    pfd[k].revents |= POLLHUP;
                if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                    if (read_answers(fp, c, &done) != 0)
                        reap(fp, c, &done);
                }
            }
        }
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
        wait_child(c->pid, until);
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
    fp->qcap = (size_t)cfg->pool_size * FP_SLOTS_PER_WORKER;
    fp->wake_fd = -1;
    pthread_mutex_init(&fp->mu, NULL);
    pthread_cond_init(&fp->not_full, NULL);
    pthread_cond_init(&fp->idle, NULL);
    fp->kids = tm_calloc(cfg->pool_size, sizeof *fp->kids);
    for (unsigned i = 0; i < cfg->pool_size; i++) {
        fp->kids[i].index = i;
        fp->kids[i].fd = -1;
    }
    return &fp->base;
}

static int fp_start(struct tm_pool *p)
{
    struct fpool *fp = (struct fpool *)p;
    fp->parent_pid = getpid();
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
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
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
    size_t done = 0;
    pthread_mutex_lock(&fp->mu);
    while (done < n) {
        while (fp->qlen >= fp->qcap && !fp->draining)
            pthread_cond_wait(&fp->not_full, &fp->mu);
        if (fp->draining)
            break;
        while (done < n && fp->qlen < fp->qcap) {
            struct tm_msg *m = &msgs[done++];
            m->next = NULL;
            if (fp->q_tail != NULL)
                fp->q_tail->next = m;
            else
                fp->q_head = m;
            fp->q_tail = m;
            fp->qlen++;
        }
        wake(fp);
    }
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
    while (fp->q_head != NULL) {
        struct tm_msg *m = fp->q_head;
        fp->q_head = m->next;
        m->outcome = TM_OUT_NONE;
        list_add(&back, m);
    }
    fp->q_tail = NULL;
    fp->qlen = 0;
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
        wake(fp);
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
        wake(fp);
        pthread_join(fp->thread, NULL);
    }
    for (unsigned i = 0; i < p->size; i++) {
        tm_free(fp->kids[i].w.p);
        tm_free(fp->kids[i].r.p);
    }
    if (fp->wake_fd >= 0)
        close(fp->wake_fd);
    pthread_mutex_destroy(&fp->mu);
    pthread_cond_destroy(&fp->not_full);
    pthread_cond_destroy(&fp->idle);
    tm_free(fp->kids);
    tm_free(fp);
}

const struct tm_pool_ops tm_pool_fork_ops = {
    .kind = "fork",
    .create = fp_create,
    .start = fp_start,
    .submit = fp_submit,
    .drain = fp_drain,
    .busy = fp_busy,
    .destroy = fp_destroy,
};
