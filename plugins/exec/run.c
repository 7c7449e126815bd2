/* run.c - one run of the exec plugin: spawn, feed, collect, reap. */
#include "exec_host.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* EXEC_POLL_MS bounds each wait, so should_stop() is seen promptly. */
#define EXEC_POLL_MS 50
/* EXEC_LINE_MAX: longer stderr lines are logged cut at this length. */
#define EXEC_LINE_MAX 1024
/* EXEC_TERM_GRACE_MS: when the worker itself is told to stop (SIGTERM),
 * the group's grace is this short, within the pool's own kill grace. */
#define EXEC_TERM_GRACE_MS 300
/* EXEC_DRAIN_MS: after the command exits, how long its pipes may stay
 * open (held by something that left its process group) before the run
 * stops reading them; the deadline cuts it shorter. */
#define EXEC_DRAIN_MS 1000

/* struct run is one run's state. Invariant: pid > 0 until reaped is set;
 * every fd is -1 or open and owned here. */
struct run {
    const struct tm_exhost_task *t;
    struct tm_call *call;
    pid_t pid;
    int reaped;
    int status;
    int in_fd, out_fd, err_fd;
    int pid_fd;         /* pidfd of the child (readable when it exits), or
                           -1 where the kernel has none */
    size_t in_off;
    char *out;          /* stdout, up to t->max_output bytes */
    size_t out_len, out_cap;
    int overflow;       /* stdout went past max_output */
    char line[EXEC_LINE_MAX + 1]; /* the stderr line being read */
    size_t line_len;
    char last[EXEC_LINE_MAX + 1]; /* the last complete stderr line */
    unsigned lines, dropped;
    int watch_term;     /* SIGTERM is ours to notice (see tm_exhost_run) */
    int stopping;       /* 1: SIGTERM sent to the group; 2: SIGKILL */
    int64_t kill_at;    /* SIGKILL after this (host ms) */
    int64_t drain_until; /* stop reading after this, once reaped */
};

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static const char *err_text(int e)
{
    const char *s = strerrordesc_np(e);
    return s != NULL ? s : "unknown error";
}

/* child_exec runs in the child between fork and exec: async-signal-safe
 * calls only (the daemon may be multithreaded). Never returns. */
static void child_exec(const struct tm_exhost_task *t, char *const envp[],
                       pid_t parent, int in, int out, int err)
{
    static const char execfail[] = "taskmill exec: cannot run the command\n";
    static const char cwdfail[] = "taskmill exec: cannot enter cwd\n";
    struct sigaction dfl;
    sigset_t none;

    setpgid(0, 0);
    /* die with the worker even when it is killed with SIGKILL */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(127);
    /* nothing but stdin, stdout and stderr crosses exec */
    close_range(3, ~0u, 0);
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (t->cwd != NULL && chdir(t->cwd) != 0) {
        (void)!write(2, cwdfail, sizeof cwdfail - 1);
        _exit(127);
    }
    execve(t->path, t->argv, envp);
    (void)!write(2, execfail, sizeof execfail - 1);
    _exit(127);
}

/* make_env returns the run's environment: the task's plus TASKMILL_*, and
 * TRACEPARENT when the run has a trace context (tm_traceparent). The
 * strings added are in extra[5][...], which the caller keeps alive. */
static char **make_env(const struct tm_exhost_task *t,
                       const struct tm_call *call,
                       char extra[5][128])
{
    char **envp = calloc(t->nenv + 6, sizeof *envp);
    if (envp == NULL)
        return NULL;
    memcpy(envp, t->env, t->nenv * sizeof *envp);
    long long deadline = 0;
    if (call->deadline_ms > 0) {
        /* the deadline as Unix time in ms: usable with date +%s%3N */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        deadline = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 +
                   (call->deadline_ms - call->host->now_ms());
    }
    snprintf(extra[0], 128, "TASKMILL_TASK=%s", t->task);
    snprintf(extra[1], 128, "TASKMILL_MESSAGE_ID=%s", call->id);
    snprintf(extra[2], 128, "TASKMILL_ATTEMPT=%u", call->attempt);
    snprintf(extra[3], 128, "TASKMILL_DEADLINE_MS=%lld", deadline);
    int n = 4;
    const char *tp = tm_traceparent(call);
    if (tp != NULL)
        snprintf(extra[n++], 128, "TRACEPARENT=%s", tp);
    for (int i = 0; i < n; i++)
        envp[t->nenv + (size_t)i] = extra[i];
    return envp;
}

/* spawn starts the child with its three pipes. Returns 0 or -1 with the
 * run's error set. */
