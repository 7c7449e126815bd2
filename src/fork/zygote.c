/* fork/zygote.c - the zygote process (forks the workers, reaps them,
 * loads the generations started after it) and the protocol helpers. */
#include "fork/zygote_proto_private.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "task/task.h"
#include "fork/child_private.h"
#include "util/util.h"

/* tm_zy_fingerprint sums up what the daemon and the zygote must agree on about
 * each task of a generation (FNV-1a). */
uint64_t tm_zy_fingerprint(struct tm_task **tasks, size_t n)
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

/* tm_zy_send sends m, with fd attached when fd >= 0. Returns 0 or -1. */
int tm_zy_send(int sock, const void *m, size_t len, int fd)
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

/* tm_zy_recv receives one message into m (len bytes at most) and a passed
 * descriptor into *fd (-1 when none; fd may be NULL). Returns the size,
 * 0 when the peer is gone, -1 with errno (EAGAIN when dontwait). */
ssize_t tm_zy_recv(int sock, void *m, size_t len, int *fd, int dontwait)
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

/* z_plugin_for (a tm_plugin_keep_fn) finds a plugin of a live generation
 * that the task t can keep: same name, file (unchanged), queue and plugin
 * config, as the daemon's reload keeps a task's plugin (daemon/gen.c),
 * and never one whose plugin asks for a cb_init at every reload
 * (TM_TASK_F_INIT_ON_RELOAD). Any other is loaded anew: tm_plugin_load
 * maps a private copy, never the file in place. */
static struct tm_plugin *z_plugin_for(void *arg,
                                      const struct tm_cfg_task *t)
{
    (void)arg;
    for (size_t i = z_ngens; i-- > 0;) {
        const struct zy_gen *g = &z_gens[i];
        for (size_t k = 0; k < g->ntasks; k++) {
            const struct tm_task *o = g->tasks[k];
            if (o->plugin == NULL ||
                strcmp(o->cfg->plugin_path, t->plugin_path) != 0)
                continue;
            if (strcmp(o->cfg->name, t->name) == 0 &&
                strcmp(o->cfg->queue, t->queue) == 0 &&
                strcmp(o->cfg->config_json, t->config_json) == 0 &&
                !(o->plugin->desc.flags & TM_TASK_F_INIT_ON_RELOAD) &&
                !tm_plugin_changed(o->plugin))
                return o->plugin;
        }
    }
    return NULL;
}

/* z_load loads generation rq->gen from the configuration file, which must
 * still describe the tasks the daemon loaded, and runs the cb_init of
 * each task that keeps no plugin of a live generation: the one cb_init of
 * that task in the fork pool for this generation (the daemon ran none,
 * daemon/gen.c), through the loader the daemon uses
 * (tm_plugin_load_tasks, with the same checks). Returns 0, or -1 with a
 * reason in err, placed in the file as the daemon places a refusal
 * (FILE:LINE:COL: tasks.NAME.KEY). */
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
    if (tm_zy_fingerprint(g.tasks, g.ntasks) != rq->fingerprint) {
        tm_snprintf(err, errlen, "%s changed while it was being loaded",
                    rq->path);
        goto out;
    }
    if (tm_plugin_load_tasks(g.cfg, g.own, z_plugin_for, NULL, 0, err,
                             errlen) != 0)
        goto out;
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

/* fork_paired makes a socket pair of type (SOCK_STREAM, SOCK_SEQPACKET;
 * close-on-exec) in sv and forks: returns the child's pid in the parent,
 * 0 in the child, each then closing the end that is not its own (sv[0]
 * is the parent's, sv[1] the child's); -1 with a reason in err and no
 * descriptor left open. */
static pid_t fork_paired(int type, int sv[2], char *err, size_t errlen)
{
    char eb[TM_STRERRNO_BUF];
    if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sv) != 0) {
        tm_snprintf(err, errlen, "socketpair: %s",
                    tm_strerror(errno, eb, sizeof eb));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        tm_snprintf(err, errlen, "fork: %s",
                    tm_strerror(errno, eb, sizeof eb));
        close(sv[0]);
        close(sv[1]);
    }
    return pid;
}

/* z_spawn forks worker rq->index of generation rq->gen. Returns its pid
 * with the daemon's end of its socket in *fd, or -1. */
