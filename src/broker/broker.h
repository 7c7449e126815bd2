/* broker.h - the broker interface: one table per role, one folder per
 * adapter. */
#ifndef TASKMILL_BROKER_H
#define TASKMILL_BROKER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "task/history.h"
#include "task/msg.h"

struct tm_broker;
struct tm_sched_session;

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
    size_t body_len;   /* the stored body's length: more than the bytes of
                          body when truncated (dlq_browse only) */
    int truncated;     /* dlq_browse cut body or error to body_max */
};

/*
 * struct tm_dlq_filter narrows a task's dead letters to those that match
 * all of its parts (docs/delivery.md, Searching dead letters): text a
 * substring of the entry's error or of its body, byte for byte (case
 * matters, no patterns), and failed_at within [since, until], both
 * inclusive. A NULL filter, or one with no part set, matches every
 * entry.
 */
struct tm_dlq_filter {
    const char *text;   /* NULL or "": any text */
    int64_t since;      /* INT64_MIN: no lower bound (epoch ms) */
    int64_t until;      /* INT64_MAX: no upper bound (epoch ms) */
};

/* TM_DLQ_FILTER_ALL is the filter with no part set. */
#define TM_DLQ_FILTER_ALL {.text = NULL, .since = INT64_MIN, .until = INT64_MAX}

/* tm_dlq_filter_set says whether f has any part set (0 for NULL). */
int tm_dlq_filter_set(const struct tm_dlq_filter *f);

/* tm_dlq_filter_match says whether an entry with that error (NULL: none),
 * body (body_len bytes) and failed_at matches f (1 for a NULL f). */
int tm_dlq_filter_match(const struct tm_dlq_filter *f, const char *error,
                        const char *body, size_t body_len,
                        int64_t failed_at);

/*
 * struct tm_dlq_query asks dlq_browse for one page of a task's dead
 * letters, newest first, or for one entry. The bounds hold for what is
 * kept from the broker, not only for what is returned.
 */
struct tm_dlq_query {
    const char *id;     /* non-NULL: only this entry, body and error whole
                           (after, max and bytes_max are ignored) */
    const char *after;  /* non-NULL: the entries older than this one
                           (exclusive), as a previous page's last entry */
    size_t max;         /* entries at most, 1 or more */
    size_t body_max;    /* a body or error longer is cut to this many bytes
                           and the entry flagged truncated */
    size_t bytes_max;   /* the page's kept bytes (bodies and errors) stop
                           before exceeding this; the first entry is always
                           kept */
    const struct tm_dlq_filter *filter; /* NULL: every entry; else only
                           the entries it matches (on their whole body and
                           error, before any cut) make the page, and more
                           says whether a matching one follows. Ignored
                           with id. */
};

/* struct tm_delayed_entry is one delayed message waiting for its time,
 * as the API's delayed list shows it. Every string is owned by the
 * entry. */
struct tm_delayed_entry {
    char *id;          /* the message id (emit's, or the producer's) */
    char *body;        /* its JSON text, cut as a dead letter's is */
    int64_t due_ms;    /* due time, epoch ms */
    size_t body_len;   /* the stored body's length */
    int truncated;     /* body cut to body_max */
};

void tm_delayed_entries_free(struct tm_delayed_entry *e, size_t n);

/* struct tm_broker_node is one node of the broker deployment, as
 * /status and taskmill_broker_node_up show it. */
struct tm_broker_node {
    char name[512];    /* its URL, without credentials */
    int up;            /* 1: the daemon uses it and it works */
};

/* Nodes shown at most. */
#define TM_BROKER_NODES_MAX 64

/* struct tm_pub is what a producer adds to a message besides its body
 * (docs/producers.md). A NULL struct tm_pub * means all defaults. */
struct tm_pub {
    int priority;          /* < 0: the task's default (RabbitMQ only) */
    const char *dedup_key; /* NULL: none; Redis field dedup_key, RabbitMQ
                              header x-dedup-key */
    const char *traceparent; /* NULL: none; a valid W3C traceparent, the
                                Redis field and RabbitMQ header of that
                                name */
};

/* tm_pub_priority is pub's priority, -1 (the task's default) for none. */
static inline int tm_pub_priority(const struct tm_pub *pub)
{
    return pub != NULL ? pub->priority : -1;
}

/* tm_pub_traceparent is pub's traceparent, NULL for none. */
static inline const char *tm_pub_traceparent(const struct tm_pub *pub)
{
    return pub != NULL ? pub->traceparent : NULL;
}

