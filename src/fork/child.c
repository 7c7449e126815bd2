/* fork/child.c - the fork pool's worker process. */
#include "fork/child_private.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "task/task.h"
#include "fork/ring.h"
#include "fork/wire.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "pool:fork"

/* fill reads from fd into b until it holds at least need unread bytes
 * (blocking). Returns 0, or -1 when the parent closed the socket. */
static int fill(int fd, struct tm_fork_buf *b, size_t need)
{
    if (b->off > 0) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->cap < need || b->cap == 0) {
        size_t cap = b->cap ? b->cap : 64 * 1024;
        while (cap < need)
            cap *= 2;
        b->p = tm_realloc(b->p, cap);
        b->cap = cap;
    }
    while (b->len < need) {
        ssize_t r = read(fd, b->p + b->len, b->cap - b->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b->len += (size_t)r;
    }
    return 0;
}

/* note_at_front looks at the note at the front of b (which holds a whole
 * note header); exits the process (4) on bytes that are no note. */
static void note_at_front(const struct tm_fork_buf *b, struct tm_fork_note *n)
{
    memcpy(n, b->p + b->off, sizeof *n);
    if (n->magic != TM_FORK_MAGIC_NOTE ||
        (n->kind != TM_NOTE_WAKE && n->kind != TM_NOTE_BULK))
        _exit(4);
}

/* wait_note sleeps until the parent sends a note: WAKE notes are taken,
 * a BULK note is left for take_bulk. Returns 0, or -1 when the parent
 * closed the socket. */
static int wait_note(int fd, struct tm_fork_buf *b)
{
    int woke = 0;
    for (;;) {
        while (b->len - b->off >= sizeof(struct tm_fork_note)) {
            struct tm_fork_note n;
            note_at_front(b, &n);
            if (n.kind == TM_NOTE_BULK)
                return 0;
            b->off += sizeof n;
            woke = 1;
        }
        if (woke)
            return 0;
        if (fill(fd, b, b->len - b->off + 1) != 0)
            return -1;
    }
}

/* take_bulk takes the next BULK note's n bytes (passing WAKE notes)
 * into dst. Returns 0, -1 when the parent closed the socket; exits (4)
 * when the note is not the one the request announced. */
