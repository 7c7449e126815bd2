/* fork/zygote_client.c - the daemon's side of the zygote: starting its
 * seed, requests from any thread, exit reports, restarts. */
#include "fork/fork.h"
#include "fork/zygote_private.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "task/task.h"
#include "fork/zygote_proto_private.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "pool:fork"

/* How long the daemon gives the seed to exit once told to (the seed gives
 * its zygote 2 s of that, fork/zygote.c). */
#define ZY_EXIT_GRACE_NS (3000LL * 1000000LL)

/* A zygote that died is restarted after ZY_BACKOFF_MIN_NS, doubling at
 * each death up to ZY_BACKOFF_MAX_NS; one that had lived ZY_STABLE_NS
 * starts that over. */
#define ZY_BACKOFF_MIN_NS (100LL * 1000000LL)
#define ZY_BACKOFF_MAX_NS (10000LL * 1000000LL)
#define ZY_STABLE_NS (30000LL * 1000000LL)

struct zy_exit {
    unsigned zygote;            /* the incarnation that reported it */
    pid_t pid;
    int status;
};

/* struct zy_gen_rec is a generation after the first, as the daemon
 * registered it: what a restarted zygote is asked to load again. */
struct zy_gen_rec {
    unsigned gen;
    unsigned loaded_in;         /* the incarnation holding it; 0: none */
    uint64_t fingerprint;
    char *path;
};

/* zc is the daemon's handle on the seed and the zygote; mu serialises
 * requests and every read of the sockets (a zygote's replies and exits
 * share its socket). */
static struct {
    pthread_mutex_t mu;
    int seed_fd;                /* -1: no seed (never, gone, done) */
    pid_t seed_pid;
    int started;                /* a seed was started: never fork another */
    int fd;                     /* -1: no zygote now */
    pid_t pid;
    unsigned incarnation;       /* zygotes started so far; the current's */
    int64_t born_ns;            /* the current zygote's start */
    int64_t retry_at_ns;        /* no zygote: the next restart's time */
    int64_t delay_ns;           /* the delay after the next death */
    unsigned refs;              /* generations attached */
    unsigned next_gen;
    struct zy_gen_rec *gens;    /* attached ones after the first */
    size_t ngens;
    struct zy_exit *exits;      /* reported, not yet waited for */
    size_t nexits, cap;
} zc = {.mu = PTHREAD_MUTEX_INITIALIZER, .seed_fd = -1, .fd = -1,
        .delay_ns = ZY_BACKOFF_MIN_NS};

static atomic_ulong zy_restarts;

unsigned long tm_zygote_restarts(void)
{
    return atomic_load(&zy_restarts);
}

/* c_gone forgets a zygote that stopped answering (mu held) and schedules
 * its restart. Its workers die with it. broken: it broke the protocol
 * rather than exited, and may still run. */
static void c_gone(int broken)
{
    if (zc.fd < 0)
        return;
    int64_t now = tm_now_ns();
    if (now - zc.born_ns >= ZY_STABLE_NS)
        zc.delay_ns = ZY_BACKOFF_MIN_NS;
    zc.retry_at_ns = now + zc.delay_ns;
    tm_log_err(SRC, "the worker zygote (pid %d) is gone; its workers "
               "are gone with it and are not replaced until it is "
               "restarted (in %lld ms)", (int)zc.pid,
               (long long)(zc.delay_ns / 1000000LL));
    zc.delay_ns = zc.delay_ns * 2 < ZY_BACKOFF_MAX_NS ? zc.delay_ns * 2
                                                      : ZY_BACKOFF_MAX_NS;
    close(zc.fd);
    zc.fd = -1;
    /* the seed reaps it; a zygote that closed its socket has ended, and
     * one that did not is still the seed's child (no recycled pid) */
    if (broken)
        kill(zc.pid, SIGKILL);
}

/* c_recv reads one message from the zygote (mu held): exits are filed, a
 * reply is returned. Returns 1 for a reply (in *m, a passed descriptor in
 * *fd), 2 for an exit filed, 0 for nothing yet (dontwait), -1 when the
 * zygote is gone. */
