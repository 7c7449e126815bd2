/* amqp.h - private declarations of the RabbitMQ adapter (src/amqp/).
 *
 * The files form a one-way stack: each calls only files listed above it
 * (no call or include cycle among them; scripts/check-layers.py).
 *   rmq_dl.c    rabbitmq-c, opened at run time (the sym_ pointers)
 *   nodes.c     the cluster's nodes: where a new connection goes
 *   props.c     properties, header tables, ids
 *   conn.c      connections, channels, errors
 *   topology.c  declarations: task, retry, delay and pause queues
 *   confirm.c   the one loop that waits for publisher confirms
 *   link.c      a consuming connection: socket, frames, channels
 *   acks.c      a task channel's ack floor, acks held back
 *   delivery.c  deliveries assembled from a task channel's frames
 *   pause.c     the pause state: control queues, notices
 *   intake.c    owner of the links: consumers, the lanes
 *   copies.c    the messages a settlement publishes
 *   publish.c   the publishing connection, records until confirmed
 *   delay.c     delay levels; parked deliveries into delay copies
 *   settle.c    settlement, the settle thread's upkeep (tick)
 *   admin.c     the CLI's connection: publish, request
 *   dlq.c       dead letters: list, browse, replay, purge
 *   delayed.c   delayed messages for operators: list, run now, delete
 *   depth.c     queue depths
 *   schedule.c  schedules: the leader's election, fires
 *   adapter.c   the vtable, create and destroy
 * A lower layer reports to its owner through callbacks given at init:
 *   struct tm_amqp_link_cbs (link.c -> intake.c): cb_frame (to
 *     delivery.c), cb_opened (to pause.c), cb_reset (intake.c);
 *   tm_amqp_publisher.cb_copied (publish.c -> settle.c): a record whose
 *     copies are confirmed, its original to be acknowledged.
 * tm_amqp_confirm_wait takes its caller's own cb_frame and cb_step (a
 * visitor: the caller is the higher layer, no call edge is hidden).
 */
#ifndef TASKMILL_AMQP_H
#define TASKMILL_AMQP_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h> /* struct timeval: rabbitmq-c timeouts */

/* rabbitmq-c's headers, and its functions as sym_ pointers: it is opened
 * the first time a configuration names a RabbitMQ broker */
#include "amqp/rmq_dl_private.h"

#include "broker/broker.h"

/* TM_AMQP_SRC prefixes the adapter's log lines. */
#define TM_AMQP_SRC "broker:amqp"

/* TCP connect timeout, and the timeout of the login handshake and of
 * every synchronous AMQP method (declare, qos, consume, get). */
#define TM_AMQP_CONNECT_TIMEOUT_MS 5000

#define TM_AMQP_RPC_TIMEOUT_MS 5000

#define TM_AMQP_FRAME_MAX 131072

/* How long a publisher confirm may take before the connection is
 * considered broken (the settle thread waits for it: it must stay well
 * under the daemon's 10 s liveness limit). */
#define TM_AMQP_CONFIRM_TIMEOUT_MS 5000

/* A copy the broker refused (basic.nack) or could not route is held,
 * its original unacknowledged, and sent again after this wait, doubled
 * at each refusal of it up to the largest (ms). */
#define TM_AMQP_REFUSED_MIN_MS 1000
#define TM_AMQP_REFUSED_MAX_MS 30000

/* Frames read per pump, so that a busy socket cannot starve the rest. */
#define TM_AMQP_PUMP_MAX 4096

/* While deliveries come in batches of TM_AMQP_LOWAT_ON or more, the
 * consuming socket wakes intake only once TM_AMQP_LOWAT_BYTES wait in it
 * (SO_RCVLOWAT), or after TM_AMQP_LOWAT_WAIT_MS: fewer and larger
 * batches, so fewer wake-ups of intake, the pool and the settle thread,
 * and fewer acks, for at most that wait. A batch under TM_AMQP_LOWAT_OFF
 * (the stream thins out), or a read that finds nothing, turns it off: a
 * light load never waits. Only with a prefetch of TM_AMQP_LOWAT_PREFETCH
 * or more: the mark is then a small part of what the window lets the
 * broker send (about 64 small messages of at least 256), so the window
 * never stops the stream short of it. */
#define TM_AMQP_LOWAT_BYTES 16384
#define TM_AMQP_LOWAT_WAIT_MS 1
#define TM_AMQP_LOWAT_ON 32
#define TM_AMQP_LOWAT_OFF 8
#define TM_AMQP_LOWAT_PREFETCH 256

/* The dead-letter exchange shared by every task: direct, durable; each
 * task queue routes to it with its dead-letter queue's name as the key. */
#define TM_AMQP_DLX "taskmill.dlx"

/* The system CA bundle (Debian), used to verify amqps:// peers unless
 * broker.tls.ca_file names another file. */
#define TM_AMQP_CACERT_DEFAULT "/etc/ssl/certs/ca-certificates.crt"

/* AMQP short strings (names, ids) hold at most 255 bytes. */
#define TM_AMQP_SHORTSTR_MAX 255

/* The x-error header carries at most this much of the failure text. */
#define TM_AMQP_ERROR_HEADER_MAX 4096

