/* fork/zygote.c - the single-threaded process that forks the workers. */
#include "fork/zygote.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"
#include "fork/child.h"
#include "log.h"
#include "util.h"

#define SRC "pool:fork"

/* The zygote's process name, as ps(1) and /proc/PID/comm show it. */
#define ZY_NAME "tm-zygote"
/* How long the daemon gives the zygote to exit once told to. */
#define ZY_EXIT_GRACE_NS (2000LL * 1000000LL)

/* ---- protocol: daemon <-> zygote, over a SOCK_SEQPACKET pair ---------- */

enum zy_op { ZY_LOAD = 1, ZY_DROP = 2, ZY_SPAWN = 3 };

struct zy_req {
    uint32_t op;
    uint32_t gen;
    uint32_t index;             /* ZY_SPAWN */
    uint32_t max_tasks;         /* ZY_SPAWN */
    uint64_t fingerprint;       /* ZY_LOAD: of the tasks it must find */
    char path[PATH_MAX];        /* ZY_LOAD: the configuration file */
};

enum zy_kind { ZY_REPLY = 1, ZY_EXIT = 2 };

/* struct zy_msg is a reply to the last request (a ZY_SPAWN reply carries
 * the worker's socket as SCM_RIGHTS), or the exit of a worker, sent
 * whenever it happens. */
struct zy_msg {
    uint32_t kind;
    int32_t rc;                 /* ZY_REPLY: 0 or -1 */
    int32_t pid;                /* the worker */
    int32_t status;             /* ZY_EXIT: its wait status */
    char err[256];              /* ZY_REPLY with rc -1 */
};

/* fingerprint sums up what the daemon and the zygote must agree on about
 * each task of a generation (FNV-1a). */
static uint64_t fingerprint(struct tm_task **tasks, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
#define ZY_MIX(p, len)                                                     \
    do {                                                                   \
        const unsigned char *b_ = (const unsigned char *)(p);              \
        for (size_t i_ = 0; i_ < (len); i_++) {                            \
            h ^= b_[i_];                                                   \
            h *= 1099511628211ULL;                                         \
        }                                                                  \
    } while (0)
    ZY_MIX(&n, sizeof n);
    for (size_t i = 0; i < n; i++) {
        const struct tm_cfg_task *t = tasks[i]->cfg;
        ZY_MIX(t->name, strlen(t->name) + 1);
        ZY_MIX(t->plugin_path, strlen(t->plugin_path) + 1);
        ZY_MIX(t->config_json, strlen(t->config_json) + 1);
        ZY_MIX(&t->timeout_ms, sizeof t->timeout_ms);
        ZY_MIX(&t->max_payload, sizeof t->max_payload);
        ZY_MIX(&t->max_retries, sizeof t->max_retries);
    }
#undef ZY_MIX
    return h;
}

/* send_msg sends m, with fd attached when fd >= 0. Returns 0 or -1. */
static int send_msg(int sock, const void *m, size_t len, int fd)
{
    struct iovec iov = {.iov_base = (void *)m, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = sizeof u.buf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    }
    for (;;) {
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n == (ssize_t)len)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return -1;
    }
}

/* recv_msg receives one message into m (len bytes at most) and a passed
 * descriptor into *fd (-1 when none; fd may be NULL). Returns the size,
 * 0 when the peer is gone, -1 with errno (EAGAIN when dontwait). */
static ssize_t recv_msg(int sock, void *m, size_t len, int *fd, int dontwait)
{
    struct iovec iov = {.iov_base = m, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    if (fd != NULL)
        *fd = -1;
    ssize_t n;
    do {
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC |
                                   (dontwait ? MSG_DONTWAIT : 0));
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            int got;
            memcpy(&got, CMSG_DATA(cm), sizeof got);
            if (fd != NULL && *fd < 0)
                *fd = got;
            else
                close(got);
        }
    }
    return n;
}

/* ---- the zygote process ------------------------------------------------ */

/* struct zy_gen is a generation as the zygote holds it. For the inherited
 * one, tasks are the daemon's (copied by fork) and cfg/own are NULL. */
struct zy_gen {
    unsigned id;
    struct tm_task **tasks;
    size_t ntasks;
    struct tm_cfg *cfg;         /* loaded here, or NULL */
    struct tm_task *own;        /* loaded here, or NULL */
};

static struct zy_gen *z_gens;
static size_t z_ngens;
static int z_ctl = -1, z_sfd = -1;