/* tm_pub_dedup_key is pub's dedup key, NULL for none. */
static inline const char *tm_pub_dedup_key(const struct tm_pub *pub)
{
    return pub != NULL ? pub->dedup_key : NULL;
}

/*
 * The broker seam, one table per role. Each adapter (src/redis/redis.c,
 * src/amqp/adapter.c) fills a struct tm_broker_ops: its kind and
 * lifecycle hooks, and a pointer to each role's table (consume, produce,
 * admin, pause, sched). Every role pointer is set by both adapters; a
 * hook an adapter lacks is NULL, where marked Optional.
 *
 * Errors: functions return 0 (or a count) on success and -1 on failure,
 * with tm_broker_set_error() called to describe it.
 */

/*
 * struct tm_broker_consume_ops is the daemon's intake and settlement.
 *
 * Threading contract: fetch_lane(b, l, ...) is called only by the intake
 * thread of lane l; settle() only by the settle thread; both may run at
 * the same time, and the adapter keeps them apart (separate connections,
 * or a lock of its own). A process that runs no intake (the CLI) never
 * calls this table.
 */
struct tm_broker_consume_ops {
    /* connect opens the connections and prepares every task's queue
     * (consumer group, dead-letter queue). -1 when the broker cannot be
     * reached or refuses; the caller retries with backoff. */
    int (*connect)(struct tm_broker *b);

    /* Lanes: the daemon's one intake model. An adapter reads the tasks of
     * one lane on one thread (each broker has at least one lane while it
     * has tasks):
     * lanes() counts them, lane_of() gives a task's lane, and
     * fetch_lane(b, l, room, ...) blocks up to timeout_ms for deliveries
     * of lane l's tasks, room[i] being how many task i may take (0: none
     * now; indexes are task indexes, all of them, other lanes' ignored).
     * It sets out[0..k) to batches, each of one task (msgs[].task_index),
     * k <= nout, nout being at least the count of tasks, and returns k
     * (0 on timeout or poke) or -1 on a connection error. room_made(b, i)
     * tells it, from the settle thread, that task i has room again after
     * its lane was given 0 for it: a blocked fetch_lane returns soon.
     * Called with every room 0 (no task may take more now, and after
     * wake() once more before the lane's thread ends), it reads nothing
     * new and returns only what the adapter had read ahead, if
     * anything. */
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

    /* wake makes blocked fetch_lane calls return soon (shutdown). */
    void (*wake)(struct tm_broker *b);

    /* tick runs periodic upkeep from the settle thread (never blocked by
     * the pool), about every tick_ms() milliseconds. Both optional. */
    void (*tick)(struct tm_broker *b);
    int64_t (*tick_ms)(struct tm_broker *b);

    /* rate_take takes rate_limit tokens from buckets the broker keeps,
     * shared by every daemon reading the same tasks. Called by lane l's
     * intake thread only, before its fetch_lane: for each task i of the
     * lane (indexes are task indexes, all of them, other lanes' and tasks
     * without rate_limit ignored) it first gives back back[i] tokens a
     * read left unused, then takes up to want[i] (0: none wanted) and
     * sets got[i]; when got[i] is 0 for want[i] > 0, wait_ms[i] is how
     * long until the bucket has a token again. Returns 0, or -1 on a
     * connection error (nothing taken, nothing given back). Optional:
     * NULL when the broker keeps no buckets; each daemon then limits
     * with its own (rate_limit is per daemon). */
    int (*rate_take)(struct tm_broker *b, size_t lane, const size_t *want,
                     const size_t *back, size_t *got, int64_t *wait_ms);
};

/*
 * struct tm_broker_produce_ops adds messages to a task's queue.
 *
 * Threading contract: used by a process that runs no intake (the CLI:
 * publish, publish_at, request) or by the admin API worker on a broker of
 * its own (publish, publish_at), one thread per broker.
 */
struct tm_broker_produce_ops {
    /* publish adds one message to the task's queue, with pub's options
     * (NULL: none); the new message id is written to id (size idlen). */
    int (*publish)(struct tm_broker *b, const struct tm_cfg_task *t,
                   const char *body, size_t len, const struct tm_pub *pub,
                   char *id, size_t idlen);