static int take_bulk(int fd, struct tm_fork_buf *b, char *dst, uint64_t n)
{
    struct tm_fork_note note;
    for (;;) {
        if (fill(fd, b, sizeof note) != 0)
            return -1;
        note_at_front(b, &note);
        b->off += sizeof note;
        if (note.kind == TM_NOTE_BULK)
            break;
    }
    if (note.len != n)
        _exit(4);
    while (n > 0) {
        size_t chunk = n < 1024 * 1024 ? (size_t)n : 1024 * 1024;
        if (fill(fd, b, chunk) != 0)
            return -1;
        memcpy(dst, b->p + b->off, chunk);
        b->off += chunk;
        dst += chunk;
        n -= chunk;
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

static int send_note(int fd, uint32_t kind, uint64_t len)
{
    struct tm_fork_note n = {.magic = TM_FORK_MAGIC_NOTE, .kind = kind,
                             .len = len};
    return write_full(fd, &n, sizeof n);
}

/* struct child_ring is the child's view of its rings (fork/ring.h). */
struct child_ring {
    struct tm_ring_ctl *ctl;    /* with the answer area: read-write */
    char *ans;
    const char *req;            /* read-only */
    uint64_t req_tail;          /* the next request */
    uint64_t ans_head;          /* as published */
    uint64_t low_told;          /* the parent's low mark last told of */
};

/* map_rings maps the memfd the parent sent. Returns 0 or -1. */
static int map_rings(int memfd, struct child_ring *cr)
{
    void *rw = mmap(NULL, TM_RING_REQ_OFF, PROT_READ | PROT_WRITE,
                    MAP_SHARED, memfd, 0);
    void *ro = mmap(NULL, TM_RING_REQ_CAP, PROT_READ, MAP_SHARED, memfd,
                    TM_RING_REQ_OFF);
    close(memfd);
    if (rw == MAP_FAILED || ro == MAP_FAILED)
        return -1;
    cr->ctl = rw;
    if (cr->ctl->magic != TM_RING_MAGIC ||
        cr->ctl->ans_cap != TM_RING_ANS_CAP ||
        cr->ctl->req_cap != TM_RING_REQ_CAP)
        return -1;
    cr->ans = (char *)rw + TM_RING_ANS_OFF;
    cr->req = ro;
    /* a fresh ring: the parent may have published requests already */
    cr->req_tail = 0;
    cr->ans_head = 0;
    cr->low_told = 0;
    return 0;
}

/* next_request waits for the next request record. Returns 1 with it
 * (*waited set when the ring was empty first), or 0 when the parent
 * closed the socket; exits (4) on a malformed one. */
static int next_request(int fd, struct tm_fork_buf *rb, struct child_ring *cr,
                        struct tm_ring_rec *rec, const char **payload,
                        int *waited)
{
    *waited = 0;
    const char *why = NULL;
    for (;;) {
        uint64_t head = atomic_load_explicit(&cr->ctl->req_head,
                                             memory_order_acquire);
        int got = tm_ring_peek(cr->req, TM_RING_REQ_CAP, head, &cr->req_tail,
                               rec, payload, &why);
        if (got < 0)
            _exit(4);
        if (got > 0)
            return 1;
        /* pairs with the parent's store of req_head, then load of
         * child_waiting, all sequentially consistent: it sends a WAKE, or
         * this sees its request (a store-load pair, which weaker orders
         * or a fence between relaxed accesses would also give, but
         * ThreadSanitizer does not model fences) */
        *waited = 1;
        atomic_store_explicit(&cr->ctl->child_waiting, 1,
                              memory_order_seq_cst);
        int rc = 0;
        if (atomic_load_explicit(&cr->ctl->req_head, memory_order_seq_cst) ==
            cr->req_tail)
            rc = wait_note(fd, rb);
        atomic_store_explicit(&cr->ctl->child_waiting, 0,
                              memory_order_relaxed);
        if (rc != 0)
            return 0;
    }
}

/* answer writes the answer to a run into the answer ring and publishes
 * it; error and result go on the socket (BULK) when they would not fit
 * the ring. Returns 0, or -1 when the socket failed. */
static int answer(int fd, struct child_ring *cr, const struct tm_fork_resp *rs,
                  const char *error, const char *result)
{
    int rc = 0;
    uint64_t text = (uint64_t)rs->error_len + rs->result_len;
    int bulk = sizeof *rs + text > TM_RING_INLINE_MAX;
    uint32_t len = bulk ? (uint32_t)sizeof *rs : (uint32_t)(sizeof *rs + text);
    char *p;
    /* cannot stay NULL: at most TM_RING_ANSWERS_MAX answers of at most
     * TM_RING_INLINE_MAX are unread (fork/ring.h); should the parent be
     * slow anyway, it is woken and given time */
    while ((p = tm_ring_reserve(cr->ans, TM_RING_ANS_CAP, &cr->ans_head,
                                atomic_load_explicit(&cr->ctl->ans_tail,
                                                     memory_order_acquire),
                                len, bulk ? TM_RING_FRAME_BULK
                                          : TM_RING_FRAME)) == NULL) {
        rc = send_note(fd, TM_NOTE_WAKE, 0);
        if (rc != 0)
            goto out;
        tm_sleep_ms(1);
    }
    memcpy(p, rs, sizeof *rs);
    if (!bulk && rs->error_len > 0)
        memcpy(p + sizeof *rs, error, rs->error_len);
    if (!bulk && rs->result_len > 0)
        memcpy(p + sizeof *rs + rs->error_len, result, rs->result_len);
    /* the whole record first, then the head: a child killed before
     * this store leaves no trace of the answer (seq_cst: it is also the
     * store of the store-load pair with parent_waiting below) */
    atomic_store_explicit(&cr->ctl->ans_head, cr->ans_head,
                          memory_order_seq_cst);
    if (bulk) {
        /* the data on the socket wakes the parent anyway */
        if (send_note(fd, TM_NOTE_BULK, text) != 0 ||
            (rs->error_len > 0 && write_full(fd, error, rs->error_len) != 0) ||
            (rs->result_len > 0 &&
             write_full(fd, result, (size_t)rs->result_len) != 0))
            rc = -1;
        goto out;
    }
    /* a few wake-ups per run of requests, not one per answer: while the
     * parent has more requests in the ring, only the first answer past
     * its low mark tells (so that it refills the ring while this process
     * runs the rest); the answer to the last request tells of all (the
     * parent also looks at the ring on its own, at least every few ms
     * while requests are out: fork/pool.c) */
    uint64_t low = atomic_load_explicit(&cr->ctl->req_low,
                                        memory_order_relaxed);
    int past_low = low > cr->low_told && cr->req_tail >= low;
    if (atomic_load_explicit(&cr->ctl->req_head, memory_order_acquire) !=
            cr->req_tail &&
        !past_low)
        goto out;
    if (past_low)
        cr->low_told = low;
    /* pairs with the parent's store of parent_waiting, then load of
     * ans_head (sequentially consistent, as the store of ans_head above):
     * it sees this answer, or this sees that it sleeps; taken, so that
     * one sleep of the parent gets one WAKE */
    if (atomic_exchange_explicit(&cr->ctl->parent_waiting, 0,
                                 memory_order_seq_cst))
        rc = send_note(fd, TM_NOTE_WAKE, 0);
out:
    return rc;
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
    static struct tm_fork_buf in; /* a body that came on the socket */
    static struct tm_fork_buf rb; /* what the parent sent, read in bulk */
    static struct child_ring cr;
    /* refused[t]: task t's worker init failed here; this process answers
     * its messages rejected and runs the other tasks as usual (exiting
     * would fail every task's messages, and a new child would fail the
     * same way: a crash loop) */
    static char *refused;
    wdata = tm_calloc(a->ntasks ? a->ntasks : 1, sizeof *wdata);
    refused = tm_calloc(a->ntasks ? a->ntasks : 1, 1);
    for (size_t t = 0; t < a->ntasks; t++) {
        const struct tm_task_plugin *d = &a->tasks[t]->plugin->desc;
        if (d->cb_worker_init != NULL &&
            d->cb_worker_init(a->tasks[t]->plugin->task_data,
                              &wdata[t]) != 0) {
            tm_log_err(SRC, "worker %u: task '%s' refused its worker init: "
                       "its messages are rejected by this worker",
                       a->index, a->tasks[t]->cfg->name);
            refused[t] = 1;
        }
    }
    /* the parent's first words: the rings */
    int memfd = tm_ring_recv_hello(fd);
    if (memfd < 0 || map_rings(memfd, &cr) != 0)
        _exit(4);

    unsigned done = 0;
    /* runs back to back start at the end of the one before (one clock
     * reading per run, as in the thread pool); 0 after a wait */
    int64_t run_from = 0;
    for (;;) {
        struct tm_ring_rec rec;
        const char *payload = NULL;
        int waited = 0;
        if (next_request(fd, &rb, &cr, &rec, &payload, &waited) == 0)
            break; /* the parent closed: stop */
        if (waited)
            run_from = 0;
        /* the parent is trusted, but a request is checked whole before
         * anything in it is used */
        struct tm_fork_req rq;
        if (rec.len < sizeof rq)
            _exit(4);
        memcpy(&rq, payload, sizeof rq);
        uint64_t want = sizeof rq + (uint64_t)rq.id_len + 1 +
                        rq.invalid_len + 1;
        if (rec.kind == TM_RING_FRAME)
            want += rq.body_len + 1;
        if (rq.magic != TM_FORK_MAGIC_REQ || rq.task_index >= a->ntasks ||
            want != rec.len)
            _exit(4);
        const char *id = payload + sizeof rq;
        const char *invalid = id + rq.id_len + 1;
        const char *body = invalid + rq.invalid_len + 1;
        if (rec.kind == TM_RING_FRAME_BULK) {
            if (rq.body_len + 1 > in.cap) {
                in.p = tm_realloc(in.p, rq.body_len + 1);
                in.cap = rq.body_len + 1;
            }
            if (take_bulk(fd, &rb, in.p, rq.body_len) != 0)
                break;
            in.p[rq.body_len] = '\0';
            body = in.p;
        }

        struct tm_msg m;
        memset(&m, 0, sizeof m);
        m.task = a->tasks[rq.task_index];
        m.task_index = rq.task_index;
        m.id = id;
        m.id_len = rq.id_len;
        m.body = rq.has_body ? body : NULL;
        m.body_len = rq.body_len;
        /* the reason is static in the parent; here it points into the
         * ring, where the request stays until it is answered */
        m.invalid = rq.invalid_len > 0 ? invalid : NULL;
        m.attempt = rq.attempt;
        memcpy(m.traceparent, rq.traceparent, sizeof m.traceparent);
        m.traceparent[sizeof m.traceparent - 1] = '\0';
        /* a body read from the socket may have been waited for */
        if (refused[rq.task_index]) {
            m.t_start_ns = run_from != 0 ? run_from : tm_now_ns();
            m.t_end_ns = tm_now_ns();
            m.outcome = TM_OUT_REJECTED;
            m.error = tm_strdup("the task's worker init failed in this "
                                "worker process (see the log)");
        } else if (run_from != 0 && rec.kind == TM_RING_FRAME)
            tm_exec_run_from(&m, wdata[rq.task_index], run_from);
        else
            tm_exec_run(&m, wdata[rq.task_index]);
        run_from = m.t_end_ns;
        /* the request's bytes are the parent's again once answered */
        cr.req_tail += tm_ring_rec_size(rec.len);

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
        int rc = answer(fd, &cr, &rs, m.error, m.result);
        tm_free(m.error);
        tm_free(m.result);
        if (rc != 0)
            break;
        done++;
        if (a->max_tasks > 0 && done >= a->max_tasks)
            break; /* recycled: the parent starts a fresh child */
    }
    for (size_t t = 0; t < a->ntasks; t++) {
        const struct tm_task_plugin *d = &a->tasks[t]->plugin->desc;
        if (d->cb_worker_fini != NULL && !refused[t])
            d->cb_worker_fini(a->tasks[t]->plugin->task_data, wdata[t]);
    }
    /* _exit: no atexit handlers or stdio flushes inherited from the
     * parent run here */
    _exit(0);
}