static pid_t z_spawn(const struct zy_req *rq, int *fd, char *err,
                     size_t errlen)
{
    const struct zy_gen *g = z_find(rq->gen);
    if (g == NULL) {
        tm_snprintf(err, errlen, "no generation %u", rq->gen);
        return -1;
    }
    int sv[2];
    pid_t self = getpid();
    pid_t pid = fork_paired(SOCK_STREAM, sv, err, errlen);
    if (pid < 0)
        return -1;
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
        if (tm_zy_send(z_ctl, &m, sizeof m, -1) != 0)
            return -1;
    }
}

void tm_zygote_main(int ctl, pid_t parent_pid, struct tm_task **tasks,
                    size_t ntasks)
{
    z_ctl = ctl;
    prctl(PR_SET_NAME, ZY_NAME);
    /* die with the seed (which dies with the daemon); its workers die
     * with it in turn */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent_pid)
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
    /* the heap is the daemon's at the fork: what its start-up freed (the
     * YAML document, the config's scratch) goes back, so that neither
     * this process nor every worker forked from it keeps those pages */
    malloc_trim(0);

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
        ssize_t n = tm_zy_recv(z_ctl, &rq, sizeof rq, NULL, 1);
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
        int sent = tm_zy_send(z_ctl, &m, sizeof m, fd);
        if (fd >= 0)
            close(fd);
        if (sent != 0)
            break;
    }
    /* the workers end with it (their parent-death signal) */
    _exit(0);
}


/* ---- the seed process -------------------------------------------------- */

/* How long the seed, told to end, waits for its zygote to exit before it
 * ends anyway (the zygote then dies of its parent-death signal). */
#define ZY_SEED_GRACE_MS 2000

/* s_fork_zygote forks a zygote with tasks as its generation 1. Returns its
 * pid with the seed's end of its control socket in *fd, or -1 with a
 * reason in err. */
static pid_t s_fork_zygote(int ctl, int sfd, struct tm_task **tasks,
                           size_t ntasks, int *fd, char *err, size_t errlen)
{
    int sv[2];
    pid_t self = getpid();
    pid_t pid = fork_paired(SOCK_SEQPACKET, sv, err, errlen);
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(ctl);
        close(sfd);
        close(sv[0]);
        tm_zygote_main(sv[1], self, tasks, ntasks);
    }
    close(sv[1]);
    *fd = sv[0];
    return pid;
}

void tm_zygote_seed_main(int ctl, pid_t daemon_pid, struct tm_task **tasks,
                         size_t ntasks)
{
    prctl(PR_SET_NAME, ZY_SEED_NAME);
    /* die with the daemon; a zygote dies with the seed in turn */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != daemon_pid)
        _exit(1);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0)
        _exit(1);
    /* what the daemon's start-up freed goes back before any zygote is
     * forked (see tm_zygote_main) */
    malloc_trim(0);
    unsigned alive = 0; /* zygotes not reaped yet */
    static struct zy_req rq;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = ctl, .events = POLLIN},
                                {.fd = sfd, .events = POLLIN}};
        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            break;
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            }
            int status;
            while (waitpid(-1, &status, WNOHANG) > 0)
                alive--;
        }
        if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = tm_zy_recv(ctl, &rq, sizeof rq, NULL, 1);
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n != (ssize_t)sizeof rq)
            break; /* the daemon is gone or done */
        struct zy_msg m = {.kind = ZY_REPLY, .rc = -1};
        int fd = -1;
        if (rq.op == ZY_ZYGOTE) {
            m.pid = s_fork_zygote(ctl, sfd, tasks, ntasks, &fd, m.err,
                                  sizeof m.err);
            if (m.pid > 0) {
                m.rc = 0;
                alive++;
            }
        } else {
            tm_snprintf(m.err, sizeof m.err, "unknown request %u", rq.op);
        }
        int sent = tm_zy_send(ctl, &m, sizeof m, fd);
        if (fd >= 0)
            close(fd);
        if (sent != 0)
            break;
    }
    /* the daemon closed the zygote's socket before this one: give the
     * zygote its time to end on its own */
    for (int ms = 0; alive > 0 && ms < ZY_SEED_GRACE_MS; ms++) {
        int status;
        while (alive > 0 && waitpid(-1, &status, WNOHANG) > 0)
            alive--;
        if (alive > 0)
            tm_sleep_ms(1);
    }
    _exit(0);
}