    /* publish_at adds one message to the task's queue that runs no
     * earlier than due_ms (epoch ms, wall clock): on Redis a member of
     * the sorted set "<queue>.scheduled", on RabbitMQ a message with
     * header x-not-before (docs/delivery.md, Delayed messages). The
     * message id is written to id (size idlen); pub as publish's.
     * Optional: NULL when the broker has no delayed messages. */
    int (*publish_at)(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, const struct tm_pub *pub,
                      int64_t due_ms, char *id, size_t idlen);

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
                   const char *body, size_t len, const struct tm_pub *pub,
                   int64_t timeout_ms, char *id, size_t idlen, char **reply,
                   int *task_failed);
};

/* struct tm_broker_depth is one task's monitoring counts, each -1 when
 * the broker cannot tell: depth, the messages not yet delivered to the
 * task's consumers (Redis: the group's lag; RabbitMQ: the queue's ready
 * count), the figure taskmill_queue_depth and taskmill_queue_lag show;
 * pending, delivered and not acknowledged; dlq, the dead letters;
 * oldest_age_ms, how long the oldest message not yet delivered has
 * waited, by the broker's clock (0 when there is none); delayed_due,
 * delayed messages whose time has come and that are not in the queue
 * yet. */
struct tm_broker_depth {
    long long depth, pending, dlq, oldest_age_ms, delayed_due;
};

/*
 * struct tm_broker_admin_ops reads and repairs what the broker keeps:
 * dead letters, and the counts /metrics and /status show.
 *
 * Threading contract: the dlq_* hooks are used by a process that runs no
 * intake (the CLI) or by the admin API worker on a broker of its own, one
 * thread per broker; depth, scheduled and nodes as each one states.
 */
struct tm_broker_admin_ops {
    /* dlq_list returns up to max entries, newest first, in a new array of
     * *n entries (free with tm_dlq_entries_free). */
    int (*dlq_list)(struct tm_broker *b, const struct tm_cfg_task *t,
                    size_t max, struct tm_dlq_entry **out, size_t *n);
    /* dlq_browse returns one page of q (see struct tm_dlq_query) in a new
     * array of *n entries (free with tm_dlq_entries_free); *more is set
     * when older entries follow its last one. With q->id, *n is 0 when
     * there is no such entry. */
    int (*dlq_browse)(struct tm_broker *b, const struct tm_cfg_task *t,
                      const struct tm_dlq_query *q, struct tm_dlq_entry **out,
                      size_t *n, int *more);
    /* dlq_replay moves one entry (id) or all (id NULL) that f matches (f
     * NULL: every one; ignored with id) back to the task's queue;
     * dlq_purge deletes them. Both return the count this call moved:
     * each entry is moved by one call only, however many run at once, and
     * the walk ends at the newest entry there was when it began (one that
     * fails again is not moved twice). A filtered walk reads the entries
     * in chunks (Redis) or one pass (RabbitMQ): a round trip per chunk or
     * message, never per match and pass. */
    long (*dlq_replay)(struct tm_broker *b, const struct tm_cfg_task *t,
                       const char *id, const struct tm_dlq_filter *f);
    long (*dlq_purge)(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *id, const struct tm_dlq_filter *f);

    /* Delayed messages (docs/delivery.md, Delayed messages), on the same
     * threads as the dlq_* hooks. delayed_browse returns one page of task
     * t's delayed messages, soonest first: q->after (the id of a previous
     * page's last entry, exclusive), q->max, q->body_max and q->bytes_max
     * as for dlq_browse (q->id and q->filter are ignored), in a new array
     * of *n entries (free with tm_delayed_entries_free), *more set when
     * later ones follow. delayed_take takes the delayed message id of t
     * out of its wait: run_now set, into the task's queue now, as when
     * its time comes (its id and metadata kept); else deleted. Returns 1
     * when this call took it, 0 when no such message waits (never there,
     * due already, or taken by another call: of concurrent calls on one
     * id exactly one returns 1), -1 on a failure. Both optional: NULL
     * when the broker cannot list them. */
    int (*delayed_browse)(struct tm_broker *b, const struct tm_cfg_task *t,
                          const struct tm_dlq_query *q,
                          struct tm_delayed_entry **out, size_t *n,
                          int *more);
    int (*delayed_take)(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *id, int run_now);

