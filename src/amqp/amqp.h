/* amqp.h - private declarations of the RabbitMQ adapter (src/amqp/). */
#ifndef TASKMILL_AMQP_H
#define TASKMILL_AMQP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h> /* struct timeval: rabbitmq-c timeouts */

/* rabbitmq-c 0.12 moved its headers under rabbitmq-c/; Debian 12 ships
 * 0.11 with the old names. */
#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#else
#include <amqp.h>
#endif

#include "broker.h"

/* TM_AMQP_SRC prefixes the adapter's log lines. */
#define TM_AMQP_SRC "broker:amqp"

/* TCP connect timeout, and the timeout of the login handshake and of
 * every synchronous AMQP method (declare, qos, consume, get). */
#define TM_AMQP_CONNECT_TIMEOUT_MS 5000

#define TM_AMQP_RPC_TIMEOUT_MS 5000

/* Heartbeat of the consuming connections, in seconds. rabbitmq-c sends
 * one when nothing else was sent for this long; RabbitMQ drops a
 * connection silent for two intervals, and so does tm_amqp_pump. */
#define TM_AMQP_HEARTBEAT_S 30

#define TM_AMQP_FRAME_MAX 131072

/* How long a publisher confirm may take before the connection is
 * considered broken (the settle thread waits for it: it must stay well
 * under the daemon's 10 s liveness limit). */
#define TM_AMQP_CONFIRM_TIMEOUT_MS 5000

/* Frames read per pump, so that a busy socket cannot starve the rest. */
#define TM_AMQP_PUMP_MAX 4096

/* The dead-letter exchange shared by every task: direct, durable; each
 * task queue routes to it with its dead-letter queue's name as the key. */
#define TM_AMQP_DLX "taskmill.dlx"

/* The system CA bundle (Debian), used to verify amqps:// peers unless
 * TASKMILL_AMQP_CACERT names another file. */
#define TM_AMQP_CACERT_DEFAULT "/etc/ssl/certs/ca-certificates.crt"

/* AMQP short strings (names, ids) hold at most 255 bytes. */
#define TM_AMQP_SHORTSTR_MAX 255

/* The x-error header carries at most this much of the failure text. */
#define TM_AMQP_ERROR_HEADER_MAX 4096

/* Channels of a consuming connection. Replies have their own channel: a
 * reply to a requester that is gone may close it (direct reply-to), which
 * must not disturb consumption or dead-lettering. */
enum {
    TM_AMQP_CH_CONSUME = 1, /* basic.consume, acks and nacks */
    TM_AMQP_CH_PUB = 2,     /* confirm mode: dead letters, retries */
    TM_AMQP_CH_ADMIN = 3,   /* synchronous declarations */
    TM_AMQP_CH_REPLY = 4    /* confirm mode: request/reply answers */
};

/* Channels of the CLI connection. */
enum { TM_AMQP_CLI_PUB = 1, TM_AMQP_CLI_GET = 2 };

/* Confirm states of one publish. */
enum {
    TM_AMQP_WAITING = 0,
    TM_AMQP_ACKED = 1,
    TM_AMQP_NACKED = 2,
    TM_AMQP_LOST = 3
};

/*
 * struct tm_amqp_delivery is one message read from a task queue, copied out of
 * rabbitmq-c's frame buffers: ids, properties taskmill republishes, the
 * user headers (in its own pool) and the NUL-terminated body. It belongs
 * to the tm_msg (bctx) until settle() takes it into a record.
 */
struct tm_amqp_delivery {
    struct tm_amqp_delivery *next;  /* ready list */
    uint64_t tag;              /* delivery tag on TM_AMQP_CH_CONSUME */
    uint64_t gen;              /* connection it came on */
    unsigned attempt;          /* this run: runs before it + 1 */
    int has_priority;
    uint8_t priority;
    char *id;                  /* message_id, or one assigned */
    char *reply_to;            /* NULL when absent */
    char *correlation_id;      /* NULL when absent */
    char *content_type;        /* NULL when absent */
    amqp_table_t headers;      /* as received; empty when none */
    amqp_pool_t pool;          /* holds headers when has_pool */
    int has_pool;
    size_t body_len;
    size_t body_got;
    char *body;                /* body_len + 1 bytes */
    char mem[];                /* storage of the strings and the body */
};

/*
 * struct tm_amqp_rec is one settlement handed over by settle(): what to do
 * with a delivery, done in one round with the others of its batch, under
 * the task connection's lock (see tm_amqp_flush).
 * Plain acks carry only the tag; the rest own the delivery and texts.
 */
