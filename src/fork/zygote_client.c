/* fork/zygote_client.c - the daemon's side of the zygote: starting it,
 * requests from any thread, exit reports. */
#include "fork/zygote.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "fork/zygote_proto.h"
#include "log.h"
#include "util.h"

#define SRC "pool:fork"

/* How long the daemon gives the zygote to exit once told to. */
#define ZY_EXIT_GRACE_NS (2000LL * 1000000LL)

struct zy_exit {
    pid_t pid;
    int status;
};

/* zc is the daemon's handle on the zygote; mu serialises requests and
 * every read of the socket (replies and exits share it). */
static struct {
    pthread_mutex_t mu;
    int fd;                     /* -1: no zygote (never, gone, done) */
    pid_t pid;
    int started;                /* one was started: never fork another */
    unsigned refs;              /* generations attached */
    unsigned next_gen;
    struct zy_exit *exits;      /* reported, not yet waited for */
    size_t nexits, cap;
} zc = {.mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* c_gone forgets a zygote that stopped answering (mu held). Its workers
 * die with it. */
static void c_gone(void)
{
    if (zc.fd < 0)
        return;
    tm_log_err(SRC, "the worker zygote (pid %d) is gone; workers are "
               "forked by the pool from now on", (int)zc.pid);
    close(zc.fd);
    zc.fd = -1;
    /* it may still run when it broke the protocol rather than exited */
    kill(zc.pid, SIGKILL);
    int status;
    while (waitpid(zc.pid, &status, 0) < 0 && errno == EINTR) {
    }
}

/* c_recv reads one message (mu held): exits are filed, a reply is
 * returned. Returns 1 for a reply (in *m, a passed descriptor in *fd), 2
 * for an exit filed, 0 for nothing yet (dontwait), -1 when the zygote is
 * gone. */
static int c_recv(struct zy_msg *m, int *fd, int dontwait)
{
    ssize_t n = tm_zy_recv(zc.fd, m, sizeof *m, fd, dontwait);
    if (n < 0 && dontwait && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n != (ssize_t)sizeof *m) {
        if (fd != NULL && *fd >= 0)
            close(*fd);
        c_gone();
        return -1;
    }
    if (m->kind == ZY_REPLY)
        return 1;
    if (zc.nexits == zc.cap) {
        zc.cap = zc.cap ? zc.cap * 2 : 16;
        zc.exits = tm_realloc(zc.exits, zc.cap * sizeof *zc.exits);
    }
    zc.exits[zc.nexits++] = (struct zy_exit){m->pid, m->status};
    return 2;
}

/* c_request sends rq and waits for its reply (mu held). Returns 0, or -1
 * when the zygote is gone. */
static int c_request(const struct zy_req *rq, struct zy_msg *reply, int *fd)
{
    if (zc.fd < 0 || tm_zy_send(zc.fd, rq, sizeof *rq, -1) != 0) {
        c_gone();
        return -1;
    }
    int rc;
    while ((rc = c_recv(reply, fd, 0)) == 2) {
        /* an exit came first: filed */
    }
    return rc == 1 ? 0 : -1;
}

/* threads_now counts the calling process's threads. */
static int threads_now(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* c_start forks the zygote with tasks as generation 1 (mu held). */
static int c_start(struct tm_task **tasks, size_t ntasks)
{
    char eb[TM_STRERRNO_BUF];
    int sv[2];
    zc.started = 1;
    int nthreads = threads_now();
    if (nthreads != 1)
        tm_log_warn(SRC, "the worker zygote is forked while %d threads "
                    "run", nthreads);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        tm_log_err(SRC, "socketpair: %s", tm_strerror(errno, eb, sizeof eb));
        return -1;
    }
    pid_t daemon_pid = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        tm_log_err(SRC, "fork: %s", tm_strerror(errno, eb, sizeof eb));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        tm_zygote_main(sv[1], daemon_pid, tasks, ntasks);
    }
    close(sv[1]);
    zc.fd = sv[0];
    zc.pid = pid;
    zc.next_gen = 2;
    tm_log_debug(SRC, "worker zygote started (pid %d)", (int)pid);
    return 0;
}