/* Channels of a consuming connection (struct tm_amqp_link): the
 * synchronous declarations on one, and one per task of the link for its
 * consumer, acks, nacks and rejects. It never publishes, so a broker that
 * blocks publishers (memory or disk alarm) never blocks its acks. */
enum {
    TM_AMQP_CH_ADMIN = 1, /* synchronous declarations */
    TM_AMQP_CH_TASK0 = 2  /* the link's task k consumes on channel 2 + k */
};

/* Tasks that share one consuming connection: 500 tasks consume on two
 * connections, each with a channel per task (RabbitMQ allows 2047 channels
 * a connection by default). */
#define TM_AMQP_LINK_TASKS 256

/* A task whose channel failed (the broker closed it, or cancelled its
 * consumer) opens it again after this wait, doubled at each failure in a
 * row up to the largest (ms); the other tasks of its connection go on. */
#define TM_AMQP_REOPEN_MIN_MS 1000
#define TM_AMQP_REOPEN_MAX_MS 30000

/* Channels of the publishing connection. Replies have their own channel:
 * a reply to a requester that is gone may close it (direct reply-to),
 * which must not disturb dead-lettering. */
enum {
    TM_AMQP_PCH_COPY = 1,  /* confirm mode: dead letters, retries */
    TM_AMQP_PCH_ADMIN = 2, /* retry queue declarations */
    TM_AMQP_PCH_REPLY = 3  /* confirm mode: request/reply answers */
};

/* Channels of the CLI connection. */
enum { TM_AMQP_CLI_PUB = 1, TM_AMQP_CLI_GET = 2 };

/* Confirm states of one publish. */
enum {
    TM_AMQP_WAITING = 0, /* not sent yet, or sent and not confirmed */
    TM_AMQP_ACKED = 1,
    TM_AMQP_NACKED = 2,
    TM_AMQP_LOST = 3 /* its channel closed: it will never be confirmed */
};

/*
 * struct tm_amqp_delivery is one message read from a task queue, copied
 * out of rabbitmq-c's frame buffers: ids, properties taskmill republishes,
 * the user headers (in its own pool) and the NUL-terminated body. It
 * belongs to the tm_msg (bctx) until settle() takes it into a record.
 * An oversized delivery (body_len > the task's max_payload) has no body
 * storage: its body frames are counted and dropped as they arrive.
 */
struct tm_amqp_delivery {
    struct tm_amqp_delivery *next; /* ready list */
    uint64_t tag;                  /* delivery tag on its task's channel */
    uint64_t gen;                  /* connection it came on */
    unsigned attempt;              /* this run: runs before it + 1 */
    int has_priority;
    uint8_t priority;
    int oversized;                 /* body not kept: body is NULL */
    char *id;                      /* message_id, or one assigned */
    char *reply_to;                /* NULL when absent */
    char *correlation_id;          /* NULL when absent */
    char *content_type;            /* NULL when absent */
    amqp_table_t headers;          /* as received; empty when none */
    amqp_pool_t pool;              /* holds headers when has_pool */
    int has_pool;
    size_t body_len;
    size_t body_got;
    char *body;                    /* body_len + 1 bytes */
    atomic_uint extra_owners;      /* owners besides the first: a settlement
                                      record and the batch of a held message
                                      (struct tm_msg.held) each free it, the
                                      last one for real */
    char mem[];                    /* storage of the strings and the body */
};

/*
 * struct tm_amqp_rec is one settlement handed over by settle(): what to do
 * with a delivery. Plain acks carry only the tag and go straight to the
 * consume channel; the rest own the delivery and texts, and wait in the
 * publisher until their copies (dead letter or retry, and reply) are
 * confirmed: only then is the original acknowledged.
 */
struct tm_amqp_rec {
    enum tm_settle settle;
    enum tm_outcome outcome;
    size_t task;               /* index in ab->tasks */
    uint64_t tag;
    uint64_t gen;              /* task connection the delivery came on */
    unsigned attempt;
    int64_t delay_ms;
    int64_t failed_at;         /* epoch ms */
    char *error;               /* owned, or NULL */
    char *result;              /* owned, or NULL */
    size_t result_len;
    struct tm_amqp_delivery *d; /* owned, or NULL for a plain ack */
    /* publishing state, on the publisher's current connection */
    const char *rk;            /* queue the copy goes to */
    uint64_t seq;              /* confirm sequence on PCH_COPY, 0 unsent */
    uint64_t rseq;             /* confirm sequence on PCH_REPLY, 0 unsent */
    unsigned char cst, rst;    /* confirm states of the copy, the reply */
    int returned;              /* the broker could not route the copy */
    unsigned refusals;         /* times the copy was refused or returned */
    int redeclare;             /* a dead-letter copy came back unroutable:
                                  the task's topology is declared again
                                  before it is sent again */
    int64_t hold_until;        /* monotonic ms: a refused copy is not sent
                                  again before (0: not held) */
    int park;                  /* a delay copy (delay.c): settle is
                                  TM_SETTLE_RETRY, rk a delay queue,
                                  delay_ms its level */
    char copy_id[40];          /* message id of the dead-letter copy */
};

struct tm_amqp_recvec {
    struct tm_amqp_rec *v;
    size_t n, cap;
};

/* struct tm_amqp_pub numbers the publishes of one confirm-mode channel;
 * the broker confirms them by these numbers, from 1. */
