/* fork/wire.h - the frames between the fork pool's parent and children. */
#ifndef TASKMILL_FORK_WIRE_H
#define TASKMILL_FORK_WIRE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The frames a child and the parent exchange, through their shared rings
 * (fork/ring.h; the socketpair carries wake-ups, data too large for a
 * ring, and the child's death):
 *
 *   parent -> child   struct tm_fork_req, then id, invalid reason, body
 *   child -> parent   struct tm_fork_resp, then error, result bytes
 *
 * Every request carries a sequence number, unique among the requests the
 * parent sent that child; a reply repeats the sequence number and task
 * index of the request it answers. A child answers in the order it was
 * sent. The parent trusts nothing in a reply: task code runs in the child
 * and may have overwritten any of its memory (tm_fork_resp_check).
 */

#define TM_FORK_MAGIC_REQ 0x544d5251u  /* "TMRQ" */
#define TM_FORK_MAGIC_RESP 0x544d5253u /* "TMRS" */
/* Longest error text a reply may carry (a task's error is one line). */
#define TM_FORK_ERROR_MAX (64u * 1024u)
/* Longest result a reply may carry: far above any sane JSON result, far
 * below what would exhaust the parent's memory. */
#define TM_FORK_RESULT_MAX ((uint64_t)64 * 1024 * 1024)

struct tm_fork_req {
    uint32_t magic;
    uint32_t task_index;
    uint32_t attempt;
    uint32_t id_len;
    uint32_t invalid_len;
    uint32_t has_body;
    uint64_t body_len;
    uint64_t seq;
    /* the run's trace context (tm_traceparent), NUL-terminated; "" for
     * none */
    char traceparent[56];
};

struct tm_fork_resp {
    uint32_t magic;
    uint32_t outcome;           /* enum tm_outcome, never TM_OUT_NONE */
    uint32_t error_len;
    uint32_t task_index;        /* the request's */
    uint64_t result_len;
    uint64_t seq;               /* the request's */
    int64_t t_start_ns;         /* CLOCK_MONOTONIC, as the parent's */
    int64_t t_end_ns;
};

/* struct tm_fork_expect is what the parent knows of the reply it waits
 * for: the oldest request it sent the child, and the times the reply's
 * run must lie within. */
struct tm_fork_expect {
    uint64_t seq;
    uint32_t task_index;
    int64_t not_before_ns;      /* the run cannot start before this */
    int64_t not_after_ns;       /* nor end after this (now) */
};

enum tm_fork_check {
    TM_FORK_CORRUPT = -1,       /* the frame is wrong: see *why */
    TM_FORK_MORE = 0,           /* a frame is not complete yet */
    TM_FORK_FRAME = 1           /* a whole, valid frame */
};

/*
 * tm_fork_resp_check validates the reply frame at the start of buf[0..len)
 * against ex: magic, sequence number and task index of the expected
 * request, an outcome that exists, lengths within their limits, times
 * within the run's window, error and result text free of NUL bytes and
 * valid UTF-8. Returns TM_FORK_FRAME with the header in *out and the
 * frame's size in *frame_len; TM_FORK_MORE when buf ends before the frame
 * does (what is there is valid so far); TM_FORK_CORRUPT with a static
 * reason in *why. Reads nothing past buf + len.
 */
enum tm_fork_check tm_fork_resp_check(const char *buf, size_t len,
                                      const struct tm_fork_expect *ex,
                                      struct tm_fork_resp *out,
                                      size_t *frame_len, const char **why);

/* struct tm_fork_buf is a growable byte buffer; off is where reading
 * resumes. Zeroed is empty. */
struct tm_fork_buf {
    char *p;
    size_t len, off, cap;
};

/* tm_fork_buf_put appends n bytes of data to b. */
void tm_fork_buf_put(struct tm_fork_buf *b, const void *data, size_t n);

#endif /* TASKMILL_FORK_WIRE_H */
