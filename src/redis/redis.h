/* redis.h - private declarations shared by the Redis adapter's layers. */
#ifndef TASKMILL_REDIS_H
#define TASKMILL_REDIS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "broker/broker.h"
#include "util/log.h"
#include "redis/net_private.h"
#include "redis/keys.h"

/*
 * The adapter is a one-way stack of files, listed bottom to top: a file
 * calls only files listed before it (scripts/check-layers.py checks the
 * calls: no call cycle in src/redis/).
 *   keys.c    key names, cluster slots, the one-slot rule (no hiredis)
 *   arena.c   replies built in one arena per read (arena.h)
 *   net.c     one connection: socket, deadlines, RESP, the reply filter
 *   tls.c     the TLS transport (tm_rtls_fns) over net.c's socket
 *   conn.c    one authenticated connection to a node, command errors
 *   topo.c    nodes, sentinels, slot map, links; groups, settle link lost
 *   admin.c   CLI and monitoring: publish, dead letters, depths
 *   dedup.c   which messages of a read already succeeded (dedup_ttl)
 *   reply.c   answers to requests, emit --wait; a message's settle kind
 *   lane.c    intake lanes: tasks per lane, claim periods, pokes
 *   read.c    what every read shares: batches, held ids, failed reads
 *   retry.c   the retry schedule, and the script that takes due retries
 *   claim.c   scripted reads: due retries, reclaim, own history, peek
 *   readahead.c  new entries (XREADGROUP) and the read ahead
 *   pause.c   pause state: the keys, their reads, pause/resume
 *   intake.c  a lane's fetch: pause state, peek, owed entries, new ones
 *   scheduled.c  delayed messages: the scheduled set and its promoter
 *   delayed.c  delayed messages for operators: list, run now, delete
 *   upkeep.c  keep-alive refresh, trim, consumer sweep (settle thread)
 *   rate.c    rate_limit: the task's token bucket, shared by all daemons
 *   settle.c  ack, retry, dead-letter, final scripts (settle thread)
 *   schedule.c  periodic schedules: each slot published once
 *   redis.c   check, create, connect, wake, destroy and the vtables
 * The one call the other way (to a file listed later) goes through a
 * function pointer: struct tm_rconn_fns, a connection's transport, through
 * which net.c reads and writes with the table conn.c chose when it opened
 * the connection (net.c's tm_rconn_tcp, or tls.c's tm_rtls_fns for
 * rediss://). From outside, the daemon calls in through the broker tables
 * redis.c fills, and through cb_release_reply (read.c), a batch's release
 * when its last message is settled.
 */

#define TM_REDIS_SRC "broker:redis"

/* Connect timeout, and the timeout of ordinary commands. */
#define TM_REDIS_CONNECT_TIMEOUT_MS 5000
#define TM_REDIS_COMMAND_TIMEOUT_MS 10000
/* A blocking read gets this much on top of its BLOCK time. */
#define TM_REDIS_BLOCK_SLACK_MS 5000
/* Longest Redis stream id: two 20-digit numbers and a dash. */
#define TM_REDIS_ID_MAX 48

/* Log lines of refused answers per task: at most TM_REPLY_LOG_BURST per
 * TM_REPLY_LOG_MS (a producer can send any number of such requests). */
#define TM_REPLY_LOG_MS 10000
#define TM_REPLY_LOG_BURST 8
/* A settlement the broker refuses is logged at most this often. */
#define TM_REDIS_REFUSED_LOG_MS 10000

/* The text of the error that ends a blocked XREADGROUP whose stream was
 * deleted (Redis 7: "UNBLOCKED the stream key no longer exists"). */
#define TM_REDIS_KEY_GONE "the stream key no longer exists"
/* Entries per XACK command and per read. */
#define TM_REDIS_ACK_CHUNK 1024
/* The fewest entries a read sent ahead asks for, whatever the prefetch
 * (see struct tm_redis_lane): below it the lane reads as it comes. */
#define TM_REDIS_AHEAD_MIN 16

/* Bytes of entries one claim script (due retries, reclaim, history) may
 * return (fields summed; an entry over max_payload counts only for its
 * id): it stops at the entry that reaches it, so one reply holds at most
 * this plus one max_payload. */
#define TM_REDIS_READ_BYTES (4 * 1024 * 1024)

/*
 * struct tm_redis_held is the broker side of one batch: it owns the reply
 * the messages point into and sits on its task's list of held batches
 * from the read until the last message is released. The keep-alive
 * refresh (settle thread) walks that list, under held_mu, to learn which
 * ids this process holds: read, queued or running, and not yet settled.
 */
struct tm_redis_held {
    struct tm_redis_held *prev, *next; /* the task's list, under held_mu */
    redisReply *reply;
    struct tm_rarena *arena;   /* reply's arena (a reference), or NULL */
    struct tm_batch *batch;
    uint32_t seq;              /* the task's reads before this one: a
                                  task's new entries are read in id order,
                                  so (seq, place) orders its acks by id */
    /* settled[i]: msgs[i] was settled in Redis (acked, dead-lettered or
     * scheduled for a retry); written and read by the settle thread only */
    unsigned char settled[];
};