struct tm_amqp_pub {
    amqp_channel_t ch;
    int open;
    uint64_t next_seq;
};

/*
 * struct tm_amqp_acks keeps the multiple-ack floor of the consume channel:
 * every delivery tag <= floor is settled (acked, nacked or rejected);
 * above holds the settled tags beyond it, sorted. One basic.ack with
 * multiple=1 then covers a run of in-order completions.
 */
struct tm_amqp_acks {
    uint64_t floor;
    uint64_t *above;
    size_t n, cap;
    /* acks decided and not sent yet (any order): they go out together,
     * one basic.ack with multiple=1 for those under the floor and one
     * each for the rest, once TM_AMQP_ACK_HOLD_MS passed since held_since
     * (monotonic ms, when the first of them was decided), or once a
     * quarter of the prefetch window waits (tm_amqp_acks_flush); only
     * while the stream is busy (ack_due, tm_amqp_settle_tags) */
    uint64_t *held;
    size_t nheld, capheld;
    int64_t held_since;
    int64_t settled_ms; /* monotonic ms of the last settlement */
};

/* tm_amqp_acks_unacked is how many of the deliveries tagged 1 .. dlv_tag
 * the broker still counts unacknowledged: those not settled yet, and
 * those settled whose ack is held back (every held tag is settled too:
 * at or under the floor, or in above). */
static inline uint64_t tm_amqp_acks_unacked(const struct tm_amqp_acks *k,
                                            uint64_t dlv_tag)
{
    assert(k->floor + k->n <= dlv_tag && k->nheld <= k->floor + k->n);
    return dlv_tag - k->floor - k->n + k->nheld;
}

/* How long a decided ack may wait for others to go out with it. A few
 * milliseconds of a busy stream make one basic.ack (multiple=1) out of
 * hundreds of deliveries, which saves the broker's CPU as much as ours;
 * the prefetch window loses at most a quarter of its room meanwhile. */
#define TM_AMQP_ACK_HOLD_MS 2

/* struct tm_amqp_level is a retry queue declared on the publisher's
 * current connection. declared_at (monotonic ms) is its last
 * declaration, which restarts its x-expires clock (see topology.c). */
struct tm_amqp_level {
    char *name;
    int64_t declared_at;
};

/* declared_at of a level a copy could not be routed to (the queue was
 * deleted): it is declared again on its next use, retry queue or delay
 * queue alike (now - TM_AMQP_LEVEL_STALE exceeds every redeclaration
 * interval without overflowing). */
#define TM_AMQP_LEVEL_STALE (INT64_MIN / 2)

/* A retry queue of delay D expires after TM_AMQP_RETRY_EXPIRES(D) ms
 * unused, and is declared again (which counts as a use) before each
 * publish once TM_AMQP_RETRY_REDECLARE(D) ms passed since the last
 * declaration. So a queue lives at least EXPIRES - REDECLARE = 3 D + 7.5
 * min after the last publish to it, more than its messages wait (D plus
 * at most 20% jitter). */
#define TM_AMQP_RETRY_EXPIRES(d) (4 * (d) + 600000)
#define TM_AMQP_RETRY_REDECLARE(d) (TM_AMQP_RETRY_EXPIRES(d) / 4)

struct tm_amqp_broker;

/*
 * struct tm_amqp_publisher is the publishing connection of one broker
 * node: every retry, dead-letter and reply copy of the daemon goes out on
 * it with publisher confirms, never on a consuming connection. Used by the
 * settle thread only (settle(), tick(), and destroy() after the threads
 * stopped), so it needs no lock.
 *
 * A broker short of memory or disk blocks connections that publish
 * (connection.blocked): then nothing is sent, no confirm is timed out,
 * and the records stay in out, their originals unacknowledged (the
 * prefetch window bounds how many), until connection.unblocked.
 */
struct tm_amqp_publisher {
    struct tm_amqp_broker *ab;
    /* its owner's (settle.c): takes each record whose copies are all
     * confirmed (or that publishes none), for its original to be
     * acknowledged */
    void (*cb_copied)(void *arg, struct tm_amqp_rec *r);
    void *cb_arg;
    const struct tm_url *node;    /* the node it publishes to, while up */
    amqp_connection_state_t conn; /* NULL while down */
    uint64_t gen;                 /* connection generation, from 1 */
    int blocked;                  /* connection.blocked in force */
    int was_up;                   /* its loss is worth a warning */
    int64_t retry_at;             /* monotonic ms: next connect attempt */
    int64_t backoff_ms;
    struct tm_amqp_pub copies;    /* TM_AMQP_PCH_COPY */
    struct tm_amqp_pub replies;   /* TM_AMQP_PCH_REPLY */
    struct tm_amqp_recvec out;    /* records waiting for their copies */
    struct tm_amqp_level *levels; /* retry queues declared */
    size_t nlevels, caplevels;
    /* a returned message being skipped (basic.return, header, body) */
    int ret_state;                /* 0 none, 1 header next, 2 body */
    amqp_channel_t ret_ch;
    uint64_t ret_left;
    char ret_rk[TM_AMQP_SHORTSTR_MAX + 1];
    char ret_text[128];
    char errstr[512];
    struct tm_log_repeat err_seen; /* the last connect failure logged */
};