struct tm_amqp_rec {
    enum tm_settle settle;
    enum tm_outcome outcome;
    uint64_t tag;
    uint64_t gen;
    unsigned attempt;
    int64_t delay_ms;
    int64_t failed_at;         /* epoch ms */
    char *error;               /* owned, or NULL */
    char *result;              /* owned, or NULL */
    size_t result_len;
    struct tm_amqp_delivery *d;     /* owned, or NULL for a plain ack */
    /* used while flushing */
    const char *rk;            /* queue the copy went to */
    uint64_t seq;              /* confirm sequence on TM_AMQP_CH_PUB, 0 none */
    uint64_t rseq;             /* confirm sequence on TM_AMQP_CH_REPLY */
    int returned;              /* the broker could not route the copy */
    char copy_id[40];          /* message id of the dead-letter copy */
    int stale;                 /* from a connection since lost */
};

struct tm_amqp_recvec {
    struct tm_amqp_rec *v;
    size_t n, cap;
};

/* struct tm_amqp_pub tracks publisher confirms of one confirm-mode channel
 * for the current round: sequence numbers [lo, next_seq). */
struct tm_amqp_pub {
    amqp_channel_t ch;
    int open;
    uint64_t next_seq;         /* the broker numbers publishes from 1 */
    uint64_t lo;
    unsigned char *st;         /* per sequence since lo */
    size_t cap;
    size_t waiting;
};

/*
 * struct tm_amqp_acks keeps the multiple-ack floor of the consume channel:
 * every delivery tag <= floor is settled (acked or nacked); above holds
 * the settled tags beyond it, sorted. One basic.ack with multiple=1 then
 * covers a run of in-order completions.
 */
struct tm_amqp_acks {
    uint64_t floor;
    uint64_t *above;
    size_t n, cap;
};

/* struct tm_amqp_level is a retry queue declared on the current connection. */
struct tm_amqp_level {
    int64_t ms;
    char *name;
};

struct tm_amqp_broker;

/*
 * struct tm_amqp_task is one task's connection and what hangs on it. io_mu is
 * held by whichever thread does I/O on the connection, briefly: the
 * task's intake thread inside fetch() (not while it connects or waits),
 * the settle thread in settle() and tick(), the main thread in connect()
 * and wake(). Everything below io_mu is guarded by it; pending by q_mu.
 */
struct tm_amqp_task {
    struct tm_amqp_broker *ab;
    const struct tm_cfg_task *cfg;
    size_t index;
    int efd;                      /* eventfd: deliveries read, or wake */

    pthread_mutex_t io_mu;
    amqp_connection_state_t conn; /* NULL while down */
    uint64_t gen;                 /* connection generation */
    int was_up;                   /* its loss is worth a warning */
    int counted_down;             /* counted in ab->ndown */
    int stopped;                  /* consumer cancelled after wake() */
    unsigned seen_wake;           /* intake: wake_seq last noticed */
    char consumer_tag[TM_AMQP_SHORTSTR_MAX + 1];
    char salt[17];                /* for ids assigned on this connection */
    struct tm_amqp_pub pub;            /* TM_AMQP_CH_PUB */
    struct tm_amqp_pub rpub;           /* TM_AMQP_CH_REPLY */
    struct tm_amqp_acks acks;
    struct tm_amqp_level *levels;
    size_t nlevels, caplevels;
    /* a delivery being received: deliver, then header, then body frames */
    int dlv_state;                /* 0 none, 1 header next, 2 body */
    uint64_t dlv_tag;
    struct tm_amqp_delivery *partial;
    struct tm_amqp_delivery *ready, *ready_tail;
    size_t nready;
    /* a returned message being skipped (basic.return, header, body) */
    int ret_state;                /* 0 none, 1 header next, 2 body */
    amqp_channel_t ret_ch;
    uint64_t ret_left;
    char ret_rk[TM_AMQP_SHORTSTR_MAX + 1];
    char ret_text[128];
    struct tm_amqp_recvec work;        /* the round being flushed */
    uint64_t *tags, *ntags;       /* flush scratch: acks, nacks */
    size_t tagcap;
    char errstr[512];
    uint64_t err_hash;            /* of the last reconnect failure logged */

    pthread_mutex_t q_mu;
    struct tm_amqp_recvec pending;     /* from settle(), not yet flushed */
    int touched;                  /* settle thread only */
};

struct tm_amqp_broker {
    struct tm_broker base;
    struct tm_amqp_task *tasks;
    size_t ntasks;
    atomic_uint wake_seq;         /* wake() calls */
    atomic_int ndown;             /* tasks without a connection */
    atomic_int ever_up;
    atomic_ullong gens;
    /* the CLI connection (publish, request, dlq): one thread */
    amqp_connection_state_t cli;
    uint64_t cli_seq;
    /* the monitoring connection (depth) */
    pthread_mutex_t depth_mu;
    amqp_connection_state_t dconn;
};

/* struct tm_amqp_hdrs builds a header table; entries point at the caller's
 * strings, valid until the publish call returns. */
struct tm_amqp_hdrs {
    amqp_table_entry_t *e;
    int n, cap;
};

#define TM_AMQP_FNV64_INIT 0xcbf29ce484222325ULL