/* struct tm_redis_ack_key is an ack's place in command order (settle.c,
 * ack_key): by task, then by id. */
struct tm_redis_ack_key {
    uint64_t key;
    struct tm_msg *m;
};

/* tm_redis_sort_keys sorts v[0 .. n) by key, stable, through tmp[0 ..
 * n). Strictly descending runs are turned around first (a worker's chunk
 * comes newest first). Linear when v is then in order (the acks of one
 * chunk); else a natural merge sort, n log r for r ascending runs (the
 * chunks of a read that several workers finished out of turn: a few
 * passes). Returns v or tmp, whichever holds the sorted keys. */
struct tm_redis_ack_key *tm_redis_sort_keys(struct tm_redis_ack_key *v,
                                            struct tm_redis_ack_key *tmp,
                                            size_t n);

struct tm_redis_lane;

/* Nodes a daemon keeps track of (cluster masters, sentinel masters). */
#define TM_REDIS_MAX_NODES 64
/* No node: a slot no node serves, or a full node table. */
#define TM_REDIS_NO_NODE 0xffff

/* struct tm_redis_node is one Redis server the adapter routes commands
 * to. Entries are added (never removed, never moved) under topo_mu and
 * published by nnodes; host, port and name never change after that. */
struct tm_redis_node {
    char host[256];
    int port;
    char name[300];            /* "redis://host:port", for /status */
    atomic_int master;         /* cluster: serves slots in the last map */
    atomic_int unreachable;    /* cluster: the last connect or reply
                                  failed */
};

/*
 * struct tm_rlink is the connections of one role (settle, wake, depth,
 * one intake lane): one per node, opened on first use, used by one
 * thread at a time. Outside a cluster only c[0] is used: the server, or
 * the master the sentinels name.
 */
struct tm_rlink {
    struct tm_rconn *c[TM_REDIS_MAX_NODES];
    long long client_id[TM_REDIS_MAX_NODES]; /* CLIENT ID, 0: not asked */
    unsigned gen;              /* counts the link's connects */
    int64_t timeout_ms;        /* commands' timeout */
    int dropped_err;           /* the REDIS_ERR_* of the connection
                                  dropped last (0: it had none) */
};

struct tm_redis_task {
    const struct tm_cfg_task *cfg;
    unsigned slot;             /* the cluster slot of every key of it */
    unsigned lane_key;         /* tasks of one lane that share it are
                                  read by one command: the slot in a
                                  cluster, else 0 */
    char *retry_key;           /* "<queue>.retry.<group>": the schedule */
    char *due_key;             /* the due-time index of its slot
                                  (tm_redis_due_key) */
    char *rate_key;            /* "<queue>.rate.<group>": rate_limit's
                                  token bucket */
    struct tm_redis_lane *lane; /* the intake lane that reads it */
    unsigned group_gen;        /* lane->link.gen when its group was made
                                  sure of; another value: not yet */
    int group_seen;            /* intake: its group was made sure of once
                                  (a group created after that had been
                                  deleted, with or without its stream) */
    int history_done;          /* own pending entries read again */
    uint32_t reads;            /* intake: batches made (held->seq) */
    char history_from[TM_REDIS_ID_MAX + 1]; /* "(id": next history read */
    int was_up;
    _Atomic(struct tm_msg *) garbage; /* settled batches, to free here */
    int64_t next_maint_ms;     /* intake: next reclaim round */
    int reclaimable;           /* intake: the last peek saw entries
                                  pending past claim_idle */
    int64_t next_due_ms;       /* intake: next look at the retry set */
    atomic_llong retry_hint_ms; /* settle thread: earliest retry it
                                   scheduled since the intake looked */
    int64_t next_tick_ms;      /* settle thread: next upkeep round */
    unsigned tick_rounds;
    char claim_cursor[TM_REDIS_ID_MAX + 1]; /* reclaim scan position */
    char (*own_ids)[TM_REDIS_ID_MAX]; /* intake: held ids, for reclaim */
    size_t own_idcap;
    pthread_mutex_t held_mu;   /* guards held */
    struct tm_redis_held *held; /* batches this process holds */
    char *pause_key;           /* "<queue>.paused.<group>" (pause.c) */
    atomic_int paused;         /* 1 while the task's intake is paused */
    /* settle thread: refused answers' log lines (reply.c), at most
     * TM_REPLY_LOG_BURST per TM_REPLY_LOG_MS */
    struct tm_log_gate reply_gate;
    char errstr[256];
};