/*
 * struct tm_amqp_link is one consuming connection, shared by up to
 * TM_AMQP_LINK_TASKS tasks, each on a channel of its own (its consumer,
 * its prefetch window, its acks). Its lane's intake thread reads it
 * (fetch_lane: one thread for all its tasks), the settle thread acks on
 * it, the main thread connects and wakes. io_mu is held by whichever
 * thread does I/O on the connection, briefly: intake holds it while it
 * reads, not while it connects or waits in poll. It guards everything
 * below it here, and the channel state of each task of the link (struct
 * tm_amqp_task from conn on).
 *
 * Frames of every channel come on one socket: the reader hands each to
 * its task (the channel number is the task's place in the link), so a
 * busy task cannot hold up another's deliveries beyond what its own
 * prefetch window lets the broker send.
 */
struct tm_amqp_link_cbs;

struct tm_amqp_link {
    struct tm_amqp_broker *ab;
    const struct tm_amqp_link_cbs *cbs; /* its owner's (intake.c) */
    size_t index;                 /* the lane */
    struct tm_amqp_task **tasks;  /* task k on channel TM_AMQP_CH_TASK0 + k */
    size_t ntasks;
    int efd;                      /* eventfd: deliveries ready, or wake */
    atomic_int poked;             /* room_made since intake last looked */

    pthread_mutex_t io_mu;
    amqp_connection_state_t conn; /* NULL while down */
    const struct tm_url *node;    /* where conn goes, while up */
    int was_up;                   /* its loss is worth a warning */
    int polling;                  /* intake waits in poll (without io_mu) */
    int lowat;                    /* SO_RCVLOWAT is set on conn's socket */
    unsigned seen_wake;           /* intake: wake_seq last noticed */
    size_t fresh;                 /* deliveries made ready by this pump */
    int announce;                 /* connected since intake last returned */
    char errstr[512];
    struct tm_log_repeat err_seen; /* the last connect failure logged */
};

/*
 * struct tm_amqp_task is one task's channel on its link and what hangs on
 * it. Everything from conn on is guarded by the link's io_mu (io_mu
 * points at it).
 */
struct tm_amqp_task {
    struct tm_amqp_broker *ab;
    const struct tm_cfg_task *cfg;
    size_t index;
    struct tm_amqp_link *link;
    amqp_channel_t ch;            /* its channel on the link */
    pthread_mutex_t *io_mu;       /* &link->io_mu */

    amqp_connection_state_t conn; /* the link's connection while this
                                     task's channel is open on it, NULL
                                     otherwise */
    uint64_t gen;                 /* channel generation: a delivery of an
                                     earlier one is settled nowhere */
    int was_up;                   /* its loss is worth a warning */
    int counted_down;             /* counted in ab->ndown */
    int stopped;                  /* consumer cancelled after wake() */
    int close_due;                /* the channel is open but failed (its
                                     consumer was cancelled by the broker):
                                     intake closes it before reopening */
    int64_t reopen_at;            /* monotonic ms: next open of a failed
                                     channel on a live link (0: at once) */
    int64_t reopen_ms;            /* the wait before that, doubled */
    char consumer_tag[TM_AMQP_SHORTSTR_MAX + 1];
    char salt[17];                /* for ids assigned on this channel */
    struct tm_amqp_acks acks;
    /* a delivery being received: deliver, then header, then body frames */
    int dlv_state;                /* 0 none, 1 header next, 2 body */
    uint64_t dlv_tag;
    struct tm_amqp_delivery *partial;
    struct tm_amqp_delivery *ready, *ready_tail;
    size_t nready;
    atomic_int paused;            /* the pause state last read (any
                                     thread; pause.c) */
    int pause_held;               /* no consumer: cancelled for a pause */
    /* deliveries whose x-not-before lies ahead, for the settle thread
     * to park in the delay queues (delay.c) */
    struct tm_amqp_delivery *park, *park_tail;
    /* park is not empty; written under io_mu, read without it by the
     * settle thread, which takes io_mu only when there is a park to take */
    atomic_int parked;
    uint64_t *tags;               /* settle scratch: acks */
    size_t tagcap;
    char errstr[512];
    struct tm_log_repeat err_seen; /* the last open failure logged */
};

struct tm_amqp_broker {
    struct tm_broker base;
    struct tm_amqp_task *tasks;
    size_t ntasks;
    struct tm_amqp_link *links;   /* the consuming connections (lanes) */
    size_t nlinks;
    atomic_uint wake_seq;         /* wake() calls */
    atomic_int ndown;             /* tasks without an open channel */
    atomic_int ever_up;
    atomic_ullong gens;
    /* the broker's nodes (borrowed from the configuration), and in
     * base.node the one every new connection goes to (tm_amqp_node):
     * a random one at first, so that daemons spread over a cluster,
     * then the next one after each failure to connect */
    const struct tm_url *nodes;
    size_t nnodes;
    /* the publishing connection (settle thread), to the current node */
    struct tm_amqp_publisher pub;
    struct tm_amqp_recvec done;   /* settle thread: originals to settle */
    /* the CLI connection (publish, request, dlq): one thread */
    amqp_connection_state_t cli;
    uint64_t cli_seq;
    /* the pause state's connection: notices, and the sweep of every
     * task's state once after it opens (settle thread; pause.c) */
    amqp_connection_state_t pause_conn;
    size_t pause_sweep;           /* the sweep's next task; ntasks: done */
    int64_t pause_next_ms;        /* no read before, monotonic (backoff) */
    int64_t pause_backoff_ms;     /* 0, or the wait after failed reads */
    /* the monitoring connection (depth) */
    pthread_mutex_t depth_mu;
    amqp_connection_state_t dconn;
};

