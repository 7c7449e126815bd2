/* fork/link_private.h - the parent's side of its conversation with one child. */
#ifndef TASKMILL_FORK_LINK_H
#define TASKMILL_FORK_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "fork/ring.h"
#include "fork/wire.h"

struct tm_msg;

/* Requests out to one child at once, at most (a power of two, above any
 * batch the pool sends: see TM_RING_ANSWERS_MAX). */
#define TM_FORK_LINK_OUT 128u

/*
 * struct tm_fork_link is what the parent holds for one child: the shared
 * rings (fork/ring.h), the socket's buffered input and output, and where
 * each request it sent ends in the request ring. Zeroed, with memfd -1, is
 * closed. Used by one thread (the pool's dispatcher).
 *
 * Invariants: req_free <= req_head, req_head - req_free <= the request
 * area, and the bytes in [req_free, req_head) belong to requests not yet
 * answered (the child may still read them); ans_tail is how far the
 * parent has read the answer ring (also published in ctl->ans_tail).
 */
struct tm_fork_link {
    int memfd;
    void *base;
    struct tm_ring_ctl *ctl;
    char *ans, *req;
    uint64_t req_head;          /* written (published by _publish) */
    uint64_t req_free;          /* ring bytes before this are free */
    uint64_t req_end[TM_FORK_LINK_OUT]; /* of request seq at [seq % OUT] */
    uint64_t ans_tail;
    uint64_t ans_seen;          /* the answer head last looked at */
    /* answers up to this head are taken without a look at the socket:
     * whatever the child wrote on it before publishing them was read, or
     * the socket was found empty after they were published (UINT64_MAX
     * once it closed); ans_tail <= sock_clear */
    uint64_t sock_clear;
    uint64_t armed_head;        /* the answer head tm_fork_link_arm saw */
    int64_t clock_ns;           /* a clock reading taken after an answer
                                 * head was read (tm_fork_link_answer) */
    struct tm_fork_buf w;       /* notes (and bulk bodies) to the child */
    struct tm_fork_buf r;       /* what came on the socket, not yet used */
    struct tm_fork_buf frame;   /* a private copy of the answer checked */
};

/* tm_fork_link_open creates the shared rings of a child just started on
 * socket sock and sends them (HELLO). Returns 0, or -1 with errno. */
int tm_fork_link_open(struct tm_fork_link *l, int sock);

/* tm_fork_link_close unmaps the rings of a child that is gone; the
 * buffers stay for the next child. */
void tm_fork_link_close(struct tm_fork_link *l);

/* tm_fork_link_free releases everything (the link is closed). */
void tm_fork_link_free(struct tm_fork_link *l);

/*
 * tm_fork_link_put writes request seq for m into the request ring (its
 * body into the socket output instead when it cannot fit an empty ring).
 * Returns 0, or -1 when the ring has no room now (answers will free it).
 * Nothing is visible to the child before tm_fork_link_publish.
 */
int tm_fork_link_put(struct tm_fork_link *l, const struct tm_msg *m,
                     uint64_t seq);

/* tm_fork_link_publish makes the requests put so far visible, and queues
 * a WAKE when the child sleeps. low_seq is the request whose answer is to
 * wake the parent should it sleep then (fork/ring.h, req_low): one put
 * and not yet answered. */
void tm_fork_link_publish(struct tm_fork_link *l, uint64_t low_seq);

/* tm_fork_link_answered frees the ring room of request seq, answered
 * (requests are answered in order). */
void tm_fork_link_answered(struct tm_fork_link *l, uint64_t seq);

/* tm_fork_link_flush writes pending output to sock (non-blocking).
 * Returns -1 when the socket failed. */
int tm_fork_link_flush(struct tm_fork_link *l, int sock);

/* tm_fork_link_pending says whether output waits for the socket. */
int tm_fork_link_pending(const struct tm_fork_link *l);

/* tm_fork_link_answers_waiting says whether the child has published an
 * answer the parent has not taken yet (an acquire load: what the child
 * did before publishing it, such as writing on its socket, is visible
 * after a 1). */
int tm_fork_link_answers_waiting(const struct tm_fork_link *l);

/* tm_fork_link_read reads what sock has (non-blocking). Returns 1 when
 * the child closed its end (or the socket failed), else 0. */
int tm_fork_link_read(struct tm_fork_link *l, int sock);

/* tm_fork_link_sock_unread says whether answers the child published may
 * have bytes before them on the socket that were not read yet (the
 * caller then reads it or finds it empty: tm_fork_link_sock_checked). */
int tm_fork_link_sock_unread(const struct tm_fork_link *l);

/* tm_fork_link_sock_checked: sock was found empty (FIONREAD) after head,
 * an answer head loaded (acquire) before the look, was published. */
void tm_fork_link_sock_checked(struct tm_fork_link *l, uint64_t head);

/* tm_fork_link_sock_quiet: a poll that began after tm_fork_link_arm found
 * nothing to read on the socket, so nothing came before the answers that
 * arm saw. */
void tm_fork_link_sock_quiet(struct tm_fork_link *l);

/*
 * tm_fork_link_answer takes the next answer, checked against ex
 * (tm_fork_resp_check): TM_FORK_FRAME with the header in *rs and the error
 * then the result text at *data (private, valid until the next call);
 * TM_FORK_MORE when none is complete yet; TM_FORK_CORRUPT with a static
 * reason in *why. With ex NULL (no request is out) any answer is corrupt.
 * ex->not_after_ns is ignored: the bound is the clock once the answer is
 * seen (an answer can be published after the caller looked at the clock).
 * Answers past sock_clear wait (TM_FORK_MORE) until the socket is read:
 * bytes task code wrote on it before such an answer belong to the message
 * before it, not to the next one.
 */
enum tm_fork_check tm_fork_link_answer(struct tm_fork_link *l,
                                       const struct tm_fork_expect *ex,
                                       struct tm_fork_resp *rs,
                                       const char **data, const char **why);

/* tm_fork_link_arm tells the child that the parent is about to sleep
 * (it then sends a WAKE with its next answer). Returns 1 when an answer
 * came since the last look, so that the parent must not sleep. */
int tm_fork_link_arm(struct tm_fork_link *l);

/* tm_fork_link_disarm: the parent is awake (no WAKE needed). */
void tm_fork_link_disarm(struct tm_fork_link *l);

/* tm_fork_link_trim gives the rings' pages back to the system; only when
 * nothing is out to the child and every answer was read. */
void tm_fork_link_trim(struct tm_fork_link *l);

#endif /* TASKMILL_FORK_LINK_H */