    /* depth reads, for monitoring, task i's counts into *out (struct
     * tm_broker_depth; each -1 when the broker cannot tell). It runs on
     * a connection of its own, opened on first use, so it never waits
     * behind intake or settlement, and one caller at a time is served.
     * task_index TM_BROKER_DEPTH_CLOSE closes that connection (returns
     * 0, out unused); call it before destroy. Returns 0, or -1 when the
     * broker cannot be reached (b->errstr is left alone: other threads
     * own it). Optional: NULL when the adapter has no such reads. */
    int (*depth)(struct tm_broker *b, size_t task_index,
                 struct tm_broker_depth *out);

    /* scheduled reads, for monitoring, how many delayed messages of task
     * i wait for their time: *n, or -1 when the broker cannot tell
     * cheaply. Called by the depth refresher only, task 0 first in each
     * round: the count is one the adapter keeps, and at task 0 it may
     * wait, a second at most, for the adapter's own thread to read them
     * all (Redis: the promoter). Optional: NULL means -1 for every
     * task. */
    int (*scheduled)(struct tm_broker *b, size_t task_index, long long *n);

    /* nodes fills out[0..k) with the nodes the adapter knows (k <= max;
     * e.g. a cluster's masters, found at run time) and returns k.
     * Optional: NULL when the nodes are broker.url's list and the one
     * connected to is b->node. Any thread. */
    size_t (*nodes)(struct tm_broker *b, struct tm_broker_node *out,
                    size_t max);
};

/* struct tm_broker_pause_ops holds a task's intake back; each hook
 * states its threads. */
struct tm_broker_pause_ops {
    /* Pause (docs/delivery.md, Pausing a task). The state of a task is
     * kept in the broker, where every daemon consuming the task reads it
     * (Redis: the key "<queue>.paused.<group>"; RabbitMQ: the control
     * queue "<queue>.paused", holding one message while paused), so that
     * daemons started later honour it too. A paused task's intake reads
     * nothing: its messages stay in the broker, and what was read before
     * runs and is settled as usual.
     *
     * pause_set writes task t's state (paused: 1 pause, 0 resume) on a
     * connection of its own (CLI, admin API). Returns 0, or -1 with the
     * error set. */
    int (*pause_set)(struct tm_broker *b, const struct tm_cfg_task *t,
                     int paused);
    /* paused says whether task i's intake holds back for a pause, as this
     * daemon last read the state (1 or 0); any thread, no I/O. */
    int (*paused)(struct tm_broker *b, size_t task_index);
    /* pause_note tells the intake of a daemon that this process has just
     * set task i's state to paused, so that it acts at once rather than at
     * its next read of the state; any thread, no I/O. */
    void (*pause_note)(struct tm_broker *b, size_t task_index, int paused);
};

/* struct tm_broker_sched_ops is the schedule session (src/schedule/). */
struct tm_broker_sched_ops {
    /*
     * Schedules (src/daemon/fire.c). A schedule session is a connection
     * of its own, apart from intake and settlement, used by one thread.
     * sched_open(b, fire) opens one for b->cfg's schedules: with fire set
     * it takes part in firing (RabbitMQ: its consumers join the election
     * of each schedule's leader); without, it only reads (CLI, API).
     * NULL with the reason in err when the broker cannot be reached.
     *
     * sched_fire publishes slot slot_ms of s to its task's queue, with the
     * schedule and slot in the message, unless that slot or a later one
     * of s was fired already, by any daemon: the broker decides, so each
     * slot is published once however many daemons try. Returns 1 when
     * this call published it; 0 when it did not: fired already (*last_ms
     * then the last slot fired, >= slot_ms), or another daemon leads s
     * (*last_ms = -1: the caller tries the slot again later, for the
     * lead may pass to it); -1 on a failure: the session is then broken,
     * to be closed and opened again; 2 when the broker has a clock and
     * slot_ms is later than its now plus TM_SCHED_EARLY_MS: nothing was
     * published or marked (*last_ms then the broker's now, epoch ms), so
     * that no daemon's fast clock can mark a future slot fired and
     * silence it for the others. last_ms may be NULL. Failures of
     * sched_fire, sched_last and sched_serve are described in
     * ss->errstr.
     *
     * sched_last reads the last slot of s fired (epoch ms), -1 when none
     * was or the broker cannot tell. 0, or -1 on a failure.
     *
     * sched_serve, optional, waits up to timeout_ms while keeping the
     * session alive (heartbeats, leadership changes): NULL means the
     * session needs no serving between calls. 0, or -1 when broken.
     *
     * sched_clock, optional (NULL: the broker has no clock), reads the
     * broker's clock and stores in *skew_ms this daemon's clock
     * (tm_sched_now_ms) minus the broker's, the broker's reading
     * corrected by half the round trip. 0, or -1 when broken.
     *
     * sched_close closes the session; NULL accepted.
     */
    struct tm_sched_session *(*sched_open)(struct tm_broker *b, int fire,
                                           char *err, size_t errlen);
    int (*sched_fire)(struct tm_sched_session *ss,
                      const struct tm_cfg_schedule *s, int64_t slot_ms,
                      int64_t *last_ms);
    int (*sched_last)(struct tm_sched_session *ss,
                      const struct tm_cfg_schedule *s, int64_t *slot_ms);
    int (*sched_serve)(struct tm_sched_session *ss, int64_t timeout_ms);
    int (*sched_clock)(struct tm_sched_session *ss, int64_t *skew_ms);
    void (*sched_close)(struct tm_sched_session *ss);
};