/*
 * struct tm_redis_lane is one intake lane: the tasks of one consumer group
 * read by one thread on one connection, new entries of all of them by a
 * single XREADGROUP ... STREAMS k1 k2 ... that blocks until one arrives,
 * the next retry or reclaim is due, or the lane is poked. So intake costs
 * one thread and one connection per group, whatever the count of tasks.
 * Two tasks of one group on one queue go to different lanes (a stream
 * appears once in a read).
 *
 * Poking: the settle thread pokes a lane when it made room for a task the
 * lane had left out of its read (prefetch reached), or scheduled a retry
 * due before the read ends. poke is set first, then when the lane is in a
 * blocking read (in_block) its connection is unblocked (CLIENT UNBLOCK on
 * the adapter's wake connection); the lane clears poke before each read
 * and does not block when it was set. A read that starts between the two
 * may miss the unblock: reads block at most TM_REDIS_ROOM_BLOCK_MS while
 * a task of the lane waits for room.
 *
 * Cluster: a command touches one slot, so one blocking read covers the
 * tasks of one slot. Tasks sharing a slot (a hash tag) share a lane; the
 * first TM_REDIS_CLUSTER_LANES slots of a group get a blocking lane each;
 * the tasks of any further slot of the group share one polling lane
 * (poll set), which reads each slot without blocking and, when nothing
 * came, sleeps (woken by a poke) 10 ms, then twice as long each time, up
 * to TM_REDIS_POLL_MAX_MS. Its tasks are ordered by slot.
 */
struct tm_redis_lane {
    struct tm_redis *rb;
    const char *group;
    size_t *tasks;             /* task indexes, ntasks of them */
    size_t ntasks;
    int poll;                  /* a polling lane (tasks of many slots) */
    unsigned key;              /* blocking lane: its tasks' lane_key */
    struct tm_rlink link;      /* lane thread only */
    int was_up;
    atomic_llong client_id;    /* CLIENT ID of the blocked connection,
                                  0 when unknown */
    atomic_int block_node;     /* the node it is blocked on */
    pthread_mutex_t mu;        /* polling lane: its sleep, with cv */
    pthread_cond_t cv;
    int64_t idle_ms;           /* polling lane: the next empty sleep */
    atomic_int poke;
    atomic_int in_block;
    atomic_llong block_end_ms; /* when the current read ends at the latest */
    int64_t next_peek_ms;      /* next look at pending lists (lane
                                  thread only) */
    int64_t peek_period_ms;    /* between two peeks (tm_redis_lanes_init) */
    size_t peek_at;            /* lane thread: the next peek's first task */
    int peeked;                /* lane thread: a peek was made (the
                                  first also indexes the retry sets) */
    atomic_llong next_pause_ms; /* next read of its tasks' pause keys
                                   (pause.c; 0: at once) */
    /* read scratch (lane thread only) */
    const char **argv;
    size_t *argti;             /* task index of each stream selected */
    size_t *argmax;            /* its room, at most TM_REDIS_ACK_CHUNK */
    size_t *argroom;           /* its room */
    /* Read ahead (lane thread only). While the pool takes one read's
     * entries, the next XREADGROUP (no BLOCK) is on its way: sent when
     * the last reply came back full and every task of it has room
     * left beyond what it brought (that read asks for at most that
     * rest, so it counts against the room it was sized from), and no
     * look outside the read (retries, reclaim, peek, pause state), no
     * poke and no stop is due. Its reply is the first thing the next
     * fetch reads on the connection: nothing else is sent on it
     * meanwhile. Lanes whose tasks use the connection between fetches
     * (rate_limit, dedup_ttl) and polling lanes never read ahead. */
    int ahead_ok;              /* the lane may read ahead */
    int ahead;                 /* a read ahead is in flight */
    size_t ahead_node;         /* on l->link.c[ahead_node] */
    unsigned ahead_gen;        /* l->link.gen when it was sent */
    size_t ahead_count;        /* its COUNT */
    size_t ahead_k;            /* its streams: tasks ahead_ti[0 .. k) */
    size_t *ahead_ti;
    const char **ahead_argv;
    atomic_int stopping;       /* wake() was called: nothing more is sent
                                  ahead */
    const char **peek_argv;
    char (*peek_num)[24];
    char errstr[256];
};