/* conn.c */
const char *tm_amqp_strerror(amqp_rpc_reply_t r, char *buf, size_t size);
int tm_amqp_channel_error(amqp_rpc_reply_t r);
amqp_connection_state_t tm_amqp_open(const struct tm_amqp_broker *ab,
                                       const char *role, int heartbeat,
                                       char *buf, size_t size);
int tm_amqp_channel_closed_ok(amqp_connection_state_t c, amqp_channel_t ch);
int tm_amqp_reply_code(amqp_rpc_reply_t r);
void tm_amqp_close(amqp_connection_state_t c);
void tm_amqp_drop(amqp_connection_state_t c);
int tm_amqp_channel(amqp_connection_state_t c, amqp_channel_t ch,
                      int confirm, char *buf, size_t size);
struct timeval tm_amqp_tv_ms(int64_t ms);
/* topology.c */
int tm_amqp_declare(amqp_connection_state_t c, amqp_channel_t ch,
                      const struct tm_cfg_task *t, char *buf, size_t size,
                      int *perm);
const char *tm_amqp_retry_queue(struct tm_amqp_task *at, int64_t ms, char *buf,
                               size_t size, int *dead);
/* props.c */
const amqp_field_value_t *tm_amqp_table_get(const amqp_table_t *t,
                                           const char *key);
void tm_amqp_hdr_i64(struct tm_amqp_hdrs *h, const char *key, int64_t v);
amqp_table_t tm_amqp_hdr_table(const struct tm_amqp_hdrs *h);
amqp_bytes_t tm_amqp_bytes_of(const char *s);
void tm_amqp_uuid(char *buf, size_t size);
void tm_amqp_hdr_user(struct tm_amqp_hdrs *h, const amqp_table_t *src);
void tm_amqp_hdr_str(struct tm_amqp_hdrs *h, const char *key, const char *val,
                    size_t max);
void tm_amqp_new_message_props(amqp_basic_properties_t *p,
                              const struct tm_cfg_task *t, int priority,
                              const char *id);
char *tm_amqp_field_str(const amqp_field_value_t *v);
void tm_amqp_base_props(amqp_basic_properties_t *p,
                       const struct tm_amqp_delivery *d);
char *tm_amqp_bytes_dup(amqp_bytes_t b);
int tm_amqp_field_int(const amqp_field_value_t *v, long long *out);
uint64_t tm_amqp_fnv64(const void *p, size_t n, uint64_t h);
/* intake.c */
void tm_amqp_conn_lost(struct tm_amqp_task *at, const char *what);
int tm_amqp_pump(struct tm_amqp_task *at);
void tm_amqp_settle_tags(struct tm_amqp_task *at, const uint64_t *acks,
                        size_t na, const uint64_t *nacks, size_t nn,
                        int *err);
int tm_amqp_fetch(struct tm_broker *b, size_t ti, size_t max,
                    int timeout_ms, struct tm_batch **out);
void tm_amqp_signal_intake(struct tm_amqp_task *at);
int tm_amqp_task_connect(struct tm_amqp_task *at, int *perm);
void tm_amqp_delivery_free(struct tm_amqp_delivery *d);
int tm_amqp_serve(struct tm_amqp_task *at, const char *what);
void tm_amqp_wait_readable(struct tm_amqp_task *at, int64_t ms);
int tm_amqp_stop_consuming(struct tm_amqp_task *at);
void tm_amqp_conn_reset(struct tm_amqp_task *at);
/* settle.c */
size_t tm_amqp_settle(struct tm_broker *b, struct tm_msg **msgs,
                        size_t n);
void tm_amqp_tick(struct tm_broker *b);
void tm_amqp_recvec_clear(struct tm_amqp_recvec *rv);
int tm_amqp_flush(struct tm_amqp_task *at);
/* admin.c */
long tm_amqp_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id);
long tm_amqp_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id);
int tm_amqp_request(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority,
                      int64_t timeout_ms, char *id, size_t idlen,
                      char **reply, int *task_failed);
int tm_amqp_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority, char *id,
                      size_t idlen);
int tm_amqp_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n);
int tm_amqp_depth(struct tm_broker *b, size_t ti, long long *depth,
                    long long *pending, long long *dlq_depth);
/* publish.c */
int tm_amqp_wait_confirms(struct tm_amqp_task *at);
void tm_amqp_pub_reset(struct tm_amqp_pub *p, int open);
void tm_amqp_pub_lose_all(struct tm_amqp_pub *p);
void tm_amqp_returned_done(struct tm_amqp_task *at, const char *msgid);
void tm_amqp_pub_round(struct tm_amqp_pub *p);
void tm_amqp_pub_confirm(struct tm_amqp_pub *p, uint64_t tag, int multiple,
                        unsigned char st);
uint64_t tm_amqp_pub_send(struct tm_amqp_task *at, struct tm_amqp_pub *p,
                         const char *rk, const amqp_basic_properties_t *props,
                         const char *body, size_t len, int mandatory);
unsigned char tm_amqp_pub_state(const struct tm_amqp_pub *p, uint64_t seq);

#endif /* TASKMILL_AMQP_H */