/* Bytes of one announcement at most (its JSON text); a longer one read
 * from the broker is ignored. */
#define TM_FLEET_ANNOUNCE_MAX (64 * 1024)
/* Daemons listed at most. */
#define TM_FLEET_MAX 1000
/* A daemon not seen for this long is gone from every list. */
#define TM_FLEET_TTL_MS 30000

/* struct tm_fleet_count is what one task counted in one minute (epoch
 * minutes) that the broker does not have yet (tm_hist_unsent). */
struct tm_fleet_count {
    const char *task;
    int64_t minute;
    unsigned n[TM_HK_N];
};

/*
 * struct tm_broker_fleet_ops is the fleet: every daemon on the broker
 * announces itself, and history is summed over them (docs/http.md, The
 * fleet; docs/redis.md and docs/rabbitmq.md for the broker's objects).
 *
 * Threading contract: announce, leave, hist_flush and serve are called by
 * the daemon's fleet thread only (src/daemon/fleet.c), on a broker of its
 * own; list and hist_read by the admin API worker, on a broker of its
 * own. Optional: the table is NULL for an adapter without a fleet.
 */
struct tm_broker_fleet_ops {
    /* announce publishes this daemon's announcement json (a JSON object
     * of at most TM_FLEET_ANNOUNCE_MAX bytes), valid for TM_FLEET_TTL_MS;
     * leave withdraws it at once. 0, or -1 with the error set. */
    int (*announce)(struct tm_broker *b, const char *instance,
                    const char *json, size_t len);
    int (*leave)(struct tm_broker *b, const char *instance);

    /* list returns the announcements of the daemons seen in the last
     * TM_FLEET_TTL_MS (this one included), as JSON texts the broker gave,
     * not yet checked, at most TM_FLEET_MAX, in a new array of *n
     * strings (free with tm_fleet_list_free). 0, or -1. */
    int (*list)(struct tm_broker *b, char ***out, size_t *n);

    /* hist_flush adds the n counts to the history the broker keeps.
     * Optional: NULL when the broker keeps none (each daemon's ring is
     * its history, read through hist_read). 0, or -1 with nothing
     * known to be written. */
    int (*hist_flush)(struct tm_broker *b, const struct tm_fleet_count *c,
                      size_t n);

    /* hist_read adds to out[i] the fleet's counts of bucket first + i
     * (epoch minutes, or hours when hourly) for i below n, of task (NULL:
     * every task), as the broker has them. 0, or -1. */
    int (*hist_read)(struct tm_broker *b, const char *task, int hourly,
                     int64_t first, size_t n, uint64_t (*out)[TM_HK_N]);

    /* serve waits up to timeout_ms for what the other daemons send and
     * handles it (RabbitMQ: announcements and departures into the table
     * list reads; history requests answered with what answer, the
     * daemon's, adds to out from this daemon's ring: task NULL for every
     * task, as hist_read's). self is this daemon's instance. Called by
     * the fleet thread between its announcements. 0, or -1 when the
     * connection broke (opened again on the next call). Optional: NULL
     * when the broker holds the fleet's state itself (Redis). */
    int (*serve)(struct tm_broker *b, const char *self, int64_t timeout_ms,
                 void (*answer)(void *ctx, const char *task, int hourly,
                                int64_t first, size_t n,
                                uint64_t (*out)[TM_HK_N]),
                 void *ctx);
};

/* tm_fleet_list_free frees what list returned; NULL accepted. */
void tm_fleet_list_free(char **v, size_t n);

