/* broker.h - the broker interface: one vtable, one file per adapter. */
#ifndef TASKMILL_BROKER_H
#define TASKMILL_BROKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "msg.h"

struct tm_broker;

/* struct tm_dlq_entry is one dead-letter entry, as `dlq list/show` see it.
 * Every string is owned by the entry. */
struct tm_dlq_entry {
    char *id;          /* id in the dead-letter queue */
    char *origin_id;   /* original message id */
    char *task;
    char *error;
    char *body;
    long attempts;
    int64_t failed_at; /* epoch ms */
};

/* struct tm_broker_node is one node of the broker deployment, as
 * /status and taskmill_broker_node_up show it. */
struct tm_broker_node {
    char name[512];    /* its URL, without credentials */
    int up;            /* 1: the daemon uses it and it works */
};

/* Nodes shown at most. */
#define TM_BROKER_NODES_MAX 64

/*
 * struct tm_broker_ops is filled by each adapter (broker_redis.c, ...).
 *
 * Threading contract: fetch(b, i, ...) is called only by the intake thread
 * of task i (fetch_lane(b, l, ...) only by that of lane l); settle() only by the settle thread; both may run at the same
 * time, and the adapter keeps them apart (separate connections, or its own
 * queue). The CLI functions (publish, dlq_*) are used by a process that
 * runs no intake.
 *
 * Errors: functions return 0 (or a count) on success and -1 on failure,
 * with tm_broker_set_error() called to describe it.
 */
struct tm_broker_ops {
    const char *kind; /* "redis", "amqp" */

    /* create allocates the adapter for cfg (borrowed; it outlives the
     * broker). No I/O. */
    struct tm_broker *(*create)(const struct tm_cfg *cfg);

    /* connect opens the connections and prepares every task's queue
     * (consumer group, dead-letter queue). -1 when the broker cannot be
     * reached or refuses; the caller retries with backoff. */
    int (*connect)(struct tm_broker *b);

    /* fetch blocks up to timeout_ms for at most max deliveries of task i.
     * Returns the count (0 on timeout) with *out set to a batch when
     * count > 0; -1 on a connection error (broker marked down; the next
     * call reconnects). */
    int (*fetch)(struct tm_broker *b, size_t task_index, size_t max,
                 int timeout_ms, struct tm_batch **out);

    /* Lanes, optional (NULL: one intake thread per task, using fetch).
     * An adapter with lanes reads the tasks of one lane on one thread:
     * lanes() counts them, lane_of() gives a task's lane, and
     * fetch_lane(b, l, room, ...) blocks up to timeout_ms for deliveries
     * of lane l's tasks, room[i] being how many task i may take (0: none
     * now; indexes are task indexes, all of them, other lanes' ignored).
     * It sets out[0..k) to batches, each of one task (msgs[].task_index),
     * k <= nout, nout being at least the count of tasks, and returns k
     * (0 on timeout or poke) or -1 on a connection error. room_made(b, i)
     * tells it, from the settle thread, that task i has room again after
     * its lane was given 0 for it: a blocked fetch_lane returns soon. */
    size_t (*lanes)(struct tm_broker *b);
    size_t (*lane_of)(struct tm_broker *b, size_t task_index);
    int (*fetch_lane)(struct tm_broker *b, size_t lane, const size_t *room,
                      int timeout_ms, struct tm_batch **out, size_t nout);
    void (*room_made)(struct tm_broker *b, size_t task_index);

    /* settle applies the m->settle (ack, retry, dead-letter) of each of
     * the n messages, batching commands. It may reorder msgs, and returns
     * how many it could not settle for a connection error: those are then
     * msgs[0..k), for the caller to settle again after the reconnect; the
     * rest are done and released by the caller. */
    size_t (*settle)(struct tm_broker *b, struct tm_msg **msgs, size_t n);

    /* wake makes blocked fetch calls return soon (shutdown). */
    void (*wake)(struct tm_broker *b);

    /* tick runs periodic upkeep from the settle thread (never blocked by
     * the pool), about every tick_ms() milliseconds. Both optional. */
    void (*tick)(struct tm_broker *b);
    int64_t (*tick_ms)(struct tm_broker *b);

    /* publish adds one message to the task's queue; the new message id is
     * written to id (size idlen). priority < 0 means the task default. */
    int (*publish)(struct tm_broker *b, const struct tm_cfg_task *t,
                   const char *body, size_t len, int priority,
                   char *id, size_t idlen);

