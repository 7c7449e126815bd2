/* fork/link.c - the parent's side of the rings and the socket of a child. */
#include "fork/link_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "task/msg.h"
#include "util/util.h"

/* the wire carries the message's traceparent whole */
_Static_assert(sizeof(((struct tm_fork_req *)0)->traceparent) ==
                   TM_TRACEPARENT_SIZE,
               "struct tm_fork_req.traceparent is not TM_TRACEPARENT_SIZE");

int tm_fork_link_open(struct tm_fork_link *l, int sock)
{
    int rc = -1;
    void *base = NULL;
    assert(l->memfd < 0 && l->base == NULL);
    int fd = tm_ring_create(&base);
    if (fd < 0)
        goto out;
    if (tm_ring_send_hello(sock, fd) != 0) {
        int e = errno;
        munmap(base, TM_RING_SIZE);
        close(fd);
        errno = e;
        goto out;
    }
    l->memfd = fd;
    l->base = base;
    l->ctl = base;
    l->ans = (char *)base + TM_RING_ANS_OFF;
    l->req = (char *)base + TM_RING_REQ_OFF;
    l->req_head = l->req_free = 0;
    l->ans_tail = l->ans_seen = 0;
    l->sock_clear = l->armed_head = 0;
    l->clock_ns = 0;
    l->w.len = l->w.off = 0;
    l->r.len = l->r.off = 0;
    rc = 0;
out:
    return rc;
}

void tm_fork_link_close(struct tm_fork_link *l)
{
    if (l->base != NULL)
        munmap(l->base, TM_RING_SIZE);
    if (l->memfd >= 0)
        close(l->memfd);
    l->memfd = -1;
    l->base = NULL;
    l->ctl = NULL;
    l->ans = l->req = NULL;
}

void tm_fork_link_free(struct tm_fork_link *l)
{
    tm_fork_link_close(l);
    tm_free(l->w.p);
    tm_free(l->r.p);
    tm_free(l->frame.p);
    memset(&l->w, 0, sizeof l->w);
    memset(&l->r, 0, sizeof l->r);
    memset(&l->frame, 0, sizeof l->frame);
}

int tm_fork_link_put(struct tm_fork_link *l, const struct tm_msg *m,
                     uint64_t seq)
{
    size_t invalid_len = m->invalid != NULL ? strlen(m->invalid) : 0;
    uint64_t body_len = m->body != NULL ? m->body_len : 0;
    struct tm_fork_req rq = {
        .magic = TM_FORK_MAGIC_REQ,
        .task_index = (uint32_t)m->task_index,
        .attempt = m->attempt,
        .id_len = (uint32_t)m->id_len,
        .invalid_len = (uint32_t)invalid_len,
        .has_body = m->body != NULL,
        .body_len = body_len,
        .seq = seq,
    };
    memcpy(rq.traceparent, m->traceparent, sizeof rq.traceparent);
    uint64_t head_len = sizeof rq + m->id_len + 1 + invalid_len + 1;
    int empty = l->req_head == l->req_free, rc = -1;
    uint32_t kind = TM_RING_FRAME;
    char *p = NULL;
    if (tm_ring_rec_size(head_len + body_len + 1) <= TM_RING_REQ_CAP)
        p = tm_ring_reserve(l->req, TM_RING_REQ_CAP, &l->req_head,
                            l->req_free, (uint32_t)(head_len + body_len + 1),
                            kind);
    if (p == NULL && !empty)
        goto out; /* answers to the requests out will make room */
    if (p == NULL) {
        /* too large for this ring even empty: the body goes on the
         * socket, right behind the notes already queued */
        kind = TM_RING_FRAME_BULK;
        p = tm_ring_reserve(l->req, TM_RING_REQ_CAP, &l->req_head,
                            l->req_free, (uint32_t)head_len, kind);
        if (p == NULL)
            goto out; /* an id or reason as large as the ring */
        struct tm_fork_note n = {.magic = TM_FORK_MAGIC_NOTE,
                                 .kind = TM_NOTE_BULK,
                                 .len = body_len};
        tm_fork_buf_put(&l->w, &n, sizeof n);
        if (body_len > 0)
            tm_fork_buf_put(&l->w, m->body, body_len);
    }
    memcpy(p, &rq, sizeof rq);
    p += sizeof rq;
    memcpy(p, m->id, m->id_len);
    p += m->id_len;
    *p++ = '\0';
    if (invalid_len > 0)
        memcpy(p, m->invalid, invalid_len);
    p += invalid_len;
    *p++ = '\0';
    if (kind == TM_RING_FRAME) {
        if (body_len > 0)
            memcpy(p, m->body, body_len);
        p[body_len] = '\0';
    }
    l->req_end[seq % TM_FORK_LINK_OUT] = l->req_head;
    assert(l->req_head - l->req_free <= TM_RING_REQ_CAP);
    rc = 0;
out:
    return rc;
}