static int spawn(struct run *r)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    char extra[5][128];
    char **envp = NULL;
    int rc = -1, e = 0;

    /* stdin is a socket so that writing to a command that stopped reading
     * fails with EPIPE instead of raising SIGPIPE (send MSG_NOSIGNAL) */
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0 ||
        pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        e = errno;
        goto out;
    }
    shutdown(in[1], SHUT_RD);
    envp = make_env(r->t, r->call, extra);
    if (envp == NULL) {
        e = ENOMEM;
        goto out;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        e = errno;
        goto out;
    }
    if (pid == 0)
        child_exec(r->t, envp, parent, in[0], out[1], err[1]);
    /* also here, so the group exists before any kill(-pid) */
    setpgid(pid, pid);
    r->pid = pid;
    r->pid_fd = (int)syscall(SYS_pidfd_open, pid, 0);
    r->in_fd = in[1];
    r->out_fd = out[0];
    r->err_fd = err[0];
    in[1] = out[0] = err[0] = -1;
    fcntl(r->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(r->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(r->err_fd, F_SETFL, O_NONBLOCK);
    rc = 0;
out:
    if (rc != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "cannot start the command: %s",
                 err_text(e));
        tm_error(r->call, msg);
    }
    free(envp);
    for (int i = 0; i < 2; i++) {
        close_fd(&in[i]);
        close_fd(&out[i]);
        close_fd(&err[i]);
    }
    return rc;
}

/* end_line logs the stderr line gathered so far (within the per-run cap)
 * and keeps it as the last line. */
static void end_line(struct run *r)
{
    r->line[r->line_len] = '\0';
    if (r->line_len > 0) {
        memcpy(r->last, r->line, r->line_len + 1);
        if (r->lines < r->t->max_log_lines)
            tm_log(r->call, TM_LOG_WARNING, "stderr: %s", r->line);
        else
            r->dropped++;
        r->lines++;
    }
    r->line_len = 0;
}

/* read_err reads what stderr has; returns 0, or -1 at end of file. */
static int read_err(struct run *r)
{
    char buf[4096];
    ssize_t n = read(r->err_fd, buf, sizeof buf);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0) {
        end_line(r);
        return -1;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n')
            end_line(r);
        else if (r->line_len < EXEC_LINE_MAX)
            r->line[r->line_len++] = buf[i] == '\0' ? ' ' : buf[i];
    }
    return 0;
}

/* read_out reads what stdout has into r->out; returns 0, or -1 at end of
 * file or when it passed max_output (r->overflow). */
static int read_out(struct run *r)
{
    char buf[65536];
    ssize_t n = read(r->out_fd, buf, sizeof buf);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0)
        return -1;
    if ((size_t)n > r->t->max_output - r->out_len) {
        r->overflow = 1;
        return -1;
    }
    if (r->out_len + (size_t)n > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap * 2 : 65536;
        while (cap < r->out_len + (size_t)n)
            cap *= 2;
        char *p = realloc(r->out, cap);
        if (p == NULL) {
            r->overflow = 1;
            return -1;
        }
        r->out = p;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, buf, (size_t)n);
    r->out_len += (size_t)n;
    return 0;
}