/* struct tm_amqp_hdrs builds a header table; entries point at the
 * caller's strings, valid until the publish call returns. */
struct tm_amqp_hdrs {
    amqp_table_entry_t *e;
    int n, cap;
};

#define TM_AMQP_FNV64_INIT 0xcbf29ce484222325ULL

/* ---- conn.c: connections, channels, errors ---- */
const char *tm_amqp_strerror(amqp_rpc_reply_t r, char *buf, size_t size);
int tm_amqp_reply_code(amqp_rpc_reply_t r);
int tm_amqp_channel_error(amqp_rpc_reply_t r);
int tm_amqp_channel_closed_ok(amqp_connection_state_t c, amqp_channel_t ch);
struct timeval tm_amqp_tv_ms(int64_t ms);
amqp_connection_state_t tm_amqp_open(struct tm_amqp_broker *ab,
                                     const char *role, int heartbeat,
                                     const struct tm_url **node, char *buf,
                                     size_t size);
int tm_amqp_channel(amqp_connection_state_t c, amqp_channel_t ch,
                    int confirm, char *buf, size_t size);
void tm_amqp_close(amqp_connection_state_t c);
void tm_amqp_drop(amqp_connection_state_t c);

/* ---- confirm.c: waiting for publisher confirms ---- */
/* struct tm_amqp_confirm is one publish waited for on a confirm channel:
 * its confirm number there (0: none awaited) and what the broker said. */
struct tm_amqp_confirm {
    amqp_channel_t ch;
    uint64_t seq;
    int state; /* TM_AMQP_WAITING, TM_AMQP_ACKED, TM_AMQP_NACKED */
};
/* tm_amqp_confirm_covers says whether a basic.ack or basic.nack of tag
 * (multiple: every number up to it) answers publish number seq (0: none,
 * never answered). */
int tm_amqp_confirm_covers(uint64_t seq, uint64_t tag, int multiple);
/* tm_amqp_confirm_note applies frame f to w when it is w's confirm. */
void tm_amqp_confirm_note(struct tm_amqp_confirm *w, const amqp_frame_t *f);
/* tm_amqp_closed_why says whether f is a channel.close or
 * connection.close from the broker, and writes its reason to buf. */
int tm_amqp_closed_why(const amqp_frame_t *f, char *buf, size_t size);
/* tm_amqp_confirm_wait is the one loop that waits for confirms on c: it
 * hands every frame that arrived to cb_frame (0, or -1: the wait fails,
 * the reason written by cb_frame), then asks cb_step whether the wait is
 * over (1), goes on (0) or failed (-1, its reason written by it), and
 * otherwise waits for the socket (at most 1 s at a time) until deadline
 * (monotonic ms). Both callbacks are the caller's own, given arg.
 * Returns 0 once cb_step said 1, 1 when the deadline passed first, -1 on
 * failure (a failed read: its reason in buf). */
int tm_amqp_confirm_wait(amqp_connection_state_t c, int64_t deadline,
                         int (*cb_frame)(void *arg, const amqp_frame_t *f),
                         int (*cb_step)(void *arg), void *arg, char *buf,
                         size_t size);

/* ---- nodes.c: the cluster's nodes ---- */
size_t tm_amqp_node(const struct tm_amqp_broker *ab);
void tm_amqp_node_failed(struct tm_amqp_broker *ab, size_t i,
                         const char *why);
/* the heartbeat (broker.amqp.heartbeat, default 30 s) of the consuming
 * and publishing connections: rabbitmq-c sends one when nothing else was
 * sent for this long; RabbitMQ drops a connection silent for two
 * intervals, and so do the pumps, so a dead node is noticed without
 * waiting for TCP */
int tm_amqp_heartbeat_s(const struct tm_amqp_broker *ab);

/* ---- topology.c: declarations ---- */
int tm_amqp_declare(amqp_connection_state_t c, amqp_channel_t ch,
                    const struct tm_amqp_broker *ab,
                    const struct tm_cfg_task *t, char *buf, size_t size,
                    int *perm);
const char *tm_amqp_retry_queue(struct tm_amqp_publisher *pc,
                                const struct tm_cfg_task *t, int64_t ms,
                                char *buf, size_t size, int *dead);
const char *tm_amqp_delay_queue(struct tm_amqp_publisher *pc,
                                const struct tm_cfg_task *t, int64_t ms,
                                char *buf, size_t size, int *dead);
/* tm_amqp_delay_name writes the name of t's delay queue of level ms
 * (size at least TM_AMQP_SHORTSTR_MAX + 64), as tm_amqp_delay_queue
 * names it, without declaring it. */
void tm_amqp_delay_name(const struct tm_cfg_task *t, int64_t ms, char *buf,
                        size_t size);
int tm_amqp_pause_queue(const struct tm_cfg_task *t, char *buf,
                        size_t size);