static struct zy_gen *z_find(unsigned id)
{
    for (size_t i = 0; i < z_ngens; i++)
        if (z_gens[i].id == id)
            return &z_gens[i];
    return NULL;
}

static void z_add(const struct zy_gen *g)
{
    z_gens = tm_realloc(z_gens, (z_ngens + 1) * sizeof *z_gens);
    z_gens[z_ngens++] = *g;
}

/* z_free_gen drops g's plugins (the last owner runs cb_fini here) and
 * what the zygote allocated for it. */
static void z_free_gen(struct zy_gen *g)
{
    for (size_t i = g->ntasks; i-- > 0;) {
        tm_plugin_free(g->tasks[i]->plugin);
        g->tasks[i]->plugin = NULL;
    }
    if (g->own != NULL) {
        tm_free(g->own);
        tm_free(g->tasks);
        tm_cfg_free(g->cfg);
    }
}

/* z_plugin_for finds a plugin of a live generation that the task t can
 * keep (same file, unchanged, same plugin config); *seen tells whether
 * the file was loaded at all (then a changed one needs a fresh copy). */
static struct tm_plugin *z_plugin_for(const struct tm_cfg_task *t, int *seen)
{
    *seen = 0;
    for (size_t i = z_ngens; i-- > 0;) {
        const struct zy_gen *g = &z_gens[i];
        for (size_t k = 0; k < g->ntasks; k++) {
            const struct tm_task *o = g->tasks[k];
            if (o->plugin == NULL ||
                strcmp(o->cfg->plugin_path, t->plugin_path) != 0)
                continue;
            *seen = 1;
            if (strcmp(o->cfg->name, t->name) == 0 &&
                strcmp(o->cfg->config_json, t->config_json) == 0 &&
                !tm_plugin_changed(o->plugin))
                return o->plugin;
        }
    }
    return NULL;
}

/* z_load loads generation rq->gen from the configuration file, which must
 * still describe the tasks the daemon loaded. Returns 0, or -1 with a
 * reason in err. */
static int z_load(const struct zy_req *rq, char *err, size_t errlen)
{
    struct zy_gen g = {.id = rq->gen};
    char reason[512];
    int rc = -1;
    g.cfg = tm_cfg_load(rq->path, reason, sizeof reason);
    if (g.cfg == NULL) {
        tm_snprintf(err, errlen, "%s", reason);
        goto out;
    }
    g.ntasks = g.cfg->ntasks;
    g.own = tm_calloc(g.ntasks ? g.ntasks : 1, sizeof *g.own);
    g.tasks = tm_calloc(g.ntasks ? g.ntasks : 1, sizeof *g.tasks);
    for (size_t i = 0; i < g.ntasks; i++) {
        g.own[i].cfg = &g.cfg->tasks[i];
        g.own[i].index = i;
        g.tasks[i] = &g.own[i];
    }
    if (fingerprint(g.tasks, g.ntasks) != rq->fingerprint) {
        tm_snprintf(err, errlen, "%s changed while it was being loaded",
                    rq->path);
        goto out;
    }
    for (size_t i = 0; i < g.ntasks; i++) {
        const struct tm_cfg_task *t = g.tasks[i]->cfg;
        int seen = 0;
        struct tm_plugin *keep = z_plugin_for(t, &seen);
        if (keep != NULL) {
            tm_plugin_ref(keep);
            g.own[i].plugin = keep;
            continue;
        }
        g.own[i].plugin =
            seen ? tm_plugin_load_fresh(t->plugin_path, reason, sizeof reason)
                 : tm_plugin_load(t->plugin_path, reason, sizeof reason);
        if (g.own[i].plugin == NULL) {
            tm_snprintf(err, errlen, "task '%s': %s", t->name, reason);
            goto out;
        }
        struct tm_task_env env = {
            .struct_size = sizeof env,
            .task = t->name,
            .queue = t->queue,
            .config_json = t->config_json,
            .host = tm_exec_host(),
        };
        if (tm_plugin_init(g.own[i].plugin, &env, reason,
                           sizeof reason) != 0) {
            tm_snprintf(err, errlen, "task '%s': %s", t->name, reason);
            goto out;
        }
    }
    z_add(&g);
    rc = 0;
out:
    if (rc != 0 && g.cfg != NULL) {
        for (size_t i = 0; i < g.ntasks; i++)
            if (g.own[i].plugin == NULL)
                g.tasks[i] = NULL;
        size_t k = 0;
        for (size_t i = 0; i < g.ntasks; i++)
            if (g.tasks[i] != NULL)
                g.tasks[k++] = g.tasks[i];
        g.ntasks = k;
        z_free_gen(&g);
    }
    return rc;
}