/* write_in sends what is left of the body; returns 0, or -1 when done. */
static int write_in(struct run *r)
{
    const struct tm_call *c = r->call;
    if (r->in_off >= c->body_len)
        return -1;
    ssize_t n = send(r->in_fd, c->body + r->in_off, c->body_len - r->in_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    r->in_off += (size_t)n;
    return r->in_off >= c->body_len ? -1 : 0;
}

/* stop_group signals the whole process group: SIGTERM first, SIGKILL
 * after the grace (or at once with grace 0). */
static void stop_group(struct run *r, int64_t now)
{
    if (r->stopping == 0) {
        r->stopping = 1;
        r->kill_at = now + r->t->kill_grace_ms;
        kill(-r->pid, SIGTERM);
    }
    if (r->stopping == 1 && now >= r->kill_at) {
        r->stopping = 2;
        kill(-r->pid, SIGKILL);
    }
}

static int term_pending(void)
{
    sigset_t p;
    return sigpending(&p) == 0 && sigismember(&p, SIGTERM);
}

/* pump moves data until the command has exited and its pipes are closed
 * (or the drain time passed), stopping the group at should_stop(). */
static void pump(struct run *r)
{
    const struct tm_host *h = r->call->host;

    for (;;) {
        int64_t now = h->now_ms();
        if (!r->reaped) {
            pid_t w = waitpid(r->pid, &r->status, WNOHANG);
            if (w == r->pid) {
                r->reaped = 1;
                /* what the command left running goes with it */
                kill(-r->pid, SIGKILL);
                r->drain_until = now + EXEC_DRAIN_MS;
                close_fd(&r->in_fd);
            }
        }
        /* once reaped, the pipes are read until closed, for at most
         * EXEC_DRAIN_MS and never past the deadline: a process that left
         * the group holding them cannot stretch the run */
        if (r->reaped && ((r->out_fd < 0 && r->err_fd < 0) ||
                          now >= r->drain_until || h->should_stop(r->call)))
            break;
        if (!r->reaped && (r->overflow || h->should_stop(r->call)))
            stop_group(r, now);
        if (!r->reaped && r->watch_term && term_pending()) {
            /* the worker is being stopped (a fork-pool child past its
             * limit): take the group down first, then die of the signal
             * when tm_exhost_run unblocks it */
            stop_group(r, now);
            if (r->kill_at > now + EXEC_TERM_GRACE_MS)
                r->kill_at = now + EXEC_TERM_GRACE_MS;
        }

        struct pollfd p[4];
        int np = 0;
        int iin = -1, iout = -1, ierr = -1;
        /* the exit wakes the poll, so a run never waits a poll period
         * for its reap (without a pidfd: short polls once the pipes are
         * closed) */
        int wait_ms = EXEC_POLL_MS;
        if (!r->reaped && r->pid_fd >= 0)
            p[np++] = (struct pollfd){.fd = r->pid_fd, .events = POLLIN};
        else if (!r->reaped && r->out_fd < 0 && r->err_fd < 0)
            wait_ms = 1;
        if (r->in_fd >= 0) {
            iin = np;
            p[np++] = (struct pollfd){.fd = r->in_fd, .events = POLLOUT};
        }
        if (r->out_fd >= 0) {
            iout = np;
            p[np++] = (struct pollfd){.fd = r->out_fd, .events = POLLIN};
        }
        if (r->err_fd >= 0) {
            ierr = np;
            p[np++] = (struct pollfd){.fd = r->err_fd, .events = POLLIN};
        }
        if (poll(p, (nfds_t)np, wait_ms) <= 0)
            continue;
        if (iin >= 0 && p[iin].revents != 0 && write_in(r) != 0)
            close_fd(&r->in_fd);
        if (iout >= 0 && p[iout].revents != 0 && read_out(r) != 0)
            close_fd(&r->out_fd);
        if (ierr >= 0 && p[ierr].revents != 0 && read_err(r) != 0)
            close_fd(&r->err_fd);
    }
}

/* finish turns the exit status into the run's outcome. */
static int finish(struct run *r)
{
    char msg[EXEC_LINE_MAX + 128];
    const char *tail = r->last[0] != '\0' ? ": " : "";

    if (r->dropped > 0)
        tm_log(r->call, TM_LOG_WARNING, "stderr: %u more lines not logged",
               r->dropped);
    if (r->stopping != 0 && !r->overflow) {
        tm_error(r->call, "stopped at the deadline: the command was killed");
        return TM_TASK_ERROR;
    }
    if (r->overflow) {
        snprintf(msg, sizeof msg, "output larger than %zu bytes",
                 r->t->max_output);
        tm_error(r->call, msg);
        return TM_TASK_ERROR;
    }
    if (WIFSIGNALED(r->status)) {
        const char *name = sigabbrev_np(WTERMSIG(r->status));
        snprintf(msg, sizeof msg, "command killed by signal %d (SIG%s)",
                 WTERMSIG(r->status), name != NULL ? name : "?");
        tm_error(r->call, msg);
        return TM_TASK_ERROR;
    }
    int code = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
    if (code == EXEC_EX_DATAERR) {
        snprintf(msg, sizeof msg, "rejected (exit %d)%s%s", code, tail,
                 r->last);
        tm_error(r->call, msg);
        return TM_TASK_REJECT;
    }
    if (code != 0) {
        snprintf(msg, sizeof msg, "command exited with status %d%s%s", code,
                 tail, r->last);
        tm_error(r->call, msg);
        return TM_TASK_ERROR;
    }
    if (r->out_len > 0 &&
        r->call->host->set_result(r->call, r->out, r->out_len) != 0) {
        tm_error(r->call, "result larger than the task's max_payload");
        return TM_TASK_ERROR;
    }
    return TM_TASK_OK;
}

int tm_exhost_run(const struct tm_exhost_task *t, struct tm_call *call)
{
    struct run *r = calloc(1, sizeof *r);
    int rc = TM_TASK_ERROR;

    if (r == NULL) {
        tm_error(call, "out of memory");
        return TM_TASK_ERROR;
    }
    r->t = t;
    r->call = call;
    r->in_fd = r->out_fd = r->err_fd = r->pid_fd = -1;
    /* A worker whose SIGTERM is not blocked (a fork-pool child, invoke)
     * would die of it at once and leave the command's group running:
     * hold it for the run, stop the group, then let it act. Where SIGTERM
     * is blocked already (the daemon's threads, which sigwait for it) it
     * is the daemon's and is left alone. */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, &old);
    r->watch_term = !sigismember(&old, SIGTERM);
    if (spawn(r) != 0)
        goto out;
    pump(r);
    if (!r->reaped) {
        /* pump returns only after the reap; this holds the invariant
         * should that change: no zombie, no process left behind */
        kill(-r->pid, SIGKILL);
        while (waitpid(r->pid, &r->status, 0) < 0 && errno == EINTR) {
        }
        r->reaped = 1;
    }
    /* the invariant every outcome rests on: nothing left to reap */
    assert(r->reaped);
    rc = finish(r);
out:
    close_fd(&r->in_fd);
    close_fd(&r->out_fd);
    close_fd(&r->err_fd);
    close_fd(&r->pid_fd);
    free(r->out);
    free(r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