/* struct tm_redis is the adapter: the common head, then its state. */
struct tm_redis {
    struct tm_broker base;
    int cluster;                  /* broker.redis.mode: cluster */
    struct tm_rlink settle;       /* settle thread: acks, dead letters,
                                     upkeep; and the CLI's commands */
    struct tm_redis_task *tasks;
    size_t ntasks;
    size_t *by_key;               /* the task indexes by lane_key, stable
                                     (one slot's tasks next to each other,
                                     in config order): set once by
                                     tm_redis_lanes_init; polling lanes
                                     and the promoter read in this order */
    struct tm_redis_lane *lanes;
    size_t nlanes;
    pthread_mutex_t wake_mu;      /* guards wake */
    struct tm_rlink wake;         /* CLIENT UNBLOCK for lanes */
    /* topology (topo.c) */
    pthread_mutex_t topo_mu;      /* guards adding nodes */
    pthread_mutex_t refresh_mu;   /* one slot map read at a time */
    struct tm_redis_node nodes[TM_REDIS_MAX_NODES];
    atomic_size_t nnodes;
    _Atomic unsigned short slot_node[TM_REDIS_SLOTS]; /* node index */
    atomic_int map_stale;         /* read the map again before use */
    atomic_llong map_at_ms;       /* when it was last read */
    atomic_int master_node;       /* outside a cluster: the node the
                                     connections go to */
    const char *consumer;
    atomic_int ever_up;
    atomic_size_t sentinel_next; /* the sentinel asked first */
    int wc_was_up;
    /* settle and upkeep scratch (settle thread only) */
    const char **argv;
    size_t *argvlen;
    size_t argcap;
    struct tm_msg **order;      /* settle: messages in command order */
    struct tm_redis_ack_key *keys; /* settle: acks by id, and the merge's
                                      room (2 * scratchcap) */
    struct tm_redis_span *spans; /* settle: the messages of each command */
    unsigned char *done;        /* settle: settled, by position */
    unsigned char *kinds;       /* settle: each message's kind and final
                                   bits (tm_redis_settle_kind), by
                                   position */
    size_t scratchcap;
    unsigned char *redo;        /* settle: spans to send again */
    char (*ids)[TM_REDIS_ID_MAX]; /* upkeep: ids to refresh */
    size_t idcap;
    struct tm_redis_sched *sched; /* delayed messages (scheduled.c) */
    /* settle: refused settlements' log lines (settle.c), one per
     * TM_REDIS_REFUSED_LOG_MS */
    struct tm_log_gate refused_gate;
};

/* ---- conn.c ---- */

/* tm_redis_reply_error describes a failed command in buf: the reply's
 * error text, or the context's I/O error. Returns 1 when the connection
 * is unusable. */
int tm_redis_reply_error(struct tm_rconn *c, redisReply *r, char *buf,
                         size_t size);
/* tm_redis_error_moves says whether an error reply means the server is
 * no longer the master (a failover): the connection is then closed and
 * opened again, to the master the topology names now. */
int tm_redis_error_moves(const char *err);
/* tm_redis_command runs one command given as argv and returns its reply
 * (the caller frees it), or NULL with the reason in buf (and *dead = 1
 * when the connection is unusable). An error reply is returned as NULL
 * too. */
redisReply *tm_redis_command(struct tm_rconn *c, int argc,
                             const char **argv, const size_t *lens,
                             char *buf, size_t size, int *dead);
/* tm_redis_open_node connects to host:port with the credentials and
 * database of u, and broker.tls; name is how errors call it; sentinel:
 * an AUTH refused for want of a password is ignored, no SELECT. */
struct tm_rconn *tm_redis_open_node(struct tm_redis *rb,
                                    const struct tm_url *u, const char *host,
                                    int port, const char *name, int sentinel,
                                    int64_t timeout_ms, char *buf,
                                    size_t size);
void tm_redis_mark_up(struct tm_redis *rb);
void tm_redis_mark_down(struct tm_redis *rb);
/* tm_redis_reply_field finds key in a flat [key, value, ...] array. */
const redisReply *tm_redis_reply_field(const redisReply *a,
                                       const char *key);

/* ---- topo.c ---- */

enum tm_redis_redirect {
    TM_REDIS_NO_REDIRECT,
    TM_REDIS_MOVED,            /* the slot lives on another node now */
    TM_REDIS_ASK,              /* this key has moved already: ASKING */
    TM_REDIS_BUSY              /* TRYAGAIN, CLUSTERDOWN: wait, again */
};

/* tm_redis_redirect_of reads a cluster redirect from an error reply
 * (MOVED/ASK: its slot, host and port). */
enum tm_redis_redirect tm_redis_redirect_of(const char *err, unsigned *slot,
                                            char *host, size_t hostlen,
                                            int *port);
/* tm_redis_node_add returns the index of host:port in the node table,
 * adding it when new; TM_REDIS_NO_NODE when the table is full. */
size_t tm_redis_node_add(struct tm_redis *rb, const char *host, int port);
/* tm_redis_topo_refresh reads the slot map from a node that answers (the
 * masters known, the others, then broker.url's seeds); not more often
 * than every 200 ms unless force. 0, or -1 with the reason. */
int tm_redis_topo_refresh(struct tm_redis *rb, int force, char *buf,
                          size_t size);
/* tm_redis_slot_node is the node index serving slot (0 outside a
 * cluster), reading the map first when it is stale; TM_REDIS_NO_NODE
 * with the reason in buf. */
size_t tm_redis_slot_node(struct tm_redis *rb, unsigned slot, char *buf,
                          size_t size);
void tm_redis_link_init(struct tm_rlink *lk, int64_t timeout_ms);
/* tm_redis_link_get returns lk's connection to node ni, opening it when
 * needed; NULL with the reason in buf. */
struct tm_rconn *tm_redis_link_get(struct tm_redis *rb, struct tm_rlink *lk,
                                   size_t ni, char *buf, size_t size);
/* tm_redis_link_drop closes lk's connection to node ni (a cluster's map
 * is then read again before the next command); link_close closes all. */