int tm_amqp_pause_declare(amqp_connection_state_t c, amqp_channel_t ch,
                          const struct tm_amqp_broker *ab,
                          const struct tm_cfg_task *t, char *buf,
                          size_t size);

/* ---- props.c: properties, header tables, ids ---- */
amqp_bytes_t tm_amqp_bytes_of(const char *s);
char *tm_amqp_bytes_dup(amqp_bytes_t b);
uint64_t tm_amqp_fnv64(const void *p, size_t n, uint64_t h);
const amqp_field_value_t *tm_amqp_table_get(const amqp_table_t *t,
                                            const char *key);
int tm_amqp_field_int(const amqp_field_value_t *v, long long *out);
char *tm_amqp_field_str(const amqp_field_value_t *v);
void tm_amqp_hdr_str(struct tm_amqp_hdrs *h, const char *key,
                     const char *val, size_t max);
void tm_amqp_hdr_i64(struct tm_amqp_hdrs *h, const char *key, int64_t v);
void tm_amqp_hdr_user(struct tm_amqp_hdrs *h, const amqp_table_t *src);
amqp_table_t tm_amqp_hdr_table(const struct tm_amqp_hdrs *h);
void tm_amqp_base_props(amqp_basic_properties_t *p,
                        const struct tm_amqp_delivery *d);
void tm_amqp_new_message_props(amqp_basic_properties_t *p,
                               const struct tm_cfg_task *t, int priority,
                               const char *id);

/* ---- link.c: the consuming connections, shared by tasks ---- */
/* struct tm_amqp_link_cbs is what a link reports to its owner (intake.c
 * gives it, tm_amqp_intake_init), each call with io_mu held:
 * cb_frame(at, f) a frame of task at's channel (0; 1 when the channel
 * went down; -1 when the connection failed, reason in at->errstr);
 * cb_opened(at, paused) task at's channel opened, with the pause state
 * read as it opened (its consumer started only when not paused);
 * cb_reset(at) task at's channel is gone, and with it every delivery
 * tag it numbered. */
struct tm_amqp_link_cbs {
    int (*cb_frame)(struct tm_amqp_task *at, const amqp_frame_t *f);
    void (*cb_opened)(struct tm_amqp_task *at, int paused);
    void (*cb_reset)(struct tm_amqp_task *at);
};
/* tm_amqp_links_init spreads ab's tasks over ceil(ntasks /
 * TM_AMQP_LINK_TASKS) links reporting to cbs (kept); -1 when an eventfd
 * cannot be made. */
int tm_amqp_links_init(struct tm_amqp_broker *ab,
                       const struct tm_amqp_link_cbs *cbs);
/* tm_amqp_link_close closes link l (destroy, after the threads stopped;
 * io_mu held); tm_amqp_links_free frees every link. */
void tm_amqp_link_close(struct tm_amqp_link *l);
void tm_amqp_links_free(struct tm_amqp_broker *ab);
/* tm_amqp_link_connect opens link l's connection and every task's channel
 * on it; io_mu is held on entry and on return, but not while connecting.
 * A task whose channel cannot be opened is left down for intake to open
 * again (its reason in its errstr); -1 when the connection itself cannot
 * be had (reason in l->errstr, *perm set when the broker refused a
 * declaration for good). */
int tm_amqp_link_connect(struct tm_amqp_link *l, int *perm);
/* tm_amqp_task_open opens task at's channel on its live link: channel,
 * topology, pause state, prefetch and consumer (io_mu held). -1 when it
 * failed (reason in at->errstr, *perm set when the broker refused the
 * topology); the link is then lost too when *link_dead is set. */
int tm_amqp_task_open(struct tm_amqp_task *at, int *perm, int *link_dead);
/* tm_amqp_link_lost drops the link's connection after an error in
 * l->errstr: every task of it goes down, RabbitMQ redelivers what was not
 * acknowledged. io_mu held. */
void tm_amqp_link_lost(struct tm_amqp_link *l, const char *what);
/* tm_amqp_conn_lost drops the connection task at's channel is on after
 * an error in at->errstr (a failed write: the socket is gone). */
void tm_amqp_conn_lost(struct tm_amqp_task *at, const char *what);
/* tm_amqp_task_down takes task at's channel down after the broker closed
 * it (closed set: the close was answered) or cancelled its consumer
 * (closed 0: intake closes it): the link goes on, the task opens again
 * after a wait. io_mu held. */
void tm_amqp_task_down(struct tm_amqp_task *at, int closed);
/* tm_amqp_serve does what a holder of io_mu owes the link: read what
 * arrived (heartbeats, deliveries of every task, the broker's notices).
 * -1 when the connection failed (then lost). */
int tm_amqp_serve(struct tm_amqp_link *l, const char *what);
/* tm_amqp_nothing_buffered says whether rabbitmq-c holds no byte and no
 * frame of c read from the socket already. */
int tm_amqp_nothing_buffered(amqp_connection_state_t c);
/* tm_amqp_lowat_set turns the link socket's low-water mark for reads on
 * or off (see TM_AMQP_LOWAT_BYTES); tm_amqp_lowat_off before a
 * synchronous call. io_mu held. */