/* struct tm_broker_ops is one adapter: its kind, its lifecycle, and its
 * role tables (see the top of this section). */
struct tm_broker_ops {
    const char *kind; /* "redis", "amqp" */

    /* check, optional, checks what this adapter requires of a config that
     * loaded (tm_cfg_load_all), with no I/O to the broker: the shared
     * libraries it opens (dlib.h) are opened here, and rules of the broker
     * (Redis Cluster's one slot per task) applied. Each refusal is
     * reported into e at the config's mark of what it refuses, as the
     * loader reports (config.h); stops once e is full. 0, or -1 when one
     * was reported. Run by tm_broker_load_config, so by every command at
     * startup and by each reload, before any create for that config. */
    int (*check)(const struct tm_cfg *cfg, struct tm_cfg_errors *e);

    /* create allocates the adapter for cfg (borrowed; it outlives the
     * broker), a config that passed check. No I/O. */
    struct tm_broker *(*create)(const struct tm_cfg *cfg);

    /* destroy closes everything and frees the adapter; NULL accepted. */
    void (*destroy)(struct tm_broker *b);

    const struct tm_broker_consume_ops *consume;
    const struct tm_broker_produce_ops *produce;
    const struct tm_broker_admin_ops *admin;
    const struct tm_broker_pause_ops *pause;
    const struct tm_broker_sched_ops *sched;
    const struct tm_broker_fleet_ops *fleet; /* NULL: no fleet */
};

/* struct tm_sched_session is the common head of each adapter's schedule
 * session (sched_open). Its errors go to its own errstr, never to the
 * broker's, which other threads write. */
struct tm_sched_session {
    struct tm_broker *b;
    char errstr[512];
};

/* TM_BROKER_DEPTH_CLOSE, as depth()'s task_index, closes its connection. */
#define TM_BROKER_DEPTH_CLOSE ((size_t)-1)

/* tm_broker_paused says whether task i of b is paused as b last read it
 * (0 for a broker without pause). */
static inline int tm_broker_paused(struct tm_broker *b, size_t task_index);

/* tm_broker_lowat_batches counts the batches of deliveries read while the
 * consuming socket's low-water mark was on (RabbitMQ, amqp.h
 * TM_AMQP_LOWAT_BYTES), over the process's life (/metrics). */
extern atomic_ulong tm_broker_lowat_batches;

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

static inline int tm_broker_paused(struct tm_broker *b, size_t task_index)
{
    return b != NULL && b->ops->pause != NULL &&
           b->ops->pause->paused != NULL &&
           b->ops->pause->paused(b, task_index) == 1;
}

/* tm_sched_session_error describes a schedule session's failure in its
 * own errstr (never the broker's, which other threads write). */
void tm_sched_session_error(struct tm_sched_session *ss, const char *fmt,
                            ...) __attribute__((format(printf, 2, 3)));


/* tm_broker_open_lib opens a library the adapter of cfg needs with open
 * (tm_rmq_dl_open, tm_ssl_dl_open: 0, or -1 with the reason in err), for
 * check ops: a failure is reported into e at broker.url. 0 or -1. */
int tm_broker_open_lib(const struct tm_cfg *cfg, struct tm_cfg_errors *e,
                       int (*open)(char *err, size_t errlen));

/* tm_broker_set_error records the last error in b->err / b->errstr. */
void tm_broker_set_error(struct tm_broker *b, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void tm_dlq_entries_free(struct tm_dlq_entry *e, size_t n);
/* tm_dlq_entries_free_one frees the strings of one entry (not e) and
 * clears it. */
void tm_dlq_entries_free_one(struct tm_dlq_entry *e);

/* tm_dlq_utf8_cut returns the length, at most n, of the longest prefix of
 * s[0..n) that does not end inside a UTF-8 sequence: where a cut at n
 * bytes must back off so the text stays valid UTF-8. */
size_t tm_dlq_utf8_cut(const char *s, size_t n);

/* tm_broker_nodes fills out[0..k) with the nodes of cfg's broker (b may
 * be NULL: none connected) and their state, and returns k: the adapter's
 * nodes op, or else broker.url's list with b->node up while connected. */
size_t tm_broker_nodes(const struct tm_cfg *cfg, struct tm_broker *b,
                       struct tm_broker_node *out, size_t max);

extern const struct tm_broker_ops tm_broker_redis_ops;
extern const struct tm_broker_ops tm_broker_amqp_ops;

#endif /* TASKMILL_BROKER_H */