/* z_spawn forks worker rq->index of generation rq->gen. Returns its pid
 * with the daemon's end of its socket in *fd, or -1. */
static pid_t z_spawn(const struct zy_req *rq, int *fd, char *err,
                     size_t errlen)
{
    char eb[TM_STRERRNO_BUF];
    const struct zy_gen *g = z_find(rq->gen);
    if (g == NULL) {
        tm_snprintf(err, errlen, "no generation %u", rq->gen);
        return -1;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        tm_snprintf(err, errlen, "socketpair: %s",
                    tm_strerror(errno, eb, sizeof eb));
        return -1;
    }
    pid_t self = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        tm_snprintf(err, errlen, "fork: %s",
                    tm_strerror(errno, eb, sizeof eb));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(z_ctl);
        close(z_sfd);
        close(sv[0]);
        struct tm_fork_child a = {
            .tasks = g->tasks,
            .ntasks = g->ntasks,
            .index = rq->index,
            .fd = sv[1],
            .parent_pid = self,
            .max_tasks = rq->max_tasks,
        };
        tm_fork_child_main(&a);
    }
    close(sv[1]);
    *fd = sv[0];
    return pid;
}

/* z_reap reports every worker that ended. Returns -1 when the daemon is
 * gone. */
static int z_reap(void)
{
    struct signalfd_siginfo si;
    while (read(z_sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    }
    for (;;) {
        int status = 0;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return 0;
        struct zy_msg m = {.kind = ZY_EXIT, .pid = pid, .status = status};
        if (send_msg(z_ctl, &m, sizeof m, -1) != 0)
            return -1;
    }
}

static void zygote_main(int ctl, pid_t daemon_pid, struct tm_task **tasks,
                        size_t ntasks) __attribute__((noreturn));

/* zygote_main serves the daemon until it closes the socket: the
 * generation it was forked with is number 1. */
static void zygote_main(int ctl, pid_t daemon_pid, struct tm_task **tasks,
                        size_t ntasks)
{
    z_ctl = ctl;
    prctl(PR_SET_NAME, ZY_NAME);
    /* die with the daemon; its workers die with it in turn */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != daemon_pid)
        _exit(1);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    z_sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (z_sfd < 0)
        _exit(1);
    struct zy_gen first = {.id = 1, .tasks = tasks, .ntasks = ntasks};
    z_add(&first);

    static struct zy_req rq;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = z_ctl, .events = POLLIN},
                                {.fd = z_sfd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            break;
        if ((pfd[1].revents & POLLIN) && z_reap() != 0)
            break;
        if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = recv_msg(z_ctl, &rq, sizeof rq, NULL, 1);
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n != (ssize_t)sizeof rq)
            break; /* the daemon is gone or done */
        struct zy_msg m = {.kind = ZY_REPLY, .rc = 0};
        int fd = -1;
        switch ((enum zy_op)rq.op) {
        case ZY_LOAD:
            rq.path[sizeof rq.path - 1] = '\0';
            m.rc = z_load(&rq, m.err, sizeof m.err);
            break;
        case ZY_DROP: {
            struct zy_gen *g = z_find(rq.gen);
            if (g != NULL) {
                z_free_gen(g);
                *g = z_gens[--z_ngens];
            }
            break;
        }
        case ZY_SPAWN:
            m.pid = z_spawn(&rq, &fd, m.err, sizeof m.err);
            m.rc = m.pid > 0 ? 0 : -1;
            break;
        default:
            m.rc = -1;
            tm_snprintf(m.err, sizeof m.err, "unknown request %u", rq.op);
            break;
        }
        int sent = send_msg(z_ctl, &m, sizeof m, fd);
        if (fd >= 0)
            close(fd);
        if (sent != 0)
            break;
    }
    /* the workers end with it (their parent-death signal) */
    _exit(0);
}

/* ---- the daemon's side --------------------------------------------------- */

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
    ssize_t n = recv_msg(zc.fd, m, sizeof *m, fd, dontwait);
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
    if (zc.fd < 0 || send_msg(zc.fd, rq, sizeof *rq, -1) != 0) {
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
        zygote_main(sv[1], daemon_pid, tasks, ntasks);
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
    rq.fingerprint = fingerprint(tasks, ntasks);
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