void tm_redis_link_drop(struct tm_redis *rb, struct tm_rlink *lk,
                        size_t ni);
void tm_redis_link_close(struct tm_redis *rb, struct tm_rlink *lk);
/* tm_redis_link_up says whether lk has a connection open. */
int tm_redis_link_up(const struct tm_rlink *lk);
/* tm_redis_link_run runs one command whose keys are in slot on lk,
 * following redirects; its reply (the caller frees it), or NULL with the
 * reason in buf, *dead = 1 when a connection was lost (it is closed
 * then). An error reply is returned as NULL too. cap > 0: bulk strings
 * over cap are dropped (tm_rconn_get_reply_capped); timeout_ms > 0: the
 * reply's timeout instead of lk's. */
redisReply *tm_redis_link_run(struct tm_redis *rb, struct tm_rlink *lk,
                              unsigned slot, int argc, const char **argv,
                              const size_t *lens, size_t cap,
                              int64_t timeout_ms, char *buf, size_t size,
                              int *dead);
struct tm_rarena;
/* tm_redis_link_run_in is tm_redis_link_run building the reply in the
 * arena arena (see arena.h): the caller frees it with the arena. Every
 * other reply of the exchange (redirects, errors) is freed here. */
redisReply *tm_redis_link_run_in(struct tm_redis *rb, struct tm_rlink *lk,
                                 unsigned slot, int argc, const char **argv,
                                 const size_t *lens, size_t cap,
                                 struct tm_rarena *arena, int64_t timeout_ms,
                                 char *buf, size_t size, int *dead);
/* struct tm_redis_cmd is one command of a pipeline on a link: its keys
 * are in slot; lens NULL: the strlen of each argument. */
struct tm_redis_cmd {
    unsigned slot;
    int argc;
    const char **argv;
    const size_t *lens;
    redisReply *reply;         /* set by tm_redis_link_pipe */
};
/* tm_redis_link_pipe runs the n commands on lk, pipelined per node (each
 * command to its slot's node; outside a cluster all to the one server):
 * every command is written, then every reply read. A command redirected
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) is run again alone, following the
 * redirect. cmds[i].reply is its reply, error replies included; NULL
 * when none came (not sent, its connection lost, or refused after a
 * redirect). Returns 0, or -1 with the reason in buf when a connection
 * was lost or its server is no longer the master (the connection is
 * closed then, to be opened again on the next use). The caller frees
 * the replies with tm_redis_cmds_free. */
int tm_redis_link_pipe(struct tm_redis *rb, struct tm_rlink *lk,
                       struct tm_redis_cmd *cmds, size_t n, char *buf,
                       size_t size);
void tm_redis_cmds_free(struct tm_redis_cmd *cmds, size_t n);
/* tm_redis_ensure_group creates task rt's consumer group (and stream) on
 * link lk when missing; 1 when it created it, 0 when it was there, or -1
 * with the reason (*dead: connection lost). */
int tm_redis_ensure_group(struct tm_redis *rb, struct tm_rlink *lk,
                          const struct tm_redis_task *rt, char *buf,
                          size_t size, int *dead);
/* tm_redis_wc_lost notes a failure of the settle link (settle thread
 * only): the broker is down until a round of it works again. */
void tm_redis_wc_lost(struct tm_redis *rb, const char *what,
                      const char *why);
/* tm_redis_nodes fills the broker's nodes op. */
size_t tm_redis_nodes(struct tm_broker *b, struct tm_broker_node *out,
                      size_t max);

/* ---- admin.c ---- */

int tm_redis_depth(struct tm_broker *b, size_t ti,
                   struct tm_broker_depth *out);
/* tm_redis_cli_command runs one command of the CLI or the admin API on
 * the settle link (any thread of a CLI adapter; a daemon's settle
 * thread); argv[key] is a key it touches, whose slot routes it in a
 * cluster. timeout_ms > 0: the reply's timeout (a blocking read). Its
 * reply (the caller frees it), or NULL with the broker's error set. */
redisReply *tm_redis_cli_command(struct tm_redis *rb, int argc,
                                 const char **argv, const size_t *lens,
                                 int key, int64_t timeout_ms);
int tm_redis_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     char *id, size_t idlen);
int tm_redis_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                      size_t max, struct tm_dlq_entry **out, size_t *n);
int tm_redis_dlq_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                        const struct tm_dlq_query *q,
                        struct tm_dlq_entry **out, size_t *n, int *more);
long tm_redis_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id, const struct tm_dlq_filter *f);
long tm_redis_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *id, const struct tm_dlq_filter *f);

/* ---- dedup.c ---- */

/* tm_redis_dedup_check marks, in the nb batches just read on lane l, the
 * messages whose dedup key already succeeded (m->duplicate, m->result the
 * stored result): one pipelined MGET per batch with keys (lane thread). */
void tm_redis_dedup_check(struct tm_redis *rb, struct tm_redis_lane *l,
                          struct tm_batch **out, size_t nb);

/* ---- reply.c ---- */