void tm_amqp_lowat_set(struct tm_amqp_link *l, int on);
void tm_amqp_lowat_off(struct tm_amqp_link *l);
/* tm_amqp_signal_intake wakes the link's intake thread if it waits. */
void tm_amqp_signal_intake(struct tm_amqp_link *l);
/* tm_amqp_start_consumer sets the prefetch and starts task at's consumer
 * (manual acks) on its channel of c; its consumer tag is written to ctag
 * (TM_AMQP_SHORTSTR_MAX + 1 bytes). -1 with the reason in buf. */
int tm_amqp_start_consumer(const struct tm_amqp_task *at,
                           amqp_connection_state_t c, char *ctag, char *buf,
                           size_t size);

/* ---- acks.c: the ack floor of a task's channel ---- */
/* tm_amqp_floor_add records n delivery tags of k as settled. */
void tm_amqp_floor_add(struct tm_amqp_acks *k, const uint64_t *tags,
                       size_t n);
void tm_amqp_settle_tags(struct tm_amqp_task *at, const uint64_t *acks,
                         size_t na, const uint64_t *nacks, size_t nn,
                         int now_all, int *err);
int tm_amqp_acks_flush(struct tm_amqp_task *at, int force, int64_t now);
int64_t tm_amqp_acks_wait_ms(const struct tm_amqp_task *at, int64_t now);

/* ---- delivery.c: deliveries assembled from their frames ---- */
void tm_amqp_delivery_free(struct tm_amqp_delivery *d);
/* tm_amqp_ready_push appends d to the task's ready list (io_mu held);
 * tm_amqp_ready_pop takes its first (NULL: none). */
void tm_amqp_ready_push(struct tm_amqp_task *at, struct tm_amqp_delivery *d);
struct tm_amqp_delivery *tm_amqp_ready_pop(struct tm_amqp_task *at);
/* tm_amqp_task_frame handles one frame of task at's channel: 0, 1 when
 * the task's channel went down (tm_amqp_task_down), -1 when the
 * connection failed (reason in at->errstr). io_mu held. */
int tm_amqp_task_frame(struct tm_amqp_task *at, const amqp_frame_t *f);
/* tm_amqp_not_before reads header x-not-before (epoch ms: an integer, a
 * float or a string of digits) into *due_ms; -1 when absent or not a
 * time. */
int tm_amqp_not_before(const amqp_table_t *headers, int64_t *due_ms);
/* tm_amqp_park_due says whether d must wait (x-not-before after now_ms),
 * with the ms left in *left_ms. */
int tm_amqp_park_due(const struct tm_amqp_delivery *d, int64_t now_ms,
                     int64_t *left_ms);

/* ---- intake.c: the consumer, the lanes ---- */
/* tm_amqp_intake_init makes the consuming connections (links) with
 * intake's callbacks; tm_amqp_intake_close sends the acks held back and
 * closes them (destroy, after the threads stopped). */
int tm_amqp_intake_init(struct tm_amqp_broker *ab);
void tm_amqp_intake_close(struct tm_amqp_broker *ab);
/* tm_amqp_conn_reset forgets everything tied to the task's channel
 * (which is gone). io_mu held. */
void tm_amqp_conn_reset(struct tm_amqp_task *at);
int tm_amqp_stop_consuming(struct tm_amqp_task *at);
size_t tm_amqp_lanes(struct tm_broker *b);
size_t tm_amqp_lane_of(struct tm_broker *b, size_t ti);
void tm_amqp_room_made(struct tm_broker *b, size_t ti);
int tm_amqp_fetch_lane(struct tm_broker *b, size_t lane, const size_t *room,
                       int timeout_ms, struct tm_batch **out, size_t nout);

/* ---- copies.c: the messages a settlement publishes ---- */
/* tm_amqp_copy_prepare finds (declaring it on first use) the queue of
 * r's retry or delay copy, in r->rk; one that cannot be had makes r a
 * dead letter (its reason in r->error). -1 when the connection failed
 * (pc->errstr). */
int tm_amqp_copy_prepare(struct tm_amqp_publisher *pc, struct tm_amqp_rec *r);
/* tm_amqp_copy_send publishes r's copy (dead letter, delay or retry);
 * tm_amqp_publish_reply the answer to the request r settles. Each returns
 * its confirm number, 0 when the connection failed (pc->errstr). */
uint64_t tm_amqp_copy_send(struct tm_amqp_publisher *pc,
                           struct tm_amqp_rec *r);
uint64_t tm_amqp_publish_reply(struct tm_amqp_publisher *pc,
                               const struct tm_amqp_rec *r);

/* ---- publish.c: the publishing connection, records until confirmed ---- */
void tm_amqp_recvec_push(struct tm_amqp_recvec *rv,
                         const struct tm_amqp_rec *r);
void tm_amqp_recvec_clear(struct tm_amqp_recvec *rv);
/* tm_amqp_publisher_init prepares pc, which reports each record done
 * with to cb_copied(arg, r) (kept; r's contents pass to the callee). */
void tm_amqp_publisher_init(struct tm_amqp_publisher *pc,
                            struct tm_amqp_broker *ab,
                            void (*cb_copied)(void *arg,
                                              struct tm_amqp_rec *r),
                            void *arg);
int tm_amqp_publisher_connect(struct tm_amqp_publisher *pc);
void tm_amqp_publisher_run(struct tm_amqp_publisher *pc, int wait);
void tm_amqp_publisher_close(struct tm_amqp_publisher *pc);