    /* dlq_list returns up to max entries, newest first, in a new array of
     * *n entries (free with tm_dlq_entries_free). */
    int (*dlq_list)(struct tm_broker *b, const struct tm_cfg_task *t,
                    size_t max, struct tm_dlq_entry **out, size_t *n);
    /* dlq_replay moves one entry (id) or all (id NULL) back to the task's
     * queue; dlq_purge deletes one or all. Both return the count moved. */
    long (*dlq_replay)(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *id);
    long (*dlq_purge)(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *id);

    /* destroy closes everything and frees the adapter; NULL accepted. */
    void (*destroy)(struct tm_broker *b);

    /* depth reads, for monitoring, task i's queue depth (messages not yet
     * delivered), pending count (delivered, not acknowledged) and
     * dead-letter depth; each is -1 when the broker cannot tell. It runs
     * on a connection of its own, opened on first use, so it never waits
     * behind intake or settlement, and one caller at a time is served.
     * task_index TM_BROKER_DEPTH_CLOSE closes that connection (returns
     * 0); call it before destroy. Returns 0, or -1 when the broker cannot
     * be reached (b->errstr is left alone: other threads own it).
     * Optional: NULL when the adapter has no such reads. */
    int (*depth)(struct tm_broker *b, size_t task_index, long long *depth,
                 long long *pending, long long *dlq_depth);

    /* request publishes body to the task's queue as a request (reply-to
     * and correlation id; priority < 0 means the task default) and waits
     * up to timeout_ms for its answer. Returns 0 with *reply set to the
     * answer's JSON text (the caller frees it with tm_free) and
     * *task_failed set when the task failed (the answer is then an error
     * object); -1 on failure, with b->err ETIMEDOUT when no answer came
     * in time. The message id is written to id (size idlen) once the
     * request is published. CLI only. Optional: NULL when the broker has
     * no request/reply. */
    int (*request)(struct tm_broker *b, const struct tm_cfg_task *t,
                   const char *body, size_t len, int priority,
                   int64_t timeout_ms, char *id, size_t idlen, char **reply,
                   int *task_failed);

    /* nodes fills out[0..k) with the nodes the adapter knows (k <= max;
     * e.g. a cluster's masters, found at run time) and returns k.
     * Optional: NULL when the nodes are broker.url's list and the one
     * connected to is b->node. Any thread. */
    size_t (*nodes)(struct tm_broker *b, struct tm_broker_node *out,
                    size_t max);
};

/* TM_BROKER_DEPTH_CLOSE, as depth()'s task_index, closes its connection. */
#define TM_BROKER_DEPTH_CLOSE ((size_t)-1)

/* struct tm_broker is the common head of every adapter's state. */
struct tm_broker {
    const struct tm_broker_ops *ops;
    const struct tm_cfg *cfg;
    atomic_int up;                  /* 1 while connected */
    atomic_ulong reconnects;        /* successful reconnects after a loss */
    atomic_int node;                /* index in cfg->nodes of the node the
                                       connections go to (0 by default) */
    int resumed;                    /* set before intake starts when this
                                       broker takes over from an earlier
                                       one of the same process (reload):
                                       its pending entries are in flight
                                       there, not to be read again */
    int err;                        /* 0, or an errno-like code */
    char errstr[1024];
};

/* tm_broker_ops_for returns the adapter for a URL kind, or NULL when this
 * build has none. */
const struct tm_broker_ops *tm_broker_ops_for(enum tm_broker_kind kind);

/* tm_broker_new creates the adapter for cfg->url; NULL with a message in
 * err when the kind is not built in. */
struct tm_broker *tm_broker_new(const struct tm_cfg *cfg, char *err,
                                size_t errlen);

/* tm_broker_set_error records the last error in b->err / b->errstr. */
void tm_broker_set_error(struct tm_broker *b, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void tm_dlq_entries_free(struct tm_dlq_entry *e, size_t n);

/* tm_broker_nodes fills out[0..k) with the nodes of cfg's broker (b may
 * be NULL: none connected) and their state, and returns k: the adapter's
 * nodes op, or else broker.url's list with b->node up while connected. */
size_t tm_broker_nodes(const struct tm_cfg *cfg, struct tm_broker *b,
                       struct tm_broker_node *out, size_t max);

extern const struct tm_broker_ops tm_broker_redis_ops;
extern const struct tm_broker_ops tm_broker_amqp_ops;

#endif /* TASKMILL_BROKER_H */