/* tm_redis_meta_field sets m's request or dedup metadata from one field
 * k = v of its entry (reply_to, correlation_id, dedup_key; others are
 * ignored). m points into the reply. */
void tm_redis_meta_field(struct tm_msg *m, const redisReply *k,
                         const redisReply *v);
/* enum tm_redis_settle_kind is how one message is settled, in command
 * order: decided once per settlement by tm_redis_settle_kind, then only
 * read (settle.c keeps it with each command). */
enum tm_redis_settle_kind {
    TM_REDIS_SK_RETRY,         /* the retry script (retry.c) */
    TM_REDIS_SK_DEAD,          /* the dead-letter script (settle.c) */
    TM_REDIS_SK_FINAL,         /* the final script: an acknowledgement or
                                  dead letter that answers a request or
                                  records a dedup key (final bits) */
    TM_REDIS_SK_ACK,           /* XACK, with the task's other acks */
    TM_REDIS_SK_NONE,          /* nothing to send (TM_SETTLE_NONE) */
    TM_REDIS_SK_N
};
/* The final bits of a TM_REDIS_SK_FINAL message: what its final script
 * does besides settling it. */
#define TM_REDIS_FINAL_ANSWER 1u  /* answers reply_to in the script */
#define TM_REDIS_FINAL_APART 2u   /* answers by a command of its own,
                                     queued before the script (cluster:
                                     reply_to in another slot) */
#define TM_REDIS_FINAL_RECORD 4u  /* records its dedup key (dedup_ttl) */
/* tm_redis_settle_kind classifies m once: its kind, and in *final its
 * final bits (0 unless TM_REDIS_SK_FINAL). */
enum tm_redis_settle_kind tm_redis_settle_kind(const struct tm_redis *rb,
                                               const struct tm_msg *m,
                                               unsigned *final);
/* struct tm_redis_final is one command of a final settlement, built by
 * tm_redis_final_argv: argv points into it (and into the message). */
struct tm_redis_final {
    const char *argv[28];
    size_t lens[28];
    int argc;
    unsigned slot;             /* the slot of its keys */
    char nums[5][24];
    char *body, *dkey;
};
/* tm_redis_final_argv builds one command of the settlement of m, whose
 * final bits (tm_redis_settle_kind) are final, into f: answer_only, the
 * answer of its own (TM_REDIS_FINAL_APART), which goes before the other;
 * else the final script. tm_redis_final_free frees what f holds. */
void tm_redis_final_argv(struct tm_redis *rb, const struct tm_msg *m,
                         unsigned final, int answer_only,
                         struct tm_redis_final *f);
void tm_redis_final_free(struct tm_redis_final *f);
/* tm_redis_final_done reads the reply r of one command that
 * tm_redis_final_argv built (answer_only: the answer of its own); a
 * success that another copy of its dedup key beat becomes a duplicate.
 * r is not an error reply unless answer_only. */
void tm_redis_final_done(struct tm_redis *rb, struct tm_msg *m,
                         const redisReply *r, int answer_only);
int tm_redis_request(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     int64_t timeout_ms, char *id, size_t idlen,
                     char **reply, int *task_failed);

/* ---- lane.c ---- */

/* A lane peeks at its tasks' pending lists (one script per slot) for
 * entries idle past claim_idle (other daemons die): with up to
 * TM_REDIS_PEEK_TASKS tasks at all of them every claim period (the
 * shortest; see tm_redis_claim_period), with more at that many each
 * claim_idle * TM_REDIS_PEEK_TASKS / ntasks, so that each is looked at
 * once per claim_idle (the shortest): such entries are reclaimed within
 * two claim_idle of their last delivery. Retries it learns of from the
 * due-time index (scheduled.c polls it, for the retries of every daemon)
 * and its own at once (tm_redis_retry_note). */
#define TM_REDIS_PEEK_TASKS 16
/* While a task of a lane waits for room, a read blocks at most this. */
#define TM_REDIS_ROOM_BLOCK_MS 1000
/* Cluster: blocking lanes per consumer group (one slot each); further
 * slots share a polling lane, whose longest sleep is this. */
#define TM_REDIS_CLUSTER_LANES 4
#define TM_REDIS_POLL_MAX_MS 1000
/* tm_redis_claim_period is how often a task's entries are checked: a
 * quarter of claim_idle, between 50 ms and 5 s. */
int64_t tm_redis_claim_period(const struct tm_cfg_task *t);
/* tm_redis_lanes_init puts rb's tasks into lanes (one per group, and
 * another for a queue seen twice in one); tm_redis_lanes_free frees
 * them (closing their connections; a read ahead still in flight is
 * ended first by the caller, tm_redis_ahead_end). */
void tm_redis_lanes_init(struct tm_redis *rb);
void tm_redis_lanes_free(struct tm_redis *rb);
size_t tm_redis_nlanes(struct tm_broker *b);
size_t tm_redis_lane_of(struct tm_broker *b, size_t ti);
/* tm_redis_lane_poke makes the lane look again at once (any thread). */
void tm_redis_lane_poke(struct tm_redis_lane *l);
/* tm_redis_room_made pokes the lane of task ti (settle thread). */
void tm_redis_room_made(struct tm_broker *b, size_t ti);
/* tm_redis_wake pokes every lane (shutdown). */
void tm_redis_wake(struct tm_broker *b);