static void put_wake(struct tm_fork_buf *b)
{
    struct tm_fork_note n = {.magic = TM_FORK_MAGIC_NOTE,
                             .kind = TM_NOTE_WAKE};
    tm_fork_buf_put(b, &n, sizeof n);
}

void tm_fork_link_publish(struct tm_fork_link *l, uint64_t low_seq)
{
    /* a hint only (the answer that empties the ring wakes the parent
     * anyway): stored before the head, and read by the child after its
     * answers */
    uint64_t low = l->req_end[low_seq % TM_FORK_LINK_OUT];
    assert(low > l->req_free && low <= l->req_head);
    atomic_store_explicit(&l->ctl->req_low, low, memory_order_relaxed);
    /* pairs with the child's store of child_waiting, then load of
     * req_head, all sequentially consistent: one of the two sees the
     * other's store */
    atomic_store_explicit(&l->ctl->req_head, l->req_head,
                          memory_order_seq_cst);
    if (atomic_load_explicit(&l->ctl->child_waiting, memory_order_seq_cst))
        put_wake(&l->w);
}

void tm_fork_link_answered(struct tm_fork_link *l, uint64_t seq)
{
    uint64_t end = l->req_end[seq % TM_FORK_LINK_OUT];
    assert(end > l->req_free && end <= l->req_head);
    l->req_free = end;
}

int tm_fork_link_flush(struct tm_fork_link *l, int sock)
{
    while (l->w.off < l->w.len) {
        ssize_t n = write(sock, l->w.p + l->w.off, l->w.len - l->w.off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -1;
        }
        l->w.off += (size_t)n;
    }
    l->w.len = l->w.off = 0;
    return 0;
}

int tm_fork_link_pending(const struct tm_fork_link *l)
{
    return l->w.off < l->w.len;
}

int tm_fork_link_answers_waiting(const struct tm_fork_link *l)
{
    return atomic_load_explicit(&l->ctl->ans_head, memory_order_acquire) !=
           l->ans_tail;
}

static void sock_clear_to(struct tm_fork_link *l, uint64_t head)
{
    if (head > l->sock_clear)
        l->sock_clear = head;
}

int tm_fork_link_sock_unread(const struct tm_fork_link *l)
{
    return atomic_load_explicit(&l->ctl->ans_head, memory_order_acquire) >
           l->sock_clear;
}

void tm_fork_link_sock_checked(struct tm_fork_link *l, uint64_t head)
{
    sock_clear_to(l, head);
}

void tm_fork_link_sock_quiet(struct tm_fork_link *l)
{
    sock_clear_to(l, l->armed_head);
}