static int c_recv(struct zy_msg *m, int *fd, int dontwait)
{
    ssize_t n = tm_zy_recv(zc.fd, m, sizeof *m, fd, dontwait);
    if (n < 0 && dontwait && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n != (ssize_t)sizeof *m) {
        if (fd != NULL && *fd >= 0)
            close(*fd);
        c_gone(n > 0);
        return -1;
    }
    if (m->kind == ZY_REPLY)
        return 1;
    if (zc.nexits == zc.cap) {
        zc.cap = zc.cap ? zc.cap * 2 : 16;
        zc.exits = tm_realloc(zc.exits, zc.cap * sizeof *zc.exits);
    }
    zc.exits[zc.nexits++] =
        (struct zy_exit){zc.incarnation, m->pid, m->status};
    return 2;
}

/* c_request sends rq to the zygote and waits for its reply (mu held).
 * Returns 0, or -1 when the zygote is gone. */
static int c_request(const struct zy_req *rq, struct zy_msg *reply, int *fd)
{
    if (zc.fd < 0)
        return -1;
    if (tm_zy_send(zc.fd, rq, sizeof *rq, -1) != 0) {
        c_gone(0);
        return -1;
    }
    int rc;
    while ((rc = c_recv(reply, fd, 0)) == 2) {
        /* an exit came first: filed */
    }
    return rc == 1 ? 0 : -1;
}

/* c_load has the current zygote load generation r (mu held). Returns 0,
 * or -1 with a reason in err (the zygote's, or that it is gone). */
static int c_load(struct zy_gen_rec *r, char *err, size_t errlen)
{
    static struct zy_req rq;
    memset(&rq, 0, sizeof rq);
    rq.op = ZY_LOAD;
    rq.gen = r->gen;
    rq.fingerprint = r->fingerprint;
    memcpy(rq.path, r->path, strlen(r->path) + 1);
    struct zy_msg reply;
    if (c_request(&rq, &reply, NULL) != 0) {
        tm_snprintf(err, errlen, "the worker zygote is gone");
        return -1;
    }
    if (reply.rc != 0) {
        reply.err[sizeof reply.err - 1] = '\0';
        tm_snprintf(err, errlen, "%s", reply.err);
        return -1;
    }
    r->loaded_in = zc.incarnation;
    return 0;
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

/* c_start_seed forks the seed with tasks as every zygote's generation 1
 * (mu held). */
static int c_start_seed(struct tm_task **tasks, size_t ntasks)
{
    char eb[TM_STRERRNO_BUF];
    int sv[2];
    zc.started = 1;
    int nthreads = threads_now();
    if (nthreads != 1)
        tm_log_warn(SRC, "the worker zygote's seed is forked while %d "
                    "threads run", nthreads);
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
        tm_zygote_seed_main(sv[1], daemon_pid, tasks, ntasks);
    }
    close(sv[1]);
    zc.seed_fd = sv[0];
    zc.seed_pid = pid;
    zc.next_gen = 2;
    tm_log_debug(SRC, "worker zygote seed started (pid %d)", (int)pid);
    return 0;
}

/* c_seed_gone forgets a seed that stopped answering (mu held): no zygote
 * can be started any more. */
static void c_seed_gone(void)
{
    if (zc.seed_fd < 0)
        return;
    tm_log_err(SRC, "the worker zygote's seed (pid %d) is gone: the fork "
               "pool's workers that end are no longer replaced; restart "
               "the daemon", (int)zc.seed_pid);
    close(zc.seed_fd);
    zc.seed_fd = -1;
    kill(zc.seed_pid, SIGKILL);
    int status;
    while (waitpid(zc.seed_pid, &status, 0) < 0 && errno == EINTR) {
    }
}

/* c_new_zygote has the seed fork a zygote and makes it the current one,
 * with every attached generation loaded into it again (mu held). Returns
 * 0, or -1 with a reason in err. */