int tm_zygote_attach(const struct tm_cfg *cfg, struct tm_task **tasks,
                     size_t ntasks, unsigned *gen, char *err, size_t errlen)
{
    int rc = 0;
    *gen = 0;
    pthread_mutex_lock(&zc.mu);
    if (!zc.started) {
        if (c_start(tasks, ntasks) == 0) {
            *gen = 1;
            zc.refs++;
        }
        goto out;
    }
    if (zc.fd < 0)
        goto out; /* no zygote: the pool forks */
    static struct zy_req rq;
    memset(&rq, 0, sizeof rq);
    rq.op = ZY_LOAD;
    rq.gen = zc.next_gen++;
    rq.fingerprint = tm_zy_fingerprint(tasks, ntasks);
    if (strlen(cfg->path) >= sizeof rq.path) {
        tm_snprintf(err, errlen, "configuration path too long");
        rc = -1;
        goto out;
    }
    memcpy(rq.path, cfg->path, strlen(cfg->path) + 1);
    struct zy_msg reply;
    if (c_request(&rq, &reply, NULL) != 0)
        goto out;
    if (reply.rc != 0) {
        reply.err[sizeof reply.err - 1] = '\0';
        tm_snprintf(err, errlen, "the worker zygote could not load it: %s",
                    reply.err);
        rc = -1;
        goto out;
    }
    *gen = rq.gen;
    zc.refs++;
out:
    pthread_mutex_unlock(&zc.mu);
    return rc;
}

void tm_zygote_detach(unsigned gen)
{
    if (gen == 0)
        return;
    pthread_mutex_lock(&zc.mu);
    assert(zc.refs > 0);
    struct zy_req rq = {.op = ZY_DROP, .gen = gen};
    struct zy_msg reply;
    if (zc.fd >= 0)
        c_request(&rq, &reply, NULL);
    if (--zc.refs == 0 && zc.fd >= 0) {
        /* the last generation: closing the socket ends the zygote */
        close(zc.fd);
        zc.fd = -1;
        int64_t until = tm_now_ns() + ZY_EXIT_GRACE_NS;
        int status;
        while (waitpid(zc.pid, &status, WNOHANG) == 0) {
            if (tm_now_ns() >= until) {
                kill(zc.pid, SIGKILL);
                waitpid(zc.pid, &status, 0);
                break;
            }
            tm_sleep_ms(1);
        }
        tm_free(zc.exits);
        zc.exits = NULL;
        zc.nexits = zc.cap = 0;
    }
    pthread_mutex_unlock(&zc.mu);
}

pid_t tm_zygote_spawn(unsigned gen, unsigned index, unsigned max_tasks,
                      int *fd)
{
    pid_t pid = -1;
    struct zy_req rq = {.op = ZY_SPAWN, .gen = gen, .index = index,
                        .max_tasks = max_tasks};
    struct zy_msg reply;
    int got = -1;
    pthread_mutex_lock(&zc.mu);
    if (c_request(&rq, &reply, &got) == 0) {
        if (reply.rc == 0 && reply.pid > 0 && got >= 0) {
            pid = reply.pid;
            *fd = got;
            got = -1;
        } else {
            reply.err[sizeof reply.err - 1] = '\0';
            tm_log_err(SRC, "worker zygote: %s", reply.err);
        }
    }
    if (got >= 0)
        close(got);
    pthread_mutex_unlock(&zc.mu);
    return pid;
}

/* c_take removes pid's exit from the filed ones (mu held). */
static int c_take(pid_t pid, int *status)
{
    for (size_t i = 0; i < zc.nexits; i++) {
        if (zc.exits[i].pid == pid) {
            *status = zc.exits[i].status;
            zc.exits[i] = zc.exits[--zc.nexits];
            return 1;
        }
    }
    return 0;
}

int tm_zygote_wait(pid_t pid, int64_t deadline_ns, int *status)
{
    for (;;) {
        int found = 0;
        pthread_mutex_lock(&zc.mu);
        struct zy_msg m;
        while (!(found = c_take(pid, status)) && zc.fd >= 0 &&
               c_recv(&m, NULL, 1) == 2) {
            /* filed an exit: look again */
        }
        if (!found && zc.fd < 0) {
            /* gone, and its workers with it */
            *status = SIGKILL; /* as WIFSIGNALED/WTERMSIG read it */
            found = 1;
        }
        pthread_mutex_unlock(&zc.mu);
        if (found)
            return 0;
        if (tm_now_ns() >= deadline_ns)
            return -1;
        tm_sleep_ms(1);
    }
}