int tm_fork_link_read(struct tm_fork_link *l, int sock)
{
    struct tm_fork_buf *b = &l->r;
    /* what the child wrote before publishing the answers up to head is
     * on the socket before this read */
    uint64_t head = atomic_load_explicit(&l->ctl->ans_head,
                                         memory_order_acquire);
    if (b->off > 0) {
        memmove(b->p, b->p + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    for (;;) {
        if (b->cap - b->len < 65536) {
            b->cap = b->cap ? b->cap * 2 : 65536;
            b->p = tm_realloc(b->p, b->cap);
        }
        size_t room = b->cap - b->len;
        ssize_t n = read(sock, b->p + b->len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sock_clear_to(l, head);
            return 0;
        }
        if (n <= 0) {
            /* what came before the end still counts, and nothing comes
             * after it */
            l->sock_clear = UINT64_MAX;
            return 1;
        }
        b->len += (size_t)n;
        if ((size_t)n < room) {
            /* a short read of a stream socket: it held no more */
            sock_clear_to(l, head);
            return 0;
        }
    }
}

/* next_note passes WAKE notes at the front of what the socket brought and
 * looks at the next one: 1 with it in *n (a BULK note, whose data may not
 * all be there yet), 0 when no whole note header is there, -1 for bytes
 * that are no note. */
static int next_note(struct tm_fork_link *l, struct tm_fork_note *n,
                     const char **why)
{
    struct tm_fork_buf *b = &l->r;
    while (b->len - b->off >= sizeof *n) {
        memcpy(n, b->p + b->off, sizeof *n);
        if (n->magic != TM_FORK_MAGIC_NOTE ||
            (n->kind != TM_NOTE_WAKE && n->kind != TM_NOTE_BULK) ||
            (n->kind == TM_NOTE_WAKE && n->len != 0)) {
            *why = "bytes on its socket that are no note";
            return -1;
        }
        if (n->kind == TM_NOTE_BULK) {
            if (n->len > TM_FORK_ERROR_MAX + TM_FORK_RESULT_MAX) {
                *why = "bulk data too long";
                return -1;
            }
            return 1;
        }
        b->off += sizeof *n;
    }
    return 0;
}

enum tm_fork_check tm_fork_link_answer(struct tm_fork_link *l,
                                       const struct tm_fork_expect *ex,
                                       struct tm_fork_resp *rs,
                                       const char **data, const char **why)
{
    enum tm_fork_check rc = TM_FORK_MORE;
    struct tm_fork_note n;
    int note = next_note(l, &n, why);
    if (note < 0) {
        rc = TM_FORK_CORRUPT;
        goto out;
    }
    /* read once: the child may change it at any time */
    uint64_t head = atomic_load_explicit(&l->ctl->ans_head,
                                         memory_order_acquire);
    /* the rest after a look at the socket (seen: the parent does not
     * sleep on them, fork/link.c tm_fork_link_arm) */
    int capped = head > l->sock_clear;
    if (capped)
        head = l->sock_clear;
    l->ans_seen = head;
    /* "now", for the check that the run ended by now: the clock reading
     * of an earlier answer first (a run that ended before it surely
     * ended by now), and, should the check fail, one taken after the
     * head was read (an answer published after the earlier reading may
     * end after it, and is no less sound for that): about one reading
     * per look, not one per answer */
    struct tm_fork_expect seen;
    if (ex != NULL) {
        seen = *ex;
        seen.not_after_ns = l->clock_ns;
        ex = &seen;
    }
    struct tm_ring_rec rec;
    const char *payload = NULL;
    int got = tm_ring_peek(l->ans, TM_RING_ANS_CAP, head, &l->ans_tail, &rec,
                           &payload, why);
    if (got < 0) {
        rc = TM_FORK_CORRUPT;
        goto out;
    }
    if (got == 0) {
        /* a child publishes its answer before it writes the answer's
         * bulk data: data with no answer is no reply (unless its answer
         * is one past sock_clear, taken after the next look) */
        if (note > 0 && !capped) {
            *why = "data on its socket for no answer";
            rc = TM_FORK_CORRUPT;
        }
        goto out;
    }
    if (ex == NULL) {
        *why = "a reply to no message";
        rc = TM_FORK_CORRUPT;
        goto out;
    }
    struct tm_fork_buf *f = &l->frame;
    f->len = f->off = 0;
    if (rec.kind == TM_RING_FRAME_BULK) {
        if (rec.len != sizeof *rs) {
            *why = "a bulk answer of the wrong size";
            rc = TM_FORK_CORRUPT;
            goto out;
        }
        if (note == 0 || l->r.len - l->r.off < sizeof n + n.len)
            goto out; /* the rest is on its way */
        tm_fork_buf_put(f, payload, rec.len);
        tm_fork_buf_put(f, l->r.p + l->r.off + sizeof n, (size_t)n.len);
        l->r.off += sizeof n + (size_t)n.len;
    } else {
        tm_fork_buf_put(f, payload, rec.len);
    }
    /* the private copy is what is checked and used */
    size_t flen = 0;
    rc = tm_fork_resp_check(f->p, f->len, ex, rs, &flen, why);
    if (rc == TM_FORK_CORRUPT && ex != NULL) {
        l->clock_ns = tm_now_ns();
        seen.not_after_ns = l->clock_ns;
        rc = tm_fork_resp_check(f->p, f->len, ex, rs, &flen, why);
    }
    if (rc != TM_FORK_CORRUPT && (rc != TM_FORK_FRAME || flen != f->len)) {
        *why = "an answer whose lengths do not add up";
        rc = TM_FORK_CORRUPT;
    }
    if (rc != TM_FORK_FRAME)
        goto out;
    *data = f->p + sizeof *rs;
    l->ans_tail += tm_ring_rec_size(rec.len);
    atomic_store_explicit(&l->ctl->ans_tail, l->ans_tail,
                          memory_order_release);
out:
    return rc;
}

int tm_fork_link_arm(struct tm_fork_link *l)
{
    /* pairs with the child's store of ans_head, then load of
     * parent_waiting, all sequentially consistent */
    atomic_store_explicit(&l->ctl->parent_waiting, 1, memory_order_seq_cst);
    l->armed_head = atomic_load_explicit(&l->ctl->ans_head,
                                         memory_order_seq_cst);
    return l->armed_head != l->ans_seen;
}

void tm_fork_link_disarm(struct tm_fork_link *l)
{
    atomic_store_explicit(&l->ctl->parent_waiting, 0, memory_order_relaxed);
}

void tm_fork_link_trim(struct tm_fork_link *l)
{
    assert(l->req_free == l->req_head);
    /* the pages come back as zeroes at the next touch; the positions
     * go on */
    if (fallocate(l->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  TM_RING_ANS_OFF, TM_RING_ANS_CAP + TM_RING_REQ_CAP) != 0) {
        /* the pages stay: no harm */
    }
}