static int c_new_zygote(char *err, size_t errlen)
{
    assert(zc.fd < 0);
    if (zc.seed_fd < 0) {
        tm_snprintf(err, errlen, "the worker zygote's seed is gone");
        return -1;
    }
    struct zy_req rq = {.op = ZY_ZYGOTE};
    struct zy_msg reply;
    int fd = -1;
    ssize_t n = -1;
    if (tm_zy_send(zc.seed_fd, &rq, sizeof rq, -1) == 0)
        n = tm_zy_recv(zc.seed_fd, &reply, sizeof reply, &fd, 0);
    if (n != (ssize_t)sizeof reply || reply.kind != ZY_REPLY) {
        if (fd >= 0)
            close(fd);
        c_seed_gone();
        tm_snprintf(err, errlen, "the worker zygote's seed is gone");
        return -1;
    }
    if (reply.rc != 0 || fd < 0) {
        if (fd >= 0)
            close(fd);
        reply.err[sizeof reply.err - 1] = '\0';
        tm_snprintf(err, errlen, "the seed could not fork a worker "
                    "zygote: %s", reply.err);
        return -1;
    }
    zc.fd = fd;
    zc.pid = reply.pid;
    zc.incarnation++;
    zc.born_ns = tm_now_ns();
    for (size_t i = 0; i < zc.ngens && zc.fd >= 0; i++) {
        char why[1024];
        if (c_load(&zc.gens[i], why, sizeof why) != 0)
            tm_log_err(SRC, "worker zygote (pid %d): configuration %u "
                       "could not be loaded again: %s; its workers are "
                       "not replaced until it loads", (int)zc.pid,
                       zc.gens[i].gen, why);
    }
    if (zc.fd < 0) {
        tm_snprintf(err, errlen, "the new worker zygote died at once");
        return -1;
    }
    return 0;
}

/* c_ensure makes sure there is a zygote (mu held), restarting it when its
 * time has come, or now with force. Returns 0, or -1 with the time to
 * try again in *retry_ns. */
static int c_ensure(int force, int64_t *retry_ns)
{
    if (zc.fd >= 0)
        return 0;
    int64_t now = tm_now_ns();
    if (zc.seed_fd < 0) {
        *retry_ns = now + ZY_BACKOFF_MAX_NS;
        return -1;
    }
    if (!force && now < zc.retry_at_ns) {
        *retry_ns = zc.retry_at_ns;
        return -1;
    }
    char err[512];
    if (c_new_zygote(err, sizeof err) != 0) {
        zc.retry_at_ns = now + zc.delay_ns;
        tm_log_err(SRC, "the worker zygote could not be restarted: %s; "
                   "next try in %lld ms", err,
                   (long long)(zc.delay_ns / 1000000LL));
        zc.delay_ns = zc.delay_ns * 2 < ZY_BACKOFF_MAX_NS
                          ? zc.delay_ns * 2
                          : ZY_BACKOFF_MAX_NS;
        *retry_ns = zc.retry_at_ns;
        return -1;
    }
    unsigned long k = atomic_fetch_add(&zy_restarts, 1) + 1;
    tm_log_warn(SRC, "worker zygote restarted (pid %d, restart %lu)",
                (int)zc.pid, k);
    return 0;
}

