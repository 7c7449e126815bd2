/* fork/reap.c - the fork pool's parent side: a child's answers, its
 * death, and what each costs the messages it had (see fork/pool.c for
 * the design). Runs on the dispatcher thread. */
#include "fork/pool_private.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

#include "fork/zygote_private.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "pool:fork"


/* out_pop takes the oldest unanswered message of c. */
static struct tm_msg *out_pop(struct fpool *fp, struct fp_child *c)
{
    struct tm_msg *m = fp_list_pop(&c->out);
    if (m == NULL)
        return NULL;
    c->nout--;
    c->out_est_ns -= fp->tq[m->task_index].est_ns;
    if (c->nout == 0 || c->out_est_ns < 0)
        c->out_est_ns = 0; /* estimates change while runs are out */
    if (c->link.base != NULL)
        tm_fork_link_answered(&c->link, c->seq_head);
    c->seq_head++;
    assert(c->seq_next - c->seq_head == c->nout);
    fp->popped++;
    return m;
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

/* tm_fp_wait_child waits for c's process to end, killing it at until
 * (monotonic ns) if it has not; returns its wait status. */
int tm_fp_wait_child(const struct fp_child *c, int64_t until)
{
    int status = 0;
    if (tm_zygote_wait(c->zygote, c->pid, until, &status) == 0)
        return status;
    kill(c->pid, SIGKILL);
    if (tm_zygote_wait(c->zygote, c->pid, tm_now_ns() + FP_KILL_GRACE_NS,
                       &status) != 0)
        status = SIGKILL; /* as WIFSIGNALED/WTERMSIG read it */
    return status;
}

/* damp notes that task t's run crashed or timed out: from the second in a
 * row on, its queue is held back. Returns the hold in ns (0: none). */
static int64_t damp(struct fpool *fp, size_t t, int64_t now)
{
    struct fp_tq *q = &fp->tq[t];
    q->failures++;
    if (q->failures < 2)
        return 0;
    int64_t hold = FP_HOLD_MIN_NS;
    for (unsigned i = 2; i < q->failures && hold < FP_HOLD_MAX_NS; i++)
        hold *= 2;
    if (hold > FP_HOLD_MAX_NS)
        hold = FP_HOLD_MAX_NS;
    q->hold_until_ns = now + hold;
    return hold;
}

/* tm_fp_reap waits for c's process after its socket closed or it was killed,
 * charges the running message, requeues the rest and schedules the
 * restart: at once when a message was charged (its task is damped
 * instead), after a growing delay when the child keeps dying idle. */
void tm_fp_reap(struct fpool *fp, struct fp_child *c, struct fp_list *done)
{
    int status = tm_fp_wait_child(c, tm_now_ns() + FP_KILL_GRACE_NS);

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
    struct fp_list unsent = {0};
    uint64_t running_seq = c->seq_head;
    struct tm_msg *running = out_pop(fp, c);
    if (running != NULL && !fp->abandon && c->timed_out &&
        running_seq != c->kill_seq) {
        /* the message that ran past its limit answered before the kill
         * landed: this one only just started and is not to blame */
        tm_log_write(TM_LOG_INFO, SRC, running->task->cfg->name,
                     running->id, "worker %u was killed for an earlier "
                     "message's limit; this one goes back to the queue",
                     c->index);
        running->t_start_ns = 0;
        fp_list_add(&unsent, running);
        running = NULL;
    }
    int64_t now = tm_now_ns();
    int64_t hold = 0;
    if (running != NULL) {
        running->t_end_ns = now;
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
        } else if (c->corrupt != NULL) {
            running->outcome = TM_OUT_CRASHED;
            tm_msg_set_error(running, "the worker process sent a malformed "
                             "reply (%s) while running the task and was "
                             "killed", c->corrupt);
        } else {
            running->outcome = TM_OUT_CRASHED;
            tm_msg_set_error(running, "the worker process %s while running "
                             "the task", why);
        }
        if (running->outcome != TM_OUT_NONE)
            hold = damp(fp, running->task_index, now);
        fp_list_add(done, running);
    }
    struct tm_msg *m;
    while ((m = out_pop(fp, c)) != NULL) {
        m->t_start_ns = 0;
        if (fp->abandon) {
            m->outcome = TM_OUT_NONE;
            fp_list_add(done, m);
        } else {
            fp_list_add(&unsent, m);
        }
    }
    tm_fp_give_back(fp, &unsent, done);
    /* nothing of the child is left to read */
    tm_fork_link_close(&c->link);
    close(c->fd);
    c->fd = -1;
    pid_t pid = c->pid;
    c->pid = 0;
    if (fp->shutdown || fp->abandon)
        return;
    atomic_fetch_add(&fp->base.restarts, 1);

