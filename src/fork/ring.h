/* fork/ring.h - the memory a fork pool child shares with the parent. */
#ifndef TASKMILL_FORK_RING_H
#define TASKMILL_FORK_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Each child shares one memfd with the parent (created and sealed by the
 * parent, passed to the child as the first thing on its socket):
 *
 *   [control page][answer area: TM_RING_ANS_CAP][request area: TM_RING_REQ_CAP]
 *
 * Both areas are single-producer single-consumer byte rings of records
 * (struct tm_ring_rec, then len payload bytes, padded to 8). Positions are
 * byte counts that only grow; a record's bytes are at position % cap and
 * never wrap: a record that would cross the end is preceded by a SKIP
 * record filling the rest of the area.
 *
 *   request ring   parent -> child: struct tm_fork_req, id, NUL, invalid
 *                  reason, NUL, body, NUL (kind FRAME), or the same
 *                  without the body (kind FRAME_BULK: the body comes on
 *                  the socket, as a BULK note). The child maps this area
 *                  read-only. The parent knows what is free from the
 *                  answers it got, never from what the child writes.
 *   answer ring    child -> parent: struct tm_fork_resp, error, result
 *                  (FRAME), or the header alone (FRAME_BULK: error and
 *                  result come on the socket as one BULK note). The parent
 *                  publishes how far it has read (ans_tail).
 *
 * A record is published by storing the ring's head (release) after its
 * bytes are written, so a reader never sees part of a record: a child
 * killed while it writes an answer leaves nothing the parent reads.
 *
 * The socket carries notes (struct tm_fork_note) only: HELLO (once, with
 * the memfd attached), WAKE (the peer may be asleep in poll/read: look at
 * the ring), and BULK (data too large for a ring). A side asleep says so
 * in its *_waiting word; the other side stores its head, then (sequential
 * consistency) loads that word and sends a WAKE only when it is set. A
 * child with more requests in its ring sends none for an answer, but for
 * two: the one that empties its ring, and the first one that reaches
 * req_low (a request ring position the parent sets when it adds
 * requests, about halfway through those out), so that a parent asleep
 * refills the ring while the child runs the rest instead of after it
 * went to sleep too. The parent takes the answers before them then (it
 * also looks at the rings every few ms while requests are out). The
 * child clears parent_waiting as it sends a WAKE: one per sleep of the
 * parent.
 *
 * Nothing the child writes is trusted by the parent: heads and records are
 * copied out, then checked (tm_ring_peek, tm_fork_resp_check).
 */

#define TM_RING_PAGE 4096u
#define TM_RING_ANS_CAP (256u * 1024u)
#define TM_RING_REQ_CAP (1024u * 1024u)
#define TM_RING_ANS_OFF TM_RING_PAGE
#define TM_RING_REQ_OFF (TM_RING_ANS_OFF + TM_RING_ANS_CAP)
#define TM_RING_SIZE (TM_RING_REQ_OFF + TM_RING_REQ_CAP)
/* Largest answer kept in the answer ring (record payload); larger ones
 * go on the socket. At most TM_RING_ANSWERS_MAX answers are unread at
 * once (the parent never has more requests out to one child), so the
 * answer ring can never be full: 127 * 2 KiB + one SKIP < 256 KiB. */
#define TM_RING_INLINE_MAX (TM_RING_ANS_CAP / 128u - 8u)
#define TM_RING_ANSWERS_MAX 127u

#define TM_RING_MAGIC 0x544d5247u /* "TMRG" */

/* Each word another process writes sits on a cache line of its own. */
struct tm_ring_ctl {
    uint32_t magic;
    uint32_t ans_cap, req_cap;
    _Alignas(64) _Atomic uint64_t req_head;     /* parent writes */
    _Alignas(64) _Atomic uint32_t child_waiting; /* child writes */
    _Alignas(64) _Atomic uint64_t ans_head;     /* child writes */
    _Alignas(64) _Atomic uint64_t ans_tail;     /* parent writes */
    _Alignas(64) _Atomic uint32_t parent_waiting; /* parent sets, child clears */
    _Alignas(64) _Atomic uint64_t req_low;      /* parent writes */
};
_Static_assert(sizeof(struct tm_ring_ctl) <= TM_RING_PAGE,
               "the control words fit the control page");

enum tm_ring_kind {
    TM_RING_SKIP = 0x50494b53u,       /* "SKIP": up to the area's end */
    TM_RING_FRAME = 0x4d415246u,      /* "FRAM": a whole frame */
    TM_RING_FRAME_BULK = 0x4b4c5542u  /* "BULK": the rest on the socket */
};

struct tm_ring_rec {
    uint32_t len;               /* payload bytes after this header */
    uint32_t kind;              /* enum tm_ring_kind */
};

/* tm_ring_rec_size is the room a record of len payload bytes takes. */
static inline uint64_t tm_ring_rec_size(uint64_t len)
{
    return (sizeof(struct tm_ring_rec) + len + 7u) & ~(uint64_t)7u;
}

/*
 * tm_ring_reserve writes the header of a record of len payload bytes (and
 * a SKIP record before it when it would cross the end) into area (cap
 * bytes) at *head, the consumer being at tail (a position the caller
 * trusts). Returns where the payload goes, with *head past the record
 * (not published: the caller stores it in the ring's head word when its
 * records are written), or NULL when there is no room now.
 */
void *tm_ring_reserve(char *area, uint32_t cap, uint64_t *head,
                      uint64_t tail, uint32_t len, uint32_t kind);

/*
 * tm_ring_peek looks at the record at *tail of area (cap bytes), the
 * producer's head being head (read once by the caller, untrusted). SKIP
 * records are passed (*tail moves). Returns 1 with a copy of the record's
 * header in *rec and its payload at *payload (still in the shared area:
 * copy it before checking it); 0 when there is no record; -1 when head or
 * the record is impossible, with a static reason in *why. The record is
 * consumed by adding tm_ring_rec_size(rec->len) to *tail.
 */
int tm_ring_peek(const char *area, uint32_t cap, uint64_t head,
                 uint64_t *tail, struct tm_ring_rec *rec,
                 const char **payload, const char **why);

/* ---- socket notes ---------------------------------------------------- */

#define TM_FORK_MAGIC_NOTE 0x544d4e54u /* "TMNT" */

enum tm_fork_note_kind {
    TM_NOTE_HELLO = 1,          /* parent -> child, the memfd attached */
    TM_NOTE_WAKE = 2,           /* look at the ring */
    TM_NOTE_BULK = 3            /* len bytes follow */
};

struct tm_fork_note {
    uint32_t magic;
    uint32_t kind;
    uint64_t len;
};

/* tm_ring_create makes a sealed memfd of TM_RING_SIZE bytes (it can
 * neither shrink nor grow, so a mapping of it never faults), maps it
 * read-write into *base and initialises the control page. Returns the
 * memfd, or -1 with errno. */
int tm_ring_create(void **base);

/* tm_ring_send_hello sends the HELLO note with memfd attached on sock.
 * Returns 0 or -1 with errno. */
int tm_ring_send_hello(int sock, int memfd);

/* tm_ring_recv_hello receives the HELLO note on sock (blocking). Returns
 * the memfd passed (close-on-exec), or -1. */
int tm_ring_recv_hello(int sock);

#endif /* TASKMILL_FORK_RING_H */