/* ---- read.c ---- */

/* tm_redis_collect frees the batches of task rt settled since its last
 * read (its lane's thread; redis.c at the end). */
void tm_redis_collect(struct tm_redis_task *rt);
/* What every read uses (see each definition). */
struct tm_batch *tm_redis_entries_batch(struct tm_redis_task *rt,
                                        redisReply *reply,
                                        struct tm_rarena *arena,
                                        const redisReply *entries,
                                        size_t task_index);
void tm_redis_intake_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                            const char *what);
int tm_redis_group_lost(const char *err);
void tm_redis_regroup(struct tm_redis *rb, struct tm_redis_lane *l,
                      const char *err, const size_t *ti, size_t k);
int tm_redis_read_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                         const char *what);
redisReply *tm_redis_intake_command(struct tm_redis_task *rt, int argc,
                                    const char **argv,
                                    struct tm_rarena *arena,
                                    int64_t timeout_ms, int *dead);
/* tm_redis_next_look is when task rt next needs a look outside the
 * blocking read: its next due retry, or its next reclaim round. */
int64_t tm_redis_next_look(const struct tm_redis_task *rt);
/* tm_redis_held_ids copies the ids of the messages of task rt that this
 * process holds (read and not yet settled; settled_too: not yet released
 * either, their XACK may not have run yet) into *ids, grown as needed
 * (*cap entries); returns their count. Any thread (takes held_mu). */
size_t tm_redis_held_ids(struct tm_redis_task *rt, int settled_too,
                         char (**ids)[TM_REDIS_ID_MAX], size_t *cap);

/* TM_REDIS_LUA_TAKE is the prelude of every intake script: KEYS[1] the
 * stream, KEYS[2] the retry set, KEYS[3] the due-time index; ARGV[1]
 * group, ARGV[2] consumer, ARGV[3] max_payload, ARGV[4] byte budget,
 * ARGV[5] most entries, ARGV[6] the script's own argument. It defines keep(entry) (adds an entry to `out`,
 * with its delivery count, and its body stripped with a reason when over
 * max_payload), claim(id) (XCLAIM to this consumer, then keep) and full()
 * (the reply reached its count or byte budget). Each script returns
 * {aux, out}. */
#define TM_REDIS_LUA_TAKE                                                   \
    "local maxp = tonumber(ARGV[3])\n"                                      \
    "local budget, count = tonumber(ARGV[4]), tonumber(ARGV[5])\n"          \
    "local out, used = {}, 0\n"                                             \
    "local function keep(e, n)\n"                                           \
    "  local f, cost, why = e[2], 64, false\n"                              \
    "  if type(f) == 'table' then\n"                                        \
    "    for i = 1, #f - 1, 2 do\n"                                         \
    "      if f[i] == 'body' then\n"                                        \
    "        local len = string.len(f[i + 1])\n"                            \
    "        if len > maxp then\n"                                          \
    "          why = 'body of ' .. len .. ' bytes exceeds max_payload of '"  \
    "            .. maxp\n"                                                 \
    "        end\n"                                                         \
    "        break\n"                                                       \
    "      end\n"                                                           \
    "    end\n"                                                             \
    "    if why then f = {} else\n"                                         \
    "      for i = 1, #f do cost = cost + string.len(f[i]) end\n"           \
    "    end\n"                                                             \
    "  end\n"                                                               \
    "  used = used + cost\n"                                                \
    "  out[#out + 1] = {e[1], f, why, n}\n"                                 \
    "end\n"                                                                 \
    "local function full() return #out >= count or used >= budget end\n"    \
    "local function claim(id, idle)\n"                                      \
    "  local r = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], idle, id)\n" \
    "  if #r == 0 or not r[1] then return end\n"                            \
    "  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)\n"     \
    "  keep(r[1], #p > 0 and p[1][4] or 1)\n"                               \
    "end\n"

/* ---- retry.c ---- */

/* tm_redis_retry_argv fills argv (10 of them) with the command that
 * schedules m's retry after its delay (settle thread); delay is the
 * buffer argv points into. Returns the count. */
int tm_redis_retry_argv(struct tm_redis *rb, const struct tm_msg *m,
                        const char **argv, char delay[24]);
/* tm_redis_retry_note tells the task's intake that a retry is due at
 * due_ms (local monotonic ms), so it looks at the retry set then. */
void tm_redis_retry_note(struct tm_redis_task *rt, int64_t due_ms);
/* tm_redis_due_script is the intake script (the take prelude, then its
 * own part) that claims due retries; ARGV[6] unused. Returns {wait, out},
 * wait being the ms until the next retry is due (-1: none). */
extern const char tm_redis_due_script[];

/* ---- claim.c ---- */

