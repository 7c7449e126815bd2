/* redis.h - private declarations shared by the Redis adapter's layers. */
#ifndef TASKMILL_REDIS_H
#define TASKMILL_REDIS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "broker.h"

/*
 * The adapter is split by layer:
 *   conn.c    connections, timeouts, error translation, id helpers
 *   intake.c  reads of new entries, own history and reclaim (intake thread)
 *   retry.c   the retry schedule
 *   settle.c  ack, retry, dead-letter (settle thread)
 *   upkeep.c  keep-alive refresh, trim, consumer sweep (settle thread)
 *   admin.c   CLI and monitoring: publish, dead letters, depths
 *   redis.c   create, connect, wake, destroy and the vtable
 */

#define TM_REDIS_SRC "broker:redis"

/* Connect timeout, and the timeout of ordinary commands. */
#define TM_REDIS_CONNECT_TIMEOUT_MS 5000
#define TM_REDIS_COMMAND_TIMEOUT_MS 10000
/* A blocking read gets this much on top of its BLOCK time. */
#define TM_REDIS_BLOCK_SLACK_MS 5000
/* Longest Redis stream id: two 20-digit numbers and a dash. */
#define TM_REDIS_ID_MAX 48
/* Entries per XACK command and per read. */
#define TM_REDIS_ACK_CHUNK 1024

/* struct tm_redis_retry is an entry kept pending on this consumer until
 * its retry time, then claimed again (XCLAIM) and run with attempt. */
struct tm_redis_retry {
    int64_t due_ms;
    unsigned attempt;
    char id[TM_REDIS_ID_MAX];
};

struct tm_redis_task {
    const struct tm_cfg_task *cfg;
    redisContext *rc;          /* intake connection: blocking reads */
    int group_ready;
    int history_done;          /* own pending entries read again */
    char history_from[TM_REDIS_ID_MAX]; /* next history read starts after */
    int was_up;
    atomic_llong client_id;    /* CLIENT ID of rc, 0 when unknown */
    _Atomic(struct tm_msg *) garbage; /* settled batches, to free here */
    int64_t next_maint_ms;     /* intake: next reclaim round */
    int64_t next_tick_ms;      /* settle thread: next upkeep round */
    unsigned tick_rounds;
    char claim_cursor[TM_REDIS_ID_MAX]; /* XAUTOCLAIM scan position */
    pthread_mutex_t mu;        /* guards the retry heap */
    struct tm_redis_retry *heap; /* min-heap by due_ms */
    size_t nheap, capheap;
    char errstr[256];
};

/* struct tm_redis is the adapter: the common head, then its state. */
struct tm_redis {
    struct tm_broker base;
    redisContext *wc;          /* settle connection: acks, dead letters */
    struct tm_redis_task *tasks;
    size_t ntasks;
    const char *consumer;
    atomic_int ever_up;
    int wc_was_up;
    /* settle scratch (settle thread only) */
    const char **argv;
    size_t *argvlen;
    size_t argcap;
};

/* ---- conn.c ---- */

/* tm_redis_reply_error describes a failed command in buf: the reply's
 * error text, or the context's I/O error. Returns 1 when the connection
 * is unusable. */
int tm_redis_reply_error(redisContext *c, redisReply *r, char *buf,
                         size_t size);
/* tm_redis_command runs one command given as argv and returns its reply
 * (the caller frees it), or NULL with the reason in buf (and *dead = 1
 * when the connection is unusable). An error reply is returned as NULL
 * too. */
redisReply *tm_redis_command(redisContext *c, int argc, const char **argv,
                             const size_t *lens, char *buf, size_t size,
                             int *dead);
/* tm_redis_connect opens one authenticated connection whose commands time
 * out after timeout_ms; NULL with the reason in buf. */
redisContext *tm_redis_connect(struct tm_redis *rb, int64_t timeout_ms,
                               char *buf, size_t size);
void tm_redis_close(redisContext *c);
void tm_redis_mark_up(struct tm_redis *rb);
void tm_redis_mark_down(struct tm_redis *rb);
int tm_redis_ensure_group(redisContext *c, const struct tm_cfg_task *t,
                          char *buf, size_t size, int *dead);
/* tm_redis_wc_ready opens the settle connection when it is closed;
 * tm_redis_wc_lost closes it after a failure (settle thread only). */
int tm_redis_wc_ready(struct tm_redis *rb, char *buf, size_t size);
void tm_redis_wc_lost(struct tm_redis *rb, const char *what,
                      const char *why);
const redisReply *tm_redis_reply_field(const redisReply *a,
                                       const char *key);
int tm_redis_id_cmp(const char *a, const char *b);
void tm_redis_id_next(const char *id, char *buf, size_t size);

/* ---- retry.c ---- */

void tm_redis_retry_push(struct tm_redis_task *rt,
                         const struct tm_redis_retry *e);
size_t tm_redis_retry_pop_due(struct tm_redis_task *rt, int64_t now,
                              size_t max, struct tm_redis_retry *out,
                              int64_t *next_ms);

/* ---- intake.c ---- */

void tm_redis_collect(struct tm_redis_task *rt);
int tm_redis_fetch(struct tm_broker *b, size_t ti, size_t max,
                   int timeout_ms, struct tm_batch **out);

/* ---- settle.c ---- */

size_t tm_redis_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n);

/* ---- upkeep.c ---- */

int64_t tm_redis_claim_period(const struct tm_cfg_task *t);
void tm_redis_tick(struct tm_broker *b);
int64_t tm_redis_tick_ms(struct tm_broker *b);

/* ---- admin.c ---- */

int tm_redis_depth(struct tm_broker *b, size_t ti, long long *depth,
                   long long *pending, long long *dlq_depth);
int tm_redis_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, int priority, char *id,
                     size_t idlen);
int tm_redis_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                      size_t max, struct tm_dlq_entry **out, size_t *n);
long tm_redis_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id);
long tm_redis_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *id);

#endif /* TASKMILL_REDIS_H */