int tm_zygote_attach(const struct tm_cfg *cfg, struct tm_task **tasks,
                     size_t ntasks, unsigned *gen, char *err, size_t errlen)
{
    int rc = -1;
    int64_t retry;
    *gen = 0;
    pthread_mutex_lock(&zc.mu);
    if (!zc.started) {
        if (c_start_seed(tasks, ntasks) != 0) {
            tm_snprintf(err, errlen, "the worker zygote's seed could not "
                        "be started");
            goto out;
        }
        if (c_new_zygote(err, errlen) != 0)
            goto out;
        *gen = 1;
        zc.refs++;
        rc = 0;
        goto out;
    }
    if (strlen(cfg->path) >= sizeof((struct zy_req *)0)->path) {
        tm_snprintf(err, errlen, "configuration path too long");
        goto out;
    }
    /* a zygote that is down is restarted now: the reload waits for it */
    if (c_ensure(1, &retry) != 0) {
        tm_snprintf(err, errlen, "no worker zygote to load it (see the "
                    "log)");
        goto out;
    }
    struct zy_gen_rec r = {.gen = zc.next_gen++,
                           .fingerprint = tm_zy_fingerprint(tasks, ntasks),
                           .path = tm_strdup(cfg->path)};
    if (c_load(&r, err, errlen) != 0) {
        tm_free(r.path);
        goto out;
    }
    zc.gens = tm_realloc(zc.gens, (zc.ngens + 1) * sizeof *zc.gens);
    zc.gens[zc.ngens++] = r;
    *gen = r.gen;
    zc.refs++;
    rc = 0;
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
    int loaded = gen == 1;
    for (size_t i = 0; i < zc.ngens; i++) {
        if (zc.gens[i].gen == gen) {
            loaded = zc.gens[i].loaded_in == zc.incarnation;
            tm_free(zc.gens[i].path);
            zc.gens[i] = zc.gens[--zc.ngens];
            break;
        }
    }
    struct zy_req rq = {.op = ZY_DROP, .gen = gen};
    struct zy_msg reply;
    if (zc.fd >= 0 && loaded)
        c_request(&rq, &reply, NULL);
    if (--zc.refs == 0) {
        /* the last generation: closing the sockets ends the zygote, then
         * the seed */
        if (zc.fd >= 0)
            close(zc.fd);
        zc.fd = -1;
        if (zc.seed_fd >= 0) {
            close(zc.seed_fd);
            zc.seed_fd = -1;
            int64_t until = tm_now_ns() + ZY_EXIT_GRACE_NS;
            int status;
            while (waitpid(zc.seed_pid, &status, WNOHANG) == 0) {
                if (tm_now_ns() >= until) {
                    kill(zc.seed_pid, SIGKILL);
                    waitpid(zc.seed_pid, &status, 0);
                    break;
                }
                tm_sleep_ms(1);
            }
        }
        tm_free(zc.exits);
        zc.exits = NULL;
        zc.nexits = zc.cap = 0;
        tm_free(zc.gens);
        zc.gens = NULL;
        zc.ngens = 0;
    }
    pthread_mutex_unlock(&zc.mu);
}

pid_t tm_zygote_spawn(unsigned gen, unsigned index, unsigned max_tasks,
                      int *fd, unsigned *zygote, int64_t *retry_ns)
{
    pid_t pid = -1;
    struct zy_req rq = {.op = ZY_SPAWN, .gen = gen, .index = index,
                        .max_tasks = max_tasks};
    struct zy_msg reply;
    int got = -1;
    *retry_ns = 0;
    pthread_mutex_lock(&zc.mu);
    if (c_ensure(0, retry_ns) != 0)
        goto out;
    for (size_t i = 0; i < zc.ngens; i++) {
        struct zy_gen_rec *r = &zc.gens[i];
        char why[1024];
        if (r->gen != gen || r->loaded_in == zc.incarnation)
            continue;
        if (c_load(r, why, sizeof why) != 0) {
            tm_log_err(SRC, "worker zygote (pid %d): configuration %u "
                       "could not be loaded again: %s", (int)zc.pid, gen,
                       why);
            goto out;
        }
    }
    if (c_request(&rq, &reply, &got) == 0) {
        if (reply.rc == 0 && reply.pid > 0 && got >= 0) {
            pid = reply.pid;
            *fd = got;
            *zygote = zc.incarnation;
            got = -1;
        } else {
            reply.err[sizeof reply.err - 1] = '\0';
            tm_log_err(SRC, "worker zygote: %s", reply.err);
        }
    } else {
        *retry_ns = zc.retry_at_ns;
    }
out:
    if (got >= 0)
        close(got);
    pthread_mutex_unlock(&zc.mu);
    return pid;
}

/* c_take removes the exit of zygote's worker pid from the filed ones (mu
 * held). */
static int c_take(unsigned zygote, pid_t pid, int *status)
{
    for (size_t i = 0; i < zc.nexits; i++) {
        if (zc.exits[i].zygote == zygote && zc.exits[i].pid == pid) {
            *status = zc.exits[i].status;
            zc.exits[i] = zc.exits[--zc.nexits];
            return 1;
        }
    }
    return 0;
}

int tm_zygote_wait(unsigned zygote, pid_t pid, int64_t deadline_ns,
                   int *status)
{
    for (;;) {
        int found = 0;
        pthread_mutex_lock(&zc.mu);
        struct zy_msg m;
        while (!(found = c_take(zygote, pid, status)) && zc.fd >= 0 &&
               zygote == zc.incarnation && c_recv(&m, NULL, 1) == 2) {
            /* filed an exit: look again */
        }
        if (!found && (zc.fd < 0 || zygote != zc.incarnation)) {
            /* its zygote is gone, and its workers with it */
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