/* the scripted reads of what a task is owed, and the peek */
int tm_redis_take_owed(struct tm_redis *rb, struct tm_broker *b,
                       struct tm_redis_task *rt, size_t ti, size_t max,
                       struct tm_batch **out);
int tm_redis_peek(struct tm_redis *rb, struct tm_redis_lane *l);

/* ---- readahead.c ---- */

/* new entries, and the read ahead */
int tm_redis_read_new(struct tm_redis *rb, struct tm_redis_lane *l,
                      size_t from, size_t k, int64_t block_ms,
                      struct tm_batch **out, size_t nout);
int tm_redis_take_ahead(struct tm_redis *rb, struct tm_redis_lane *l,
                        const size_t *room, struct tm_batch **out,
                        size_t nout);
int tm_redis_poll_new(struct tm_redis *rb, struct tm_redis_lane *l, size_t k,
                      int64_t until, struct tm_batch **out, size_t nout);
/* tm_redis_ahead_end reads the reply of lane l's read ahead, if one is
 * still in flight, and drops it: its entries stay pending on this
 * consumer, as unstarted ones left at a stop do (redis.c, before
 * tm_redis_lanes_free; the lane's last fetch after wake() normally takes
 * it in). */
void tm_redis_ahead_end(struct tm_redis *rb, struct tm_redis_lane *l);

/* ---- pause.c ---- */

/* A lane reads its tasks' pause keys this often, and no read of new
 * entries blocks longer, so that a pause set by any process stops every
 * daemon within about twice this. */
#define TM_REDIS_PAUSE_POLL_MS 1000
/* tm_redis_pause_poll reads the pause keys of the lane's tasks when that
 * is due (lane thread); -1 when the connection was lost. */
int tm_redis_pause_poll(struct tm_redis *rb, struct tm_redis_lane *l);
/* tm_redis_pause_wait waits, when every task of the lane that may read is
 * paused, until the next read of the pause keys, a poke or until_ms
 * (monotonic), whichever comes first (lane thread). */
void tm_redis_pause_wait(struct tm_redis_lane *l, int64_t until_ms);
int tm_redis_pause_set(struct tm_broker *b, const struct tm_cfg_task *t,
                       int paused);
int tm_redis_paused(struct tm_broker *b, size_t ti);
void tm_redis_pause_note(struct tm_broker *b, size_t ti, int paused);

/* ---- intake.c ---- */

/* tm_redis_fetch_lane is the fetch_lane hook (struct
 * tm_broker_consume_ops). */
int tm_redis_fetch_lane(struct tm_broker *b, size_t lane,
                        const size_t *room, int timeout_ms,
                        struct tm_batch **out, size_t nout);

/* ---- scheduled.c ---- */

/* tm_redis_sched_new prepares the promoter of rb's tasks (no thread, no
 * I/O); tm_redis_sched_start starts its thread, once (settle thread: a
 * daemon's adapter, never the CLI's); tm_redis_sched_free stops and
 * frees it (NULL accepted). */
struct tm_redis_sched *tm_redis_sched_new(struct tm_redis *rb);
void tm_redis_sched_start(struct tm_redis_sched *s);
void tm_redis_sched_free(struct tm_redis_sched *s);
int tm_redis_publish_at(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *body, size_t len, const struct tm_pub *pub,
                        int64_t due_ms, char *id, size_t idlen);
int tm_redis_scheduled(struct tm_broker *b, size_t ti, long long *n);
/* tm_redis_sched_poke wakes every promoter of the process for a round at
 * once (a member this process made due). Any thread. */
void tm_redis_sched_poke(void);

/* ---- delayed.c ---- */

/* The admin ops delayed_browse and delayed_take (broker.h). */
int tm_redis_delayed_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                            const struct tm_dlq_query *q,
                            struct tm_delayed_entry **out, size_t *n,
                            int *more);
int tm_redis_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, int run_now);

/* ---- upkeep.c ---- */

void tm_redis_tick(struct tm_broker *b);
int64_t tm_redis_tick_ms(struct tm_broker *b);

/* ---- rate.c ---- */

/* tm_redis_rate_take is the rate_take op (see struct tm_broker_ops). */
int tm_redis_rate_take(struct tm_broker *b, size_t lane, const size_t *want,
                       const size_t *back, size_t *got, int64_t *wait_ms);

/* ---- settle.c ---- */

size_t tm_redis_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n);

/* ---- schedule.c ---- */

struct tm_sched_session *tm_redis_sched_open(struct tm_broker *b, int fire,
                                             char *err, size_t errlen);
int tm_redis_sched_fire(struct tm_sched_session *ss,
                        const struct tm_cfg_schedule *s, int64_t slot_ms,
                        int64_t *last_ms);
int tm_redis_sched_last(struct tm_sched_session *ss,
                        const struct tm_cfg_schedule *s, int64_t *slot_ms);
int tm_redis_sched_clock(struct tm_sched_session *ss, int64_t *skew_ms);
void tm_redis_sched_close(struct tm_sched_session *ss);

#endif /* TASKMILL_REDIS_H */