/* ---- delay.c: delayed messages (x-not-before, the delay queues) ---- */
/* tm_amqp_delay_level is the delay queue level (ms) for left_ms to
 * wait: the largest level not above it, the smallest when it is below. */
int64_t tm_amqp_delay_level(int64_t left_ms);
/* tm_amqp_delay_level_at is the kth level (ms), k from 0; -1 past the
 * last. */
int64_t tm_amqp_delay_level_at(int k);
void tm_amqp_park_take(struct tm_amqp_broker *ab);

/* ---- settle.c: settlement ---- */
/* tm_amqp_settle_init prepares the publisher with settle's callback;
 * tm_amqp_settle_close does what settlement is left, then closes the
 * publisher (destroy, after the threads stopped). */
void tm_amqp_settle_init(struct tm_amqp_broker *ab);
void tm_amqp_settle_close(struct tm_amqp_broker *ab);
size_t tm_amqp_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n);
void tm_amqp_tick(struct tm_broker *b);

/* ---- pause.c: the pause state (control queue "<queue>.paused") ---- */
/* The wait after the pause connection's first failure. */
#define TM_AMQP_PAUSE_POLL_MS 1000
/* After failed reads it waits longer each time, up to this. */
#define TM_AMQP_PAUSE_BACKOFF_MAX_MS 30000
/* tm_amqp_pause_connected records the state read as the task's connection
 * opened (the consumer was started only when not paused); io_mu held. */
void tm_amqp_pause_connected(struct tm_amqp_task *at, int paused);
/* tm_amqp_pause_apply cancels the consumer when the task was paused since,
 * or, when it was resumed, sets stopped for the intake to start it again
 * (its next fetch); io_mu held. -1 when the connection failed (reason in
 * errstr). */
int tm_amqp_pause_apply(struct tm_amqp_task *at);
/* tm_amqp_pause_poll reads the pause notices that arrived on its own
 * connection and the state of the tasks they name, or of every task once
 * after that connection opened, and applies it (settle thread, tick). */
void tm_amqp_pause_poll(struct tm_amqp_broker *ab);
int tm_amqp_pause_set(struct tm_broker *b, const struct tm_cfg_task *t,
                      int paused);
int tm_amqp_paused(struct tm_broker *b, size_t ti);
void tm_amqp_pause_note(struct tm_broker *b, size_t ti, int paused);
/* ---- admin.c: the CLI's connection, publish and request ---- */
/* tm_amqp_cli_declare opens the CLI connection when it is not open and
 * declares task t's queues on it; tm_amqp_cli_lost closes it after a
 * failure; tm_amqp_cli_publish publishes on its confirm channel and
 * waits for the confirm (w: NULL, or the caller's wait state). */
struct tm_amqp_cli_wait;
int tm_amqp_cli_declare(struct tm_amqp_broker *ab,
                        const struct tm_cfg_task *t);
void tm_amqp_cli_lost(struct tm_amqp_broker *ab);
int tm_amqp_cli_publish(struct tm_amqp_broker *ab, const char *rk,
                        const amqp_basic_properties_t *props, const char *body,
                        size_t len, struct tm_amqp_cli_wait *w,
                        int64_t deadline);
int tm_amqp_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                    const char *body, size_t len, const struct tm_pub *pub,
                    char *id, size_t idlen);
int tm_amqp_request(struct tm_broker *b, const struct tm_cfg_task *t,
                    const char *body, size_t len, const struct tm_pub *pub,
                    int64_t timeout_ms, char *id, size_t idlen, char **reply,
                    int *task_failed);
int tm_amqp_publish_at(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *body, size_t len, const struct tm_pub *pub,
                       int64_t due_ms, char *id, size_t idlen);
/* ---- dlq.c: dead-letter list, browse, replay, purge ---- */
int tm_amqp_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                     size_t max, struct tm_dlq_entry **out, size_t *n);
int tm_amqp_dlq_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                       const struct tm_dlq_query *q,
                       struct tm_dlq_entry **out, size_t *n, int *more);
long tm_amqp_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *id, const struct tm_dlq_filter *f);
long tm_amqp_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *id, const struct tm_dlq_filter *f);
/* ---- delayed.c: delayed messages for operators ---- */
int tm_amqp_delayed_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                           const struct tm_dlq_query *q,
                           struct tm_delayed_entry **out, size_t *n,
                           int *more);
int tm_amqp_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id, int run_now);
/* ---- depth.c: queue depths for monitoring ---- */
int tm_amqp_depth(struct tm_broker *b, size_t ti, struct tm_broker_depth *out);

/* ---- schedule.c: the election of each schedule's leader, fires ---- */
struct tm_sched_session *tm_amqp_sched_open(struct tm_broker *b, int fire,
                                            char *err, size_t errlen);
int tm_amqp_sched_fire(struct tm_sched_session *ss,
                       const struct tm_cfg_schedule *s, int64_t slot_ms,
                       int64_t *last_ms);
int tm_amqp_sched_last(struct tm_sched_session *ss,
                       const struct tm_cfg_schedule *s, int64_t *slot_ms);
int tm_amqp_sched_serve(struct tm_sched_session *ss, int64_t timeout_ms);
void tm_amqp_sched_close(struct tm_sched_session *ss);

#endif /* TASKMILL_AMQP_H */