    if (recycled) {
        tm_log_debug(SRC, "worker %u recycled after %u tasks", c->index,
                     c->tasks_done);
        c->young_deaths = 0;
        c->respawn_at_ns = now;
        return;
    }
    if (running != NULL) {
        /* the task is to blame, not the process: a fresh child at once */
        c->young_deaths = 0;
        c->respawn_at_ns = now;
        if (hold > 0)
            tm_log_write(TM_LOG_WARNING, SRC, running->task->cfg->name,
                         running->id, "worker %u (pid %d) %s; restarting "
                         "it; the task is held back %lld ms (its runs keep "
                         "failing)", c->index, (int)pid,
                         c->corrupt != NULL ? "sent a malformed reply" : why,
                         (long long)(hold / 1000000));
        else
            tm_log_write(TM_LOG_WARNING, SRC, running->task->cfg->name,
                         running->id, "worker %u (pid %d) %s; restarting it",
                         c->index, (int)pid,
                         c->corrupt != NULL ? "sent a malformed reply" : why);
        return;
    }
    if (c->timed_out) {
        /* killed for a limit, after the message at fault had answered */
        c->young_deaths = 0;
        c->respawn_at_ns = now;
        tm_log_info(SRC, "worker %u (pid %d) %s after a run past its "
                    "limit; restarting it", c->index, (int)pid, why);
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
    tm_log_warn(SRC, "worker %u (pid %d) %s while idle; restarting it in "
                "%lld ms", c->index, (int)pid,
                c->corrupt != NULL ? c->corrupt : why,
                (long long)(delay / 1000000));
}

/* tm_fp_read_answers takes c's answers from its ring (and, with sock, first
 * reads its socket: wake-ups, bulk data, EOF) and checks each against the
 * message it must answer; finished messages go to done. Returns -1 when
 * the child's socket closed, or after a malformed answer (c->corrupt says
 * why; the child is killed, the message it ran is charged with a crash). */
int tm_fp_read_answers(struct fpool *fp, struct fp_child *c,
                       struct fp_list *done, int sock)
{
    /* Bytes that task code wrote on its worker's socket before its
     * answer was published are in the socket once that answer is seen:
     * an answer is taken only once the socket was read, or found empty,
     * after it was published (fork/link.h, sock_clear), so that such
     * bytes are charged to the message that wrote them (the oldest one
     * out), not to one after it. One ioctl per look at most, none when a
     * poll or a read since covers the answers waiting. */
    int readsock = sock;
    if (!readsock && tm_fork_link_answers_waiting(&c->link) &&
        tm_fork_link_sock_unread(&c->link)) {
        uint64_t head = atomic_load_explicit(&c->link.ctl->ans_head,
                                             memory_order_acquire);
        int avail = 0;
        readsock = ioctl(c->fd, FIONREAD, &avail) != 0 || avail > 0;
        if (!readsock)
            tm_fork_link_sock_checked(&c->link, head);
    }
    /* answers published before the end still count */
    int eof = readsock ? tm_fork_link_read(&c->link, c->fd) : 0;
    const char *why = NULL;
    enum tm_fork_check rc;
    for (;;) {
        struct tm_fork_expect ex = {0};
        if (c->out.head != NULL) {
            ex.seq = c->seq_head;
            ex.task_index = (uint32_t)c->out.head->task_index;
            ex.not_before_ns = c->last_end_ns;
            /* ex.not_after_ns: set by tm_fork_link_answer */
        }
        struct tm_fork_resp rs;
        const char *data = NULL;
        rc = tm_fork_link_answer(&c->link, c->out.head != NULL ? &ex : NULL,
                                 &rs, &data, &why);
        if (rc != TM_FORK_FRAME)
            break;
        struct tm_msg *m = out_pop(fp, c);
        m->outcome = (enum tm_outcome)rs.outcome;
        m->t_start_ns = rs.t_start_ns;
        m->t_end_ns = rs.t_end_ns;
        if (rs.error_len > 0)
            m->error = tm_strndup(data, rs.error_len);
        if (rs.result_len > 0) {
            m->result = tm_strndup(data + rs.error_len, rs.result_len);
            m->result_len = rs.result_len;
        }
        fp_list_add(done, m);
        /* the run ended: whatever it returned, it did not kill the
         * process */
        struct fp_tq *q = &fp->tq[m->task_index];
        q->failures = 0;
        /* one long run is enough to stop packing the task's messages
         * (its next ones may be long too); the estimate comes down by an
         * eighth of the way with each short run after it */
        int64_t run = rs.t_end_ns - rs.t_start_ns;
        if (run < 0)
            run = 0;
        q->est_ns = (q->est_ns * 7 + run + FP_EST_COST_NS) / 8;
        c->tasks_done++;
        c->last_end_ns = rs.t_end_ns;
        c->cur_start_ns = rs.t_end_ns;
        if (c->nout == 0)
            c->idle_since_ns = tm_now_ns();
    }
    if (rc == TM_FORK_CORRUPT) {
        c->corrupt = why;
        kill(c->pid, SIGKILL);
        return -1;
    }
    return eof ? -1 : 0;
}

/* tm_fp_give_back returns never-started messages (in order): to the front of
 * their task's queue, or unsettled (outcome none) when the pool is
 * draining. */
void tm_fp_give_back(struct fpool *fp, struct fp_list *unsent,
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
            fp_list_add(done, m);
        }
    } else {
        /* last first, so that each queue keeps the original order */
        struct tm_msg *rev = NULL;
        for (struct tm_msg *m = unsent->head, *n; m != NULL; m = n) {
            n = m->next;
            m->next = rev;
            rev = m;
        }
        for (struct tm_msg *m = rev, *n; m != NULL; m = n) {
            n = m->next;
            tq_push_front(fp, m);
        }
        pthread_mutex_unlock(&fp->mu);
        fp_wake(fp);
    }
    unsent->head = unsent->tail = NULL;
}
