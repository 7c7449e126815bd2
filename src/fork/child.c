/* fork/child.c - the fork pool's worker process. */
#include "fork/child.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core.h"
#include "fork/wire.h"
#include "log.h"
#include "util.h"

#define SRC "pool:fork"

/* take copies the next n bytes the parent sent into dst, reading from fd
 * in bulk (a whole batch per read when it fits) through b. Returns 0, or
 * -1 when the parent closed the socket. */
static int take(int fd, struct tm_fork_buf *b, void *dst, size_t n)
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

static void exit_now(int status, void *arg)
{
    (void)arg;
    _exit(status);
}

void tm_fork_child_main(const struct tm_fork_child *a)
{
    /* task code that calls exit() ends here, with no atexit handler or
     * stdio flush inherited from the parent */
    on_exit(exit_now, NULL);
    int fd = a->fd;

    /* die with the parent, even when it is killed with SIGKILL */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != a->parent_pid)
        _exit(1);
    /* the parent stops gracefully; children only obey SIGTERM/SIGKILL */
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);

    /* file-level so that they stay reachable when task code calls exit()
     * in the middle of a run (leak checkers look at globals) */
    static void **wdata;
    static struct tm_fork_buf in, out;
    static struct tm_fork_buf rb; /* what the parent sent, read in bulk */
    wdata = tm_calloc(a->ntasks ? a->ntasks : 1, sizeof *wdata);
    for (size_t t = 0; t < a->ntasks; t++) {
        const struct tm_task_plugin *d = &a->tasks[t]->plugin->desc;
        if (d->cb_worker_init != NULL &&
            d->cb_worker_init(a->tasks[t]->plugin->task_data,
                              &wdata[t]) != 0) {
            tm_log_err(SRC, "worker %u: task '%s' refused its worker init",
                       a->index, a->tasks[t]->cfg->name);
            _exit(3);
        }
    }

    unsigned done = 0;
    for (;;) {
        struct tm_fork_req rq;
        if (take(fd, &rb, &rq, sizeof rq) != 0)
            break; /* the parent closed: stop */
        if (rq.magic != TM_FORK_MAGIC_REQ || rq.task_index >= a->ntasks)
            _exit(4);
        size_t need = (size_t)rq.id_len + rq.invalid_len + rq.body_len + 3;
        if (need > in.cap) {
            in.p = tm_realloc(in.p, need);
            in.cap = need;
        }
        char *id = in.p;
        char *invalid = id + rq.id_len + 1;
        char *body = invalid + rq.invalid_len + 1;
        if (take(fd, &rb, id, rq.id_len) != 0 ||
            take(fd, &rb, invalid, rq.invalid_len) != 0 ||
            take(fd, &rb, body, rq.body_len) != 0)
            break;
        id[rq.id_len] = '\0';
        invalid[rq.invalid_len] = '\0';
        body[rq.body_len] = '\0';

        struct tm_msg m;
        memset(&m, 0, sizeof m);
        m.task = a->tasks[rq.task_index];
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

        size_t error_len = m.error != NULL ? strlen(m.error) : 0;
        if (error_len > TM_FORK_ERROR_MAX) {
            /* the parent refuses longer: cut at a character boundary */
            error_len = TM_FORK_ERROR_MAX;
            while (error_len > 0 &&
                   ((unsigned char)m.error[error_len] & 0xC0) == 0x80)
                error_len--;
        }
        struct tm_fork_resp rs = {
            .magic = TM_FORK_MAGIC_RESP,
            .outcome = (uint32_t)m.outcome,
            .error_len = (uint32_t)error_len,
            .task_index = rq.task_index,
            .result_len = m.result != NULL ? m.result_len : 0,
            .seq = rq.seq,
            .t_start_ns = m.t_start_ns,
            .t_end_ns = m.t_end_ns,
        };
        out.len = 0;
        tm_fork_buf_put(&out, &rs, sizeof rs);
        if (rs.error_len > 0)
            tm_fork_buf_put(&out, m.error, rs.error_len);
        if (rs.result_len > 0)
            tm_fork_buf_put(&out, m.result, rs.result_len);
        tm_free(m.error);
        tm_free(m.result);
        if (write_full(fd, out.p, out.len) != 0)
            break;
        done++;
        if (a->max_tasks > 0 && done >= a->max_tasks)
            break; /* recycled: the parent starts a fresh child */
    }
    for (size_t t = 0; t < a->ntasks; t++) {
        const struct tm_task_plugin *d = &a->tasks[t]->plugin->desc;
        if (d->cb_worker_fini != NULL)
            d->cb_worker_fini(a->tasks[t]->plugin->task_data, wdata[t]);
    }
    /* _exit: no atexit handlers or stdio flushes inherited from the
     * parent run here */
    _exit(0);
}
