/* broker_amqp.c - the RabbitMQ (AMQP 0-9-1) adapter, on rabbitmq-c. */
#include "broker.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h> /* getrandom: message ids */
#include <sys/socket.h> /* shutdown: see ab_drop */
#include <sys/time.h>
#include <unistd.h>

/* rabbitmq-c 0.12 moved its headers under rabbitmq-c/; Debian 12 ships
 * 0.11 with the old names. */
#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

#include <cjson/cJSON.h>

#include "core.h" /* tm_retry_delay_ms: the retry queue of a delay */
#include "log.h"
#include "util.h"

#define SRC "broker:amqp"

/* TCP connect timeout, and the timeout of the login handshake and of
 * every synchronous AMQP method (declare, qos, consume, get). */
#define AB_CONNECT_TIMEOUT_MS 5000
#define AB_RPC_TIMEOUT_MS 5000
/* Heartbeat of the consuming connections, in seconds. rabbitmq-c sends
 * one when nothing else was sent for this long; RabbitMQ drops a
 * connection silent for two intervals, and so does ab_pump. */
#define AB_HEARTBEAT_S 30
#define AB_FRAME_MAX 131072
/* How long a publisher confirm may take before the connection is
 * considered broken (the settle thread waits for it: it must stay well
 * under the daemon's 10 s liveness limit). */
#define AB_CONFIRM_TIMEOUT_MS 5000
/* Frames read per pump, so that a busy socket cannot starve the rest. */
#define AB_PUMP_MAX 4096
/* The dead-letter exchange shared by every task: direct, durable; each
 * task queue routes to it with its dead-letter queue's name as the key. */
#define AB_DLX "taskmill.dlx"
/* The system CA bundle (Debian), used to verify amqps:// peers unless
 * TASKMILL_AMQP_CACERT names another file. */
#define AB_CACERT_DEFAULT "/etc/ssl/certs/ca-certificates.crt"
/* AMQP short strings (names, ids) hold at most 255 bytes. */
#define AB_SHORTSTR_MAX 255
/* The x-error header carries at most this much of the failure text. */
#define AB_ERROR_HEADER_MAX 4096

/* Channels of a consuming connection. Replies have their own channel: a
 * reply to a requester that is gone may close it (direct reply-to), which
 * must not disturb consumption or dead-lettering. */
enum {
    AB_CH_CONSUME = 1, /* basic.consume, acks and nacks */
    AB_CH_PUB = 2,     /* confirm mode: dead letters, retries */
    AB_CH_ADMIN = 3,   /* synchronous declarations */
    AB_CH_REPLY = 4    /* confirm mode: request/reply answers */
};

/* Channels of the CLI connection. */
enum { AB_CLI_PUB = 1, AB_CLI_GET = 2 };

/* ---- deliveries and settlement records ------------------------------ */

/*
 * struct ab_delivery is one message read from a task queue, copied out of
 * rabbitmq-c's frame buffers: ids, properties taskmill republishes, the
 * user headers (in its own pool) and the NUL-terminated body. It belongs
 * to the tm_msg (bctx) until settle() takes it into a record.
 */
struct ab_delivery {
    struct ab_delivery *next;  /* ready list */
    uint64_t tag;              /* delivery tag on AB_CH_CONSUME */
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

static void delivery_free(struct ab_delivery *d)
{
    if (d == NULL)
        return;
    if (d->has_pool)
        empty_amqp_pool(&d->pool);
    tm_free(d);
}

/*
 * struct ab_rec is one settlement handed over by settle(): what to do
 * with a delivery, done in one round with the others of its batch, under
 * the task connection's lock (see ab_flush).
 * Plain acks carry only the tag; the rest own the delivery and texts.
 */
struct ab_rec {
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
    struct ab_delivery *d;     /* owned, or NULL for a plain ack */
    /* used while flushing */
    const char *rk;            /* queue the copy went to */
    uint64_t seq;              /* confirm sequence on AB_CH_PUB, 0 none */
    uint64_t rseq;             /* confirm sequence on AB_CH_REPLY */
    int returned;              /* the broker could not route the copy */
    char copy_id[40];          /* message id of the dead-letter copy */
    int stale;                 /* from a connection since lost */
};

struct ab_recvec {
    struct ab_rec *v;
    size_t n, cap;
};

static void rec_clear(struct ab_rec *r)
{
    tm_free(r->error);
    tm_free(r->result);
    delivery_free(r->d);
    memset(r, 0, sizeof *r);
}

static void recvec_push(struct ab_recvec *rv, const struct ab_rec *r)
{
    if (rv->n == rv->cap) {
        rv->cap = rv->cap ? rv->cap * 2 : 64;
        rv->v = tm_realloc(rv->v, rv->cap * sizeof *rv->v);
    }
    rv->v[rv->n++] = *r;
}

static void recvec_clear(struct ab_recvec *rv)
{
    for (size_t i = 0; i < rv->n; i++)
        rec_clear(&rv->v[i]);
    rv->n = 0;
}

/* ---- per-connection trackers ---------------------------------------- */

/* Confirm states of one publish. */
enum { AB_WAITING = 0, AB_ACKED = 1, AB_NACKED = 2, AB_LOST = 3 };

/* struct ab_pub tracks publisher confirms of one confirm-mode channel
 * for the current round: sequence numbers [lo, next_seq). */
struct ab_pub {
    amqp_channel_t ch;
    int open;
    uint64_t next_seq;         /* the broker numbers publishes from 1 */
    uint64_t lo;
    unsigned char *st;         /* per sequence since lo */
    size_t cap;
    size_t waiting;
};

static void pub_reset(struct ab_pub *p, int open)
{
    p->open = open;
    p->next_seq = 1;
    p->lo = 1;
    p->waiting = 0;
}

static void pub_round(struct ab_pub *p)
{
    p->lo = p->next_seq;
    p->waiting = 0;
}

static void pub_confirm(struct ab_pub *p, uint64_t tag, int multiple,
                        unsigned char st)
{
    uint64_t from = multiple ? p->lo : tag;
    if (from < p->lo)
        from = p->lo;
    for (uint64_t s = from; s <= tag && s < p->next_seq; s++) {
        unsigned char *x = &p->st[s - p->lo];
        if (*x == AB_WAITING) {
            *x = st;
            p->waiting--;
        }
    }
}

static void pub_lose_all(struct ab_pub *p)
{
    for (uint64_t s = p->lo; s < p->next_seq; s++)
        if (p->st[s - p->lo] == AB_WAITING)
            p->st[s - p->lo] = AB_LOST;
    p->waiting = 0;
}

static unsigned char pub_state(const struct ab_pub *p, uint64_t seq)
{
    if (seq < p->lo || seq >= p->next_seq)
        return AB_LOST;
    return p->st[seq - p->lo];
}

/*
 * struct ab_acks keeps the multiple-ack floor of the consume channel:
 * every delivery tag <= floor is settled (acked or nacked); above holds
 * the settled tags beyond it, sorted. One basic.ack with multiple=1 then
 * covers a run of in-order completions.
 */
struct ab_acks {
    uint64_t floor;
    uint64_t *above;
    size_t n, cap;
};

/* struct ab_level is a retry queue declared on the current connection. */
struct ab_level {
    int64_t ms;
    char *name;
};

/* ---- the adapter ---------------------------------------------------- */

struct ab_broker;

/*
 * struct ab_task is one task's connection and what hangs on it. io_mu is
 * held by whichever thread does I/O on the connection, briefly: the
 * task's intake thread inside fetch() (not while it connects or waits),
 * the settle thread in settle() and tick(), the main thread in connect()
 * and wake(). Everything below io_mu is guarded by it; pending by q_mu.
 */
struct ab_task {
    struct ab_broker *ab;
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
    char consumer_tag[AB_SHORTSTR_MAX + 1];
    char salt[17];                /* for ids assigned on this connection */
    struct ab_pub pub;            /* AB_CH_PUB */
    struct ab_pub rpub;           /* AB_CH_REPLY */
    struct ab_acks acks;
    struct ab_level *levels;
    size_t nlevels, caplevels;
    /* a delivery being received: deliver, then header, then body frames */
    int dlv_state;                /* 0 none, 1 header next, 2 body */
    uint64_t dlv_tag;
    struct ab_delivery *partial;
    struct ab_delivery *ready, *ready_tail;
    size_t nready;
    /* a returned message being skipped (basic.return, header, body) */
    int ret_state;                /* 0 none, 1 header next, 2 body */
    amqp_channel_t ret_ch;
    uint64_t ret_left;
    char ret_rk[AB_SHORTSTR_MAX + 1];
    char ret_text[128];
    struct ab_recvec work;        /* the round being flushed */
    uint64_t *tags, *ntags;       /* flush scratch: acks, nacks */
    size_t tagcap;
    char errstr[512];
    uint64_t err_hash;            /* of the last reconnect failure logged */

    pthread_mutex_t q_mu;
    struct ab_recvec pending;     /* from settle(), not yet flushed */
    int touched;                  /* settle thread only */
};

struct ab_broker {
    struct tm_broker base;
    struct ab_task *tasks;
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

/* ---- errors ---------------------------------------------------------- */

/* ab_strerror describes a failed rabbitmq-c call: the library's status,
 * or the broker's close reason ("406 PRECONDITION_FAILED - ..."), as
 * collectd's camqp_strerror does. Returns buf. */
static const char *ab_strerror(amqp_rpc_reply_t r, char *buf, size_t size)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        tm_snprintf(buf, size, "success");
        break;
    case AMQP_RESPONSE_NONE:
        tm_snprintf(buf, size, "no reply from the broker");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        tm_snprintf(buf, size, "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *m = r.reply.decoded;
            tm_snprintf(buf, size, "connection closed by the broker: %u %.*s",
                        m->reply_code, (int)m->reply_text.len,
                        (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = r.reply.decoded;
            tm_snprintf(buf, size, "%u %.*s", m->reply_code,
                        (int)m->reply_text.len,
                        (const char *)m->reply_text.bytes);
        } else {
            tm_snprintf(buf, size, "unexpected broker method %s",
                        amqp_method_name(r.reply.id));
        }
        break;
    }
    return buf;
}

/* reply_code returns the broker's code of a channel or connection close
 * (404, 406, ...), or 0. */
static int reply_code(amqp_rpc_reply_t r)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION)
        return 0;
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
        return ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
        return ((const amqp_connection_close_t *)r.reply.decoded)
            ->reply_code;
    return 0;
}

/* channel_error returns 1 when r closed only its channel: the connection
 * is still usable once the close is answered (see channel_closed_ok). */
static int channel_error(amqp_rpc_reply_t r)
{
    return r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
           r.reply.id == AMQP_CHANNEL_CLOSE_METHOD;
}

static int channel_closed_ok(amqp_connection_state_t c, amqp_channel_t ch)
{
    amqp_channel_close_ok_t ok;
    memset(&ok, 0, sizeof ok);
    return amqp_send_method(c, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
}

/* ---- small helpers ---------------------------------------------------- */

static amqp_bytes_t bytes_of(const char *s)
{
    return amqp_cstring_bytes(s != NULL ? s : "");
}

static char *bytes_dup(amqp_bytes_t b)
{
    return tm_strndup(b.len > 0 ? (const char *)b.bytes : "", b.len);
}

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* ab_uuid writes a random (version 4) UUID into buf (37 bytes). */
static void ab_uuid(char *buf, size_t size)
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t a = tm_rand64() ^ (uint64_t)tm_now_ns(), b = tm_rand64();
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 8);
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    tm_snprintf(buf, size,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
                r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* fnv64 hashes bytes (FNV-1a): names too long for AMQP, ids of
 * dead letters that carry none. */
static uint64_t fnv64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

#define FNV64_INIT 0xcbf29ce484222325ULL

/* ---- header tables ---------------------------------------------------- */

static const amqp_field_value_t *table_get(const amqp_table_t *t,
                                           const char *key)
{
    size_t klen = strlen(key);
    for (int i = 0; t != NULL && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == klen && memcmp(e->key.bytes, key, klen) == 0)
            return &e->value;
    }
    return NULL;
}

/* field_int reads an integer header of any integer kind (or a decimal
 * string). Returns 0, or -1 when v is absent or not a number. */
static int field_int(const amqp_field_value_t *v, long long *out)
{
    if (v == NULL)
        return -1;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return 0;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return 0;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return 0;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return 0;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return 0;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return 0;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return 0;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        *out = v->value.u64 > (uint64_t)LLONG_MAX ? LLONG_MAX
                                                  : (long long)v->value.u64;
        return 0;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES: {
        char buf[24];
        if (v->value.bytes.len == 0 || v->value.bytes.len >= sizeof buf)
            return -1;
        memcpy(buf, v->value.bytes.bytes, v->value.bytes.len);
        buf[v->value.bytes.len] = '\0';
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, 10);
        if (errno != 0 || *end != '\0')
            return -1;
        *out = x;
        return 0;
    }
    default:
        return -1;
    }
}

/* field_str returns a copy of a string header, or NULL. */
static char *field_str(const amqp_field_value_t *v)
{
    if (v == NULL || (v->kind != AMQP_FIELD_KIND_UTF8 &&
                      v->kind != AMQP_FIELD_KIND_BYTES))
        return NULL;
    return bytes_dup(v->value.bytes);
}

/* taskmill_header says whether a header is one taskmill sets, or one
 * RabbitMQ adds when it dead-letters: dropped when a message is
 * republished (retry, dead letter, replay), then set again as needed. */
static int taskmill_header(amqp_bytes_t key)
{
    static const char *const exact[] = {
        "x-attempts", "x-task", "x-error", "x-failed-at", "x-origin-id",
        "x-outcome", "x-last-error", "x-death", "x-delivery-count",
    };
    static const char *const prefix[] = {"x-first-death-",
                                         "x-last-death-"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (key.len == strlen(exact[i]) &&
            memcmp(key.bytes, exact[i], key.len) == 0)
            return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++) {
        size_t n = strlen(prefix[i]);
        if (key.len >= n && memcmp(key.bytes, prefix[i], n) == 0)
            return 1;
    }
    return 0;
}

/* struct ab_hdrs builds a header table; entries point at the caller's
 * strings, valid until the publish call returns. */
struct ab_hdrs {
    amqp_table_entry_t *e;
    int n, cap;
};

static amqp_table_entry_t *hdr_add(struct ab_hdrs *h, const char *key)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->e = tm_realloc(h->e, (size_t)h->cap * sizeof *h->e);
    }
    amqp_table_entry_t *e = &h->e[h->n++];
    memset(e, 0, sizeof *e);
    e->key = amqp_cstring_bytes(key);
    return e;
}

static void hdr_str(struct ab_hdrs *h, const char *key, const char *val,
                    size_t max)
{
    amqp_table_entry_t *e = hdr_add(h, key);
    size_t n = strlen(val);
    if (n > max) {
        /* cut on a UTF-8 character boundary */
        n = max;
        while (n > 0 && ((unsigned char)val[n] & 0xC0) == 0x80)
            n--;
    }
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes.len = n;
    e->value.value.bytes.bytes = (void *)(uintptr_t)val;
}

static void hdr_i64(struct ab_hdrs *h, const char *key, int64_t v)
{
    amqp_table_entry_t *e = hdr_add(h, key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = v;
}

/* hdr_user copies the headers of src that are not taskmill's own. */
static void hdr_user(struct ab_hdrs *h, const amqp_table_t *src)
{
    for (int i = 0; src != NULL && i < src->num_entries; i++) {
        if (taskmill_header(src->entries[i].key))
            continue;
        hdr_add(h, "");
        h->e[h->n - 1] = src->entries[i];
    }
}

static amqp_table_t hdr_table(const struct ab_hdrs *h)
{
    amqp_table_t t = {.num_entries = h->n, .entries = h->e};
    return t;
}

/* ---- connections ------------------------------------------------------ */

static int env_false(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && (strcmp(v, "0") == 0 || strcmp(v, "no") == 0 ||
                         strcmp(v, "false") == 0 || strcmp(v, "off") == 0);
}

/* ab_drop closes a connection without a goodbye. shutdown(2) first: a
 * forked worker may hold a copy of the socket, and RabbitMQ must see the
 * connection end now to redeliver what it holds. */
static void ab_drop(amqp_connection_state_t c)
{
    if (c == NULL)
        return;
    int fd = amqp_get_sockfd(c);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    amqp_destroy_connection(c);
}

/* ab_close closes a connection politely (connection.close), briefly. */
static void ab_close(amqp_connection_state_t c)
{
    if (c == NULL)
        return;
    struct timeval tv = tv_ms(2000);
    amqp_set_rpc_timeout(c, &tv);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    ab_drop(c);
}

/*
 * ab_open connects and logs in to the broker of cfg->url: TCP or TLS
 * (amqps://, verifying the peer against the system CA bundle unless
 * TASKMILL_AMQP_CACERT names another, or TASKMILL_AMQP_TLS_VERIFY=0),
 * user and password guest/guest when the URL has none. role names the
 * connection in RabbitMQ's management UI. heartbeat in seconds, 0 none.
 * Returns the connection, or NULL with the reason in buf.
 */
static amqp_connection_state_t ab_open(const struct ab_broker *ab,
                                       const char *role, int heartbeat,
                                       char *buf, size_t size)
{
    const struct tm_url *u = &ab->base.cfg->url;
    char eb[256];
    amqp_connection_state_t c = amqp_new_connection();
    if (c == NULL) {
        tm_snprintf(buf, size, "%s: out of memory", u->redacted);
        return NULL;
    }
    amqp_socket_t *s;
    if (u->tls) {
        s = amqp_ssl_socket_new(c);
        if (s == NULL) {
            tm_snprintf(buf, size, "%s: cannot create a TLS socket",
                        u->redacted);
            goto fail;
        }
        int verify = !env_false("TASKMILL_AMQP_TLS_VERIFY");
        amqp_ssl_socket_set_verify_peer(s, verify);
        amqp_ssl_socket_set_verify_hostname(s, verify);
        const char *ca = getenv("TASKMILL_AMQP_CACERT");
        if (ca == NULL || ca[0] == '\0')
            ca = verify ? AB_CACERT_DEFAULT : NULL;
        if (ca != NULL) {
            int rc = amqp_ssl_socket_set_cacert(s, ca);
            if (rc != AMQP_STATUS_OK) {
                tm_snprintf(buf, size, "%s: cannot load the CA certificates "
                            "%s: %s", u->redacted, ca,
                            amqp_error_string2(rc));
                goto fail;
            }
        }
        const char *cert = getenv("TASKMILL_AMQP_CERT");
        const char *key = getenv("TASKMILL_AMQP_KEY");
        if (cert != NULL && cert[0] != '\0') {
            int rc = amqp_ssl_socket_set_key(s, cert,
                                             key != NULL && key[0] != '\0'
                                                 ? key
                                                 : cert);
            if (rc != AMQP_STATUS_OK) {
                tm_snprintf(buf, size, "%s: cannot load the client "
                            "certificate %s: %s", u->redacted, cert,
                            amqp_error_string2(rc));
                goto fail;
            }
        }
    } else {
        s = amqp_tcp_socket_new(c);
        if (s == NULL) {
            tm_snprintf(buf, size, "%s: cannot create a socket",
                        u->redacted);
            goto fail;
        }
    }
    struct timeval tv = tv_ms(AB_CONNECT_TIMEOUT_MS);
    int rc = amqp_socket_open_noblock(s, u->host, u->port, &tv);
    if (rc != AMQP_STATUS_OK) {
        /* rabbitmq-c keeps no errno for a failed connect */
        tm_snprintf(buf, size, "cannot connect to %s: %s%s", u->redacted,
                    amqp_error_string2(rc),
                    rc == AMQP_STATUS_SOCKET_ERROR
                        ? " (refused or unreachable: is RabbitMQ listening "
                          "there?)"
                        : "");
        goto fail;
    }
    tv = tv_ms(AB_RPC_TIMEOUT_MS);
    amqp_set_handshake_timeout(c, &tv);
    amqp_set_rpc_timeout(c, &tv);

    char name[300];
    tm_snprintf(name, sizeof name, "taskmill %s %s",
                ab->base.cfg->instance ? ab->base.cfg->instance : "", role);
    amqp_table_entry_t caps[3];
    const char *capnames[3] = {"consumer_cancel_notify", "connection.blocked",
                               "publisher_confirms"};
    for (int i = 0; i < 3; i++) {
        memset(&caps[i], 0, sizeof caps[i]);
        caps[i].key = amqp_cstring_bytes(capnames[i]);
        caps[i].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        caps[i].value.value.boolean = 1;
    }
    amqp_table_entry_t props[3];
    memset(props, 0, sizeof props);
    props[0].key = amqp_cstring_bytes("connection_name");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes(name);
    props[1].key = amqp_cstring_bytes("taskmill_version");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = amqp_cstring_bytes(TM_VERSION);
    props[2].key = amqp_cstring_bytes("capabilities");
    props[2].value.kind = AMQP_FIELD_KIND_TABLE;
    props[2].value.value.table.num_entries = 3;
    props[2].value.value.table.entries = caps;
    amqp_table_t ptable = {.num_entries = 3, .entries = props};
    const char *user = u->user != NULL ? u->user : "guest";
    const char *pass = u->password != NULL ? u->password : "guest";
    amqp_rpc_reply_t r = amqp_login_with_properties(
        c, u->vhost != NULL ? u->vhost : "/", 0, AB_FRAME_MAX, heartbeat,
        &ptable, AMQP_SASL_METHOD_PLAIN, user, pass);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "%s: login as '%s' to vhost '%s' failed: %s",
                    u->redacted, user, u->vhost ? u->vhost : "/",
                    ab_strerror(r, eb, sizeof eb));
        goto fail;
    }
    return c;
fail:
    ab_drop(c);
    return NULL;
}

/* ab_channel opens channel ch, in confirm mode when asked. */
static int ab_channel(amqp_connection_state_t c, amqp_channel_t ch,
                      int confirm, char *buf, size_t size)
{
    char eb[256];
    amqp_channel_open(c, ch);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "channel.open: %s",
                    ab_strerror(r, eb, sizeof eb));
        return -1;
    }
    if (confirm) {
        amqp_confirm_select(c, ch);
        r = amqp_get_rpc_reply(c);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(buf, size, "confirm.select: %s",
                        ab_strerror(r, eb, sizeof eb));
            return -1;
        }
    }
    return 0;
}

/* inequivalent shortens RabbitMQ's "406 PRECONDITION_FAILED - inequivalent
 * arg 'A' for queue 'Q' in vhost 'V': received X but current is Y" to
 * "inequivalent arg 'A': received X but current is Y" (in place), so that
 * the argument's name survives in a one-line error. */
static const char *inequivalent(char *text)
{
    char *arg = strstr(text, "inequivalent arg '");
    if (arg == NULL)
        return text;
    char *name_end = strchr(arg + strlen("inequivalent arg '"), '\'');
    char *rest = name_end != NULL ? strstr(name_end, "': ") : NULL;
    if (rest == NULL)
        return arg;
    memmove(name_end + 1, rest + 1, strlen(rest + 1) + 1);
    return arg;
}

/*
 * ab_declare declares, idempotently and durably, the task's topology on
 * channel ch: the shared dead-letter exchange, the task's dead-letter
 * queue bound to it by its own name, and the task queue, whose rejected
 * or expired messages go there (x-dead-letter-exchange) and which has
 * x-max-priority when configured. An existing queue or exchange with
 * other arguments makes the broker refuse (406 PRECONDITION_FAILED,
 * naming the argument); then *perm is set. Nothing is ever deleted.
 */
static int ab_declare(amqp_connection_state_t c, amqp_channel_t ch,
                      const struct tm_cfg_task *t, char *buf, size_t size,
                      int *perm)
{
    char eb[300], what[300];
    amqp_rpc_reply_t r;
    *perm = 0;

    tm_snprintf(what, sizeof what, "exchange '%s'", AB_DLX);
    amqp_exchange_declare(c, ch, amqp_cstring_bytes(AB_DLX),
                          amqp_cstring_bytes("direct"), /* passive = */ 0,
                          /* durable = */ 1, /* auto_delete = */ 0,
                          /* internal = */ 0, amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "dead-letter queue '%s'", t->dead_letter);
    amqp_queue_declare(c, ch, amqp_cstring_bytes(t->dead_letter),
                       /* passive = */ 0, /* durable = */ 1,
                       /* exclusive = */ 0, /* auto_delete = */ 0,
                       amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    amqp_queue_bind(c, ch, amqp_cstring_bytes(t->dead_letter),
                    amqp_cstring_bytes(AB_DLX),
                    amqp_cstring_bytes(t->dead_letter), amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;

    tm_snprintf(what, sizeof what, "queue '%s'", t->queue);
    amqp_table_entry_t args[3];
    int n = 0;
    memset(args, 0, sizeof args);
    args[n].key = amqp_cstring_bytes("x-dead-letter-exchange");
    args[n].value.kind = AMQP_FIELD_KIND_UTF8;
    args[n++].value.value.bytes = amqp_cstring_bytes(AB_DLX);
    args[n].key = amqp_cstring_bytes("x-dead-letter-routing-key");
    args[n].value.kind = AMQP_FIELD_KIND_UTF8;
    args[n++].value.value.bytes = amqp_cstring_bytes(t->dead_letter);
    if (t->max_priority > 0) {
        args[n].key = amqp_cstring_bytes("x-max-priority");
        args[n].value.kind = AMQP_FIELD_KIND_I32;
        args[n++].value.value.i32 = t->max_priority;
    }
    amqp_table_t at = {.num_entries = n, .entries = args};
    amqp_queue_declare(c, ch, amqp_cstring_bytes(t->queue), 0, 1, 0, 0, at);
    r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        goto fail;
    return 0;

fail:
    ab_strerror(r, eb, sizeof eb);
    if (reply_code(r) == AMQP_PRECONDITION_FAILED) {
        *perm = 1;
        tm_snprintf(buf, size, "task '%s': %s exists with other arguments: "
                    "%s (406 PRECONDITION_FAILED); taskmill never changes "
                    "or deletes it", t->name, what, inequivalent(eb));
    } else {
        tm_snprintf(buf, size, "task '%s': cannot declare %s: %s", t->name,
                    what, eb);
    }
    return -1;
}

/* ---- up/down accounting ----------------------------------------------- */

/* The broker is up while every task has its connection; the reconnect
 * counter counts recoveries after a loss. */
static void task_up(struct ab_task *at)
{
    struct ab_broker *ab = at->ab;
    if (!at->counted_down)
        return;
    at->counted_down = 0;
    if (atomic_fetch_sub(&ab->ndown, 1) == 1) {
        if (atomic_exchange(&ab->base.up, 1) == 0 &&
            atomic_load(&ab->ever_up))
            atomic_fetch_add(&ab->base.reconnects, 1);
        atomic_store(&ab->ever_up, 1);
    }
}

static void task_down(struct ab_task *at)
{
    struct ab_broker *ab = at->ab;
    if (at->counted_down)
        return;
    at->counted_down = 1;
    atomic_fetch_add(&ab->ndown, 1);
    atomic_store(&ab->base.up, 0);
}

/* ---- a task's connection ---------------------------------------------- */

static void ready_push(struct ab_task *at, struct ab_delivery *d)
{
    d->next = NULL;
    if (at->ready_tail != NULL)
        at->ready_tail->next = d;
    else
        at->ready = d;
    at->ready_tail = d;
    at->nready++;
}

static struct ab_delivery *ready_pop(struct ab_task *at)
{
    struct ab_delivery *d = at->ready;
    if (d != NULL) {
        at->ready = d->next;
        if (at->ready == NULL)
            at->ready_tail = NULL;
        at->nready--;
        d->next = NULL;
    }
    return d;
}

/* conn_reset forgets everything tied to the connection (which is gone):
 * unacknowledged deliveries are redelivered by RabbitMQ. */
static void conn_reset(struct ab_task *at)
{
    struct ab_delivery *d;
    while ((d = ready_pop(at)) != NULL)
        delivery_free(d);
    delivery_free(at->partial);
    at->partial = NULL;
    at->dlv_state = 0;
    at->ret_state = 0;
    at->acks.floor = 0;
    at->acks.n = 0;
    pub_reset(&at->pub, 0);
    pub_reset(&at->rpub, 0);
    for (size_t i = 0; i < at->nlevels; i++)
        tm_free(at->levels[i].name);
    at->nlevels = 0;
    at->stopped = 0;
    /* settlements of the lost connection cannot be done any more */
    pthread_mutex_lock(&at->q_mu);
    recvec_clear(&at->pending);
    pthread_mutex_unlock(&at->q_mu);
}

/* conn_lost drops the task's connection after an error in at->errstr. */
static void conn_lost(struct ab_task *at, const char *what)
{
    if (at->was_up)
        tm_log_write(TM_LOG_WARNING, SRC, at->cfg->name, NULL,
                     "%s: %s; reconnecting (RabbitMQ redelivers what was "
                     "not acknowledged)", what, at->errstr);
    at->was_up = 0;
    task_down(at);
    ab_drop(at->conn);
    at->conn = NULL;
    conn_reset(at);
}

/* ab_consume sets the prefetch and starts the task's consumer (manual
 * acks) on c; its consumer tag is written to ctag (AB_SHORTSTR_MAX + 1
 * bytes). */
static int ab_consume(const struct ab_task *at, amqp_connection_state_t c,
                      char *ctag, char *buf, size_t size)
{
    const struct tm_cfg_task *t = at->cfg;
    char eb[256], tag[AB_SHORTSTR_MAX + 1];
    amqp_basic_qos(c, AB_CH_CONSUME, /* prefetch_size = */ 0,
                   (uint16_t)t->prefetch, /* global = */ 0);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.qos: %s",
                    ab_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(tag, sizeof tag, "taskmill.%s.%s.%llu",
                at->ab->base.cfg->instance ? at->ab->base.cfg->instance : "",
                t->name, (unsigned long long)tm_rand64() % 1000000);
    amqp_basic_consume_ok_t *ok = amqp_basic_consume(
        c, AB_CH_CONSUME, amqp_cstring_bytes(t->queue),
        amqp_cstring_bytes(tag), /* no_local = */ 0, /* no_ack = */ 0,
        /* exclusive = */ 0, amqp_empty_table);
    r = amqp_get_rpc_reply(c);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "basic.consume '%s': %s", t->queue,
                    ab_strerror(r, eb, sizeof eb));
        return -1;
    }
    tm_snprintf(ctag, AB_SHORTSTR_MAX + 1, "%.*s",
                (int)ok->consumer_tag.len,
                (const char *)ok->consumer_tag.bytes);
    return 0;
}

/*
 * task_open opens a connection for the task: channels, topology, qos
 * (prefetch) and the consumer with manual acks. It touches no shared
 * state, so it runs without io_mu (a slow connect must not hold up the
 * settle thread). Returns the connection, or NULL with the reason in buf
 * (and *perm set when the broker refused the topology).
 */
static amqp_connection_state_t task_open(const struct ab_task *at,
                                         char *ctag, char *buf, size_t size,
                                         int *perm)
{
    const struct tm_cfg_task *t = at->cfg;
    char role[300];
    *perm = 0;
    tm_snprintf(role, sizeof role, "task %s", t->name);
    amqp_connection_state_t c = ab_open(at->ab, role, AB_HEARTBEAT_S, buf,
                                        size);
    if (c == NULL)
        return NULL;
    if (ab_channel(c, AB_CH_CONSUME, 0, buf, size) != 0 ||
        ab_channel(c, AB_CH_PUB, 1, buf, size) != 0 ||
        ab_channel(c, AB_CH_ADMIN, 0, buf, size) != 0 ||
        ab_declare(c, AB_CH_ADMIN, t, buf, size, perm) != 0 ||
        ab_consume(at, c, ctag, buf, size) != 0) {
        ab_drop(c);
        return NULL;
    }
    return c;
}

/* task_install makes c the task's connection (io_mu held). */
static void task_install(struct ab_task *at, amqp_connection_state_t c,
                         const char *ctag)
{
    const struct tm_cfg_task *t = at->cfg;
    at->conn = c;
    tm_snprintf(at->consumer_tag, sizeof at->consumer_tag, "%s", ctag);
    at->gen = atomic_fetch_add(&at->ab->gens, 1) + 1;
    tm_snprintf(at->salt, sizeof at->salt, "%016llx",
                (unsigned long long)(tm_rand64() ^ at->gen));
    at->salt[8] = '\0';
    conn_reset(at);
    pub_reset(&at->pub, 1);
    tm_log_write(TM_LOG_INFO, SRC, t->name, NULL, "consuming queue '%s' "
                 "(prefetch %u; dead letters to '%s')", t->queue,
                 t->prefetch, t->dead_letter);
    at->was_up = 1;
    at->err_hash = 0;
    task_up(at);
}

/* task_connect opens and installs the task's connection; io_mu is held
 * on entry and on return, but not while connecting. */
static int task_connect(struct ab_task *at, int *perm)
{
    char eb[512], ctag[AB_SHORTSTR_MAX + 1];
    pthread_mutex_unlock(&at->io_mu);
    amqp_connection_state_t c = task_open(at, ctag, eb, sizeof eb, perm);
    pthread_mutex_lock(&at->io_mu);
    if (c == NULL) {
        tm_snprintf(at->errstr, sizeof at->errstr, "%s", eb);
        return -1;
    }
    if (at->conn != NULL) {
        /* another thread connected meanwhile */
        ab_close(c);
        return 0;
    }
    task_install(at, c, ctag);
    return 0;
}

/* ---- reading frames ---------------------------------------------------- */

static void settle_tags(struct ab_task *at, const uint64_t *acks,
                        size_t na, const uint64_t *nacks, size_t nn,
                        int *err);

/* delivery_start makes the delivery of the deliver + header frames. */
static struct ab_delivery *delivery_start(struct ab_task *at,
                                          const amqp_frame_t *f)
{
    const amqp_basic_properties_t *p = f->payload.properties.decoded;
    uint64_t size = f->payload.properties.body_size;
    char assigned[64] = "";
    amqp_bytes_t none = {0, NULL};
    amqp_bytes_t mid = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                           ? p->message_id
                           : none;
    amqp_bytes_t rto = (p->_flags & AMQP_BASIC_REPLY_TO_FLAG) ? p->reply_to
                                                                : none;
    amqp_bytes_t cid = (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
                           ? p->correlation_id
                           : none;
    amqp_bytes_t cty = (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
                           ? p->content_type
                           : none;
    if (mid.len == 0 || memchr(mid.bytes, '\0', mid.len) != NULL) {
        tm_snprintf(assigned, sizeof assigned, "amqp-%llu-%s",
                    (unsigned long long)at->dlv_tag, at->salt);
        mid.len = strlen(assigned);
        mid.bytes = assigned;
    }
    if (size >= SIZE_MAX / 2)
        return NULL;
    size_t need = mid.len + 1 + rto.len + 1 + cid.len + 1 + cty.len + 1 +
                  (size_t)size + 1;
    /* the body is written by the body frames: no need to zero it */
    struct ab_delivery *d = tm_malloc(sizeof *d + need);
    memset(d, 0, sizeof *d);
    char *w = d->mem;
#define AB_COPY(field, b)                         \
    do {                                          \
        d->field = w;                             \
        if ((b).len > 0)                          \
            memcpy(w, (b).bytes, (b).len);        \
        w[(b).len] = '\0';                        \
        w += (b).len + 1;                         \
    } while (0)
    AB_COPY(id, mid);
    AB_COPY(reply_to, rto);
    AB_COPY(correlation_id, cid);
    AB_COPY(content_type, cty);
#undef AB_COPY
    if (rto.len == 0)
        d->reply_to = NULL;
    if (cid.len == 0)
        d->correlation_id = NULL;
    if (cty.len == 0)
        d->content_type = NULL;
    d->body = w;
    d->body_len = (size_t)size;
    d->tag = at->dlv_tag;
    d->gen = at->gen;
    if (p->_flags & AMQP_BASIC_PRIORITY_FLAG) {
        d->has_priority = 1;
        d->priority = p->priority;
    }
    long long runs = 0, redeliveries = 0;
    if ((p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0) {
        init_amqp_pool(&d->pool, 1024);
        d->has_pool = 1;
        if (amqp_table_clone(&p->headers, &d->headers, &d->pool) !=
            AMQP_STATUS_OK)
            memset(&d->headers, 0, sizeof d->headers);
        /* x-attempts: runs so far (set by retries); x-delivery-count:
         * redeliveries counted by quorum queues */
        if (field_int(table_get(&p->headers, "x-attempts"), &runs) != 0 ||
            runs < 0)
            runs = 0;
        if (field_int(table_get(&p->headers, "x-delivery-count"),
                      &redeliveries) != 0 ||
            redeliveries < 0)
            redeliveries = 0;
    }
    long long attempt = runs + redeliveries + 1;
    d->attempt = attempt > 1000000000LL ? 1000000000U : (unsigned)attempt;
    return d;
}

static void delivery_done(struct ab_task *at)
{
    struct ab_delivery *d = at->partial;
    at->partial = NULL;
    at->dlv_state = 0;
    d->body[d->body_len] = '\0';
    if (at->stopped) {
        /* consumption was cancelled (wake): give it back at once */
        int err = 0;
        settle_tags(at, NULL, 0, &d->tag, 1, &err);
        delivery_free(d);
        return;
    }
    ready_push(at, d);
}

/* returned_done matches a message the broker could not route (mandatory
 * publish: the dead-letter or retry queue is gone) with its record. */
static void returned_done(struct ab_task *at, const char *msgid)
{
    at->ret_state = 0;
    for (size_t i = 0; i < at->work.n; i++) {
        struct ab_rec *r = &at->work.v[i];
        if (r->returned || r->rk == NULL || r->d == NULL ||
            strcmp(r->rk, at->ret_rk) != 0 ||
            (msgid != NULL &&
             strcmp(r->settle == TM_SETTLE_DEAD ? r->copy_id : r->d->id,
                    msgid) != 0))
            continue;
        r->returned = 1;
        tm_log_write(TM_LOG_ERR, SRC, at->cfg->name, r->d->id,
                     "RabbitMQ could not route the %s copy to '%s' (%s); "
                     "the message stays in the queue and is delivered "
                     "again", r->settle == TM_SETTLE_DEAD ? "dead-letter"
                                                          : "retry",
                     at->ret_rk, at->ret_text);
        return;
    }
    tm_log_write(TM_LOG_WARNING, SRC, at->cfg->name, msgid,
                 "RabbitMQ returned a message sent to '%s' (%s)", at->ret_rk,
                 at->ret_text);
}

static int on_method(struct ab_task *at, amqp_channel_t ch,
                     const amqp_method_t *m)
{
    switch (m->id) {
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *x = m->decoded;
        tm_snprintf(at->errstr, sizeof at->errstr,
                    "connection closed by the broker: %u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        amqp_connection_close_ok_t ok;
        memset(&ok, 0, sizeof ok);
        amqp_send_method(at->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        return -1;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        const amqp_connection_blocked_t *x = m->decoded;
        tm_log_write(TM_LOG_WARNING, SRC, at->cfg->name, NULL,
                     "RabbitMQ blocks publishing (%.*s): dead letters, "
                     "retries and replies wait", (int)x->reason.len,
                     (const char *)x->reason.bytes);
        return 0;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        tm_log_write(TM_LOG_INFO, SRC, at->cfg->name, NULL,
                     "RabbitMQ accepts publishing again");
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *x = m->decoded;
        if (ch == AB_CH_REPLY) {
            /* a reply the broker refused (e.g. the direct reply-to
             * consumer is gone): the requester gets nothing, the rest
             * goes on; the channel is opened again when needed */
            tm_log_write(TM_LOG_WARNING, SRC, at->cfg->name, NULL,
                         "reply not delivered: %u %.*s", x->reply_code,
                         (int)x->reply_text.len,
                         (const char *)x->reply_text.bytes);
            channel_closed_ok(at->conn, ch);
            pub_lose_all(&at->rpub);
            at->rpub.open = 0;
            if (at->ret_state != 0 && at->ret_ch == ch)
                at->ret_state = 0;
            return 0;
        }
        tm_snprintf(at->errstr, sizeof at->errstr,
                    "channel %u closed by the broker: %u %.*s", ch,
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return -1;
    }
    case AMQP_BASIC_DELIVER_METHOD: {
        const amqp_basic_deliver_t *x = m->decoded;
        if (ch != AB_CH_CONSUME)
            return 0;
        if (at->dlv_state != 0) {
            tm_snprintf(at->errstr, sizeof at->errstr, "protocol error: a "
                        "delivery started inside another");
            return -1;
        }
        at->dlv_tag = x->delivery_tag;
        at->dlv_state = 1;
        return 0;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        tm_snprintf(at->errstr, sizeof at->errstr, "RabbitMQ cancelled the "
                    "consumer of '%s' (queue deleted?)", at->cfg->queue);
        return -1;
    case AMQP_BASIC_ACK_METHOD:
    case AMQP_BASIC_NACK_METHOD: {
        uint64_t tag;
        int multiple;
        if (m->id == AMQP_BASIC_ACK_METHOD) {
            const amqp_basic_ack_t *x = m->decoded;
            tag = x->delivery_tag;
            multiple = x->multiple;
        } else {
            const amqp_basic_nack_t *x = m->decoded;
            tag = x->delivery_tag;
            multiple = x->multiple;
        }
        unsigned char st = m->id == AMQP_BASIC_ACK_METHOD ? AB_ACKED
                                                           : AB_NACKED;
        if (ch == AB_CH_PUB)
            pub_confirm(&at->pub, tag, multiple, st);
        else if (ch == AB_CH_REPLY)
            pub_confirm(&at->rpub, tag, multiple, st);
        return 0;
    }
    case AMQP_BASIC_RETURN_METHOD: {
        const amqp_basic_return_t *x = m->decoded;
        at->ret_state = 1;
        at->ret_ch = ch;
        tm_snprintf(at->ret_rk, sizeof at->ret_rk, "%.*s",
                    (int)x->routing_key.len,
                    (const char *)x->routing_key.bytes);
        tm_snprintf(at->ret_text, sizeof at->ret_text, "%u %.*s",
                    x->reply_code, (int)x->reply_text.len,
                    (const char *)x->reply_text.bytes);
        return 0;
    }
    default:
        return 0;
    }
}

static int on_frame(struct ab_task *at, const amqp_frame_t *f)
{
    if (f->frame_type == AMQP_FRAME_METHOD)
        return on_method(at, f->channel, &f->payload.method);
    if (f->frame_type == AMQP_FRAME_HEADER) {
        if (f->channel == AB_CH_CONSUME && at->dlv_state == 1) {
            at->partial = delivery_start(at, f);
            if (at->partial == NULL) {
                tm_snprintf(at->errstr, sizeof at->errstr, "a message of "
                            "%llu bytes is too large to hold",
                            (unsigned long long)
                                f->payload.properties.body_size);
                return -1;
            }
            at->dlv_state = 2;
            if (at->partial->body_len == 0)
                delivery_done(at);
        } else if (at->ret_state == 1 && f->channel == at->ret_ch) {
            const amqp_basic_properties_t *p =
                f->payload.properties.decoded;
            char *mid = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                            ? bytes_dup(p->message_id)
                            : NULL;
            returned_done(at, mid);
            /* skip its body frames */
            at->ret_left = f->payload.properties.body_size;
            at->ret_state = at->ret_left > 0 ? 2 : 0;
            tm_free(mid);
        }
        return 0;
    }
    if (f->frame_type == AMQP_FRAME_BODY) {
        const amqp_bytes_t *b = &f->payload.body_fragment;
        if (f->channel == AB_CH_CONSUME && at->dlv_state == 2) {
            struct ab_delivery *d = at->partial;
            if (b->len > d->body_len - d->body_got) {
                tm_snprintf(at->errstr, sizeof at->errstr, "protocol error: "
                            "body longer than announced");
                return -1;
            }
            memcpy(d->body + d->body_got, b->bytes, b->len);
            d->body_got += b->len;
            if (d->body_got == d->body_len)
                delivery_done(at);
        } else if (at->ret_state == 2 && f->channel == at->ret_ch) {
            at->ret_left = b->len >= at->ret_left ? 0 : at->ret_left - b->len;
            if (at->ret_left == 0)
                at->ret_state = 0;
        }
    }
    return 0;
}

/*
 * ab_pump reads every frame available now without blocking, and handles
 * each: deliveries go to the ready list, publisher confirms to their
 * trackers. It also lets rabbitmq-c send a heartbeat when one is due and
 * notice a broker silent for two heartbeats (a 1 us timeout rather than
 * 0 keeps that check alive). Returns -1 when the connection failed.
 */
static int ab_pump(struct ab_task *at)
{
    amqp_connection_state_t c = at->conn;
    for (int i = 0; i < AB_PUMP_MAX; i++) {
        amqp_frame_t f;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 1};
        int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            break;
        if (rc != AMQP_STATUS_OK) {
            tm_snprintf(at->errstr, sizeof at->errstr, "%s",
                        amqp_error_string2(rc));
            return -1;
        }
        if (on_frame(at, &f) != 0)
            return -1;
    }
    amqp_maybe_release_buffers(c);
    return 0;
}

/* ab_wait_readable waits up to ms for the connection's socket. */
static void ab_wait_readable(struct ab_task *at, int64_t ms)
{
    struct pollfd p = {.fd = amqp_get_sockfd(at->conn), .events = POLLIN};
    if (ms > INT_MAX)
        ms = INT_MAX;
    if (poll(&p, 1, (int)(ms < 0 ? 0 : ms)) < 0) {
        /* EINTR: the caller loops */
    }
}

/* ---- settlement ------------------------------------------------------ */

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * settle_tags acknowledges acks and gives back nacks (requeue) on the
 * consume channel. Nacks go first; then one basic.ack with multiple=1
 * covers every ack up to the settled floor (all lower tags are settled),
 * and acks above it go one by one. *err is set on a connection error.
 */
static void settle_tags(struct ab_task *at, const uint64_t *acks,
                        size_t na, const uint64_t *nacks, size_t nn,
                        int *err)
{
    struct ab_acks *k = &at->acks;
    amqp_connection_state_t c = at->conn;
    if (c == NULL || na + nn == 0)
        return;
    for (size_t i = 0; i < nn; i++) {
        if (amqp_basic_nack(c, AB_CH_CONSUME, nacks[i], /* multiple = */ 0,
                            /* requeue = */ 1) != AMQP_STATUS_OK) {
            tm_snprintf(at->errstr, sizeof at->errstr, "basic.nack failed");
            *err = 1;
            return;
        }
    }
    if (k->n + na + nn > k->cap) {
        k->cap = (k->n + na + nn) * 2;
        k->above = tm_realloc(k->above, k->cap * sizeof *k->above);
    }
    if (na > 0)
        memcpy(k->above + k->n, acks, na * sizeof *acks);
    k->n += na;
    if (nn > 0)
        memcpy(k->above + k->n, nacks, nn * sizeof *nacks);
    k->n += nn;
    qsort(k->above, k->n, sizeof *k->above, u64_cmp);
    size_t drop = 0;
    while (drop < k->n && k->above[drop] <= k->floor + 1) {
        if (k->above[drop] == k->floor + 1)
            k->floor++;
        drop++;
    }
    memmove(k->above, k->above + drop, (k->n - drop) * sizeof *k->above);
    k->n -= drop;
    /* the largest new ack under the floor acknowledges all below it */
    uint64_t multi = 0;
    for (size_t i = 0; i < na; i++)
        if (acks[i] <= k->floor && acks[i] > multi)
            multi = acks[i];
    int rc = AMQP_STATUS_OK;
    if (multi > 0)
        rc = amqp_basic_ack(c, AB_CH_CONSUME, multi, /* multiple = */ 1);
    for (size_t i = 0; i < na && rc == AMQP_STATUS_OK; i++)
        if (acks[i] > k->floor)
            rc = amqp_basic_ack(c, AB_CH_CONSUME, acks[i], 0);
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.ack: %s",
                    amqp_error_string2(rc));
        *err = 1;
    }
}

/* retry_queue returns the name of the retry queue for a delay of ms,
 * declaring it on first use on this connection: messages wait there
 * (per-message expiration) and then dead-letter back, through the default
 * exchange, to the task queue. NULL with the reason in buf when it cannot
 * be declared; *dead is set when the connection failed. */
static const char *retry_queue(struct ab_task *at, int64_t ms, char *buf,
                               size_t size, int *dead)
{
    for (size_t i = 0; i < at->nlevels; i++)
        if (at->levels[i].ms == ms)
            return at->levels[i].name;
    const struct tm_cfg_task *t = at->cfg;
    char name[AB_SHORTSTR_MAX + 64], eb[256];
    tm_snprintf(name, sizeof name, "%s.retry.%lldms", t->queue,
                (long long)ms);
    if (strlen(name) > AB_SHORTSTR_MAX)
        tm_snprintf(name, sizeof name, "%.200s.%016llx.retry.%lldms",
                    t->queue,
                    (unsigned long long)fnv64(t->queue, strlen(t->queue),
                                              FNV64_INIT),
                    (long long)ms);
    amqp_table_entry_t args[2];
    memset(args, 0, sizeof args);
    args[0].key = amqp_cstring_bytes("x-dead-letter-exchange");
    args[0].value.kind = AMQP_FIELD_KIND_UTF8;
    args[0].value.value.bytes = amqp_cstring_bytes("");
    args[1].key = amqp_cstring_bytes("x-dead-letter-routing-key");
    args[1].value.kind = AMQP_FIELD_KIND_UTF8;
    args[1].value.value.bytes = amqp_cstring_bytes(t->queue);
    amqp_table_t tbl = {.num_entries = 2, .entries = args};
    amqp_queue_declare(at->conn, AB_CH_ADMIN, amqp_cstring_bytes(name),
                       /* passive = */ 0, /* durable = */ 1,
                       /* exclusive = */ 0, /* auto_delete = */ 0, tbl);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(at->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "retry queue '%s' cannot be declared: %s",
                    name, ab_strerror(r, eb, sizeof eb));
        if (!channel_error(r) ||
            channel_closed_ok(at->conn, AB_CH_ADMIN) != AMQP_STATUS_OK ||
            ab_channel(at->conn, AB_CH_ADMIN, 0, eb, sizeof eb) != 0) {
            tm_snprintf(at->errstr, sizeof at->errstr, "%s", buf);
            *dead = 1;
        }
        return NULL;
    }
    if (at->nlevels == at->caplevels) {
        at->caplevels = at->caplevels ? at->caplevels * 2 : 8;
        at->levels = tm_realloc(at->levels,
                                at->caplevels * sizeof *at->levels);
    }
    at->levels[at->nlevels].ms = ms;
    at->levels[at->nlevels].name = tm_strdup(name);
    return at->levels[at->nlevels++].name;
}

/* pub_send publishes one message on a confirm channel through the
 * default exchange. Returns its confirm sequence, or 0 when the
 * connection failed. */
static uint64_t pub_send(struct ab_task *at, struct ab_pub *p,
                         const char *rk, const amqp_basic_properties_t *props,
                         const char *body, size_t len, int mandatory)
{
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)body};
    int rc = amqp_basic_publish(at->conn, p->ch, amqp_empty_bytes,
                                amqp_cstring_bytes(rk), mandatory,
                                /* immediate = */ 0, props, b);
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.publish to '%s': "
                    "%s", rk, amqp_error_string2(rc));
        return 0;
    }
    uint64_t seq = p->next_seq++;
    size_t i = (size_t)(seq - p->lo);
    if (i >= p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        while (p->cap <= i)
            p->cap *= 2;
        p->st = tm_realloc(p->st, p->cap);
    }
    p->st[i] = AB_WAITING;
    p->waiting++;
    return seq;
}

/* base_props fills the properties a republished copy keeps. */
static void base_props(amqp_basic_properties_t *p,
                       const struct ab_delivery *d)
{
    memset(p, 0, sizeof *p);
    p->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                AMQP_BASIC_HEADERS_FLAG;
    p->content_type = bytes_of(d->content_type != NULL ? d->content_type
                                                       : "application/json");
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    if (d->has_priority) {
        p->_flags |= AMQP_BASIC_PRIORITY_FLAG;
        p->priority = d->priority;
    }
    if (d->reply_to != NULL) {
        p->_flags |= AMQP_BASIC_REPLY_TO_FLAG;
        p->reply_to = bytes_of(d->reply_to);
    }
    if (d->correlation_id != NULL) {
        p->_flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
        p->correlation_id = bytes_of(d->correlation_id);
    }
}

static unsigned rec_attempts(const struct ab_rec *r)
{
    return r->outcome == TM_OUT_INVALID ? 0u : r->attempt;
}

/* publish_dead sends the dead-letter copy: the original body and
 * properties, a new message id, and the failure headers. */
static uint64_t publish_dead(struct ab_task *at, struct ab_rec *r)
{
    const struct ab_delivery *d = r->d;
    amqp_basic_properties_t p;
    base_props(&p, d);
    ab_uuid(r->copy_id, sizeof r->copy_id);
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    p.message_id = amqp_cstring_bytes(r->copy_id);
    p.timestamp = (uint64_t)(r->failed_at / 1000);
    struct ab_hdrs h = {0};
    hdr_user(&h, &d->headers);
    hdr_str(&h, "x-task", at->cfg->name, AB_SHORTSTR_MAX);
    hdr_str(&h, "x-error", r->error != NULL ? r->error
                                            : tm_outcome_label(r->outcome),
            AB_ERROR_HEADER_MAX);
    hdr_i64(&h, "x-attempts", rec_attempts(r));
    hdr_i64(&h, "x-failed-at", r->failed_at);
    hdr_str(&h, "x-origin-id", d->id, AB_SHORTSTR_MAX);
    hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    p.headers = hdr_table(&h);
    r->rk = at->cfg->dead_letter;
    uint64_t seq = pub_send(at, &at->pub, r->rk, &p, d->body, d->body_len,
                            /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* publish_retry sends the retry copy to the retry queue rk, expiring
 * after the delay, with the count of runs so far. */
static uint64_t publish_retry(struct ab_task *at, struct ab_rec *r)
{
    const struct ab_delivery *d = r->d;
    amqp_basic_properties_t p;
    base_props(&p, d);
    char exp[32];
    tm_snprintf(exp, sizeof exp, "%lld",
                (long long)(r->delay_ms > 0 ? r->delay_ms : 0));
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_EXPIRATION_FLAG;
    p.message_id = bytes_of(d->id);
    p.expiration = amqp_cstring_bytes(exp);
    struct ab_hdrs h = {0};
    hdr_user(&h, &d->headers);
    hdr_i64(&h, "x-attempts", r->attempt);
    if (r->error != NULL)
        hdr_str(&h, "x-last-error", r->error, AB_ERROR_HEADER_MAX);
    p.headers = hdr_table(&h);
    uint64_t seq = pub_send(at, &at->pub, r->rk, &p, d->body, d->body_len,
                            /* mandatory = */ 1);
    tm_free(h.e);
    return seq;
}

/* reply_body returns the answer for a request: the task's result (or
 * null) on success, else an error object. Free with cJSON_free when
 * *owned. */
static char *reply_body(const struct ab_task *at, const struct ab_rec *r,
                        size_t *len, int *owned)
{
    *owned = 0;
    if (r->outcome == TM_OUT_SUCCESS) {
        if (r->result != NULL) {
            *len = r->result_len > 0 ? r->result_len : strlen(r->result);
            return r->result;
        }
        *len = 4;
        return (char *)(uintptr_t)"null";
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error",
                            r->error != NULL ? r->error
                                             : tm_outcome_label(r->outcome));
    cJSON_AddStringToObject(o, "outcome", tm_outcome_label(r->outcome));
    cJSON_AddNumberToObject(o, "attempts", rec_attempts(r));
    cJSON_AddStringToObject(o, "task", at->cfg->name);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s == NULL) {
        *len = 4;
        return (char *)(uintptr_t)"null";
    }
    *owned = 1;
    *len = strlen(s);
    return s;
}

/* publish_reply answers a request on the reply channel (not mandatory:
 * a requester that went away just misses its answer). */
static uint64_t publish_reply(struct ab_task *at, const struct ab_rec *r)
{
    const struct ab_delivery *d = r->d;
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
               AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_HEADERS_FLAG |
               AMQP_BASIC_MESSAGE_ID_FLAG;
    p.content_type = amqp_cstring_bytes("application/json");
    p.delivery_mode = AMQP_DELIVERY_NONPERSISTENT;
    p.correlation_id = bytes_of(d->correlation_id);
    p.message_id = bytes_of(d->id);
    struct ab_hdrs h = {0};
    hdr_str(&h, "x-outcome", tm_outcome_label(r->outcome), 32);
    hdr_str(&h, "x-task", at->cfg->name, AB_SHORTSTR_MAX);
    hdr_i64(&h, "x-attempts", rec_attempts(r));
    p.headers = hdr_table(&h);
    size_t len;
    int owned;
    char *body = reply_body(at, r, &len, &owned);
    uint64_t seq = pub_send(at, &at->rpub, d->reply_to, &p, body, len,
                            /* mandatory = */ 0);
    if (owned)
        cJSON_free(body);
    tm_free(h.e);
    return seq;
}

/* wait_confirms reads frames until every publish of the round is
 * confirmed (or nacked, or lost with the reply channel). */
static int wait_confirms(struct ab_task *at)
{
    int64_t deadline = tm_now_ms() + AB_CONFIRM_TIMEOUT_MS;
    for (;;) {
        if (ab_pump(at) != 0)
            return -1;
        if (at->pub.waiting == 0 && at->rpub.waiting == 0)
            return 0;
        int64_t left = deadline - tm_now_ms();
        if (left <= 0) {
            tm_snprintf(at->errstr, sizeof at->errstr, "no publisher "
                        "confirm from RabbitMQ within %d s",
                        AB_CONFIRM_TIMEOUT_MS / 1000);
            return -1;
        }
        ab_wait_readable(at, left < 1000 ? left : 1000);
    }
}

static int needs_reply(const struct ab_rec *r)
{
    return r->d != NULL && r->d->reply_to != NULL &&
           r->d->correlation_id != NULL &&
           (r->settle == TM_SETTLE_ACK || r->settle == TM_SETTLE_DEAD);
}

/*
 * ab_flush does the settlements queued for the task, in one round:
 * declare retry queues on first use, publish every dead-letter, retry and
 * reply copy, wait for their publisher confirms, then acknowledge the
 * originals (or give them back when the broker refused a copy). Records
 * of a connection since lost are dropped: RabbitMQ redelivers those
 * messages. Returns -1 when the connection failed (at->errstr).
 */
static int ab_flush(struct ab_task *at)
{
    struct ab_recvec *w = &at->work;
    pthread_mutex_lock(&at->q_mu);
    struct ab_recvec tmp = at->pending;
    at->pending = *w;
    *w = tmp;
    pthread_mutex_unlock(&at->q_mu);
    if (w->n == 0)
        return 0;
    int rc = 0;
    size_t stale = 0, npub = 0;
    char why[512];
    if (at->conn == NULL) {
        stale = w->n;
        goto out;
    }

    /* 1. retry queues (a retry impossible there becomes a dead letter) */
    for (size_t i = 0; i < w->n; i++) {
        struct ab_rec *r = &w->v[i];
        if (r->gen != at->gen) {
            r->stale = 1;
            stale++;
            continue;
        }
        if (r->settle != TM_SETTLE_RETRY)
            continue;
        int dead = 0;
        int64_t base = tm_retry_delay_ms(at->cfg, r->attempt, 0.0);
        r->rk = retry_queue(at, base, why, sizeof why, &dead);
        if (dead) {
            rc = -1;
            goto out;
        }
        if (r->rk == NULL) {
            tm_log_write(TM_LOG_ERR, SRC, at->cfg->name, r->d->id,
                         "%s; dead-lettering instead", why);
            char *e = tm_asprintf("%s; %s", r->error ? r->error : "error",
                                  why);
            tm_free(r->error);
            r->error = e;
            r->settle = TM_SETTLE_DEAD;
        }
    }

    /* 2. the copies, each confirmed by the broker */
    pub_round(&at->pub);
    pub_round(&at->rpub);
    for (size_t i = 0; i < w->n; i++) {
        struct ab_rec *r = &w->v[i];
        if (r->stale)
            continue;
        if (needs_reply(r)) {
            if (!at->rpub.open) {
                if (ab_channel(at->conn, AB_CH_REPLY, 1, at->errstr,
                               sizeof at->errstr) != 0) {
                    rc = -1;
                    goto out;
                }
                pub_reset(&at->rpub, 1);
                pub_round(&at->rpub);
            }
            r->rseq = publish_reply(at, r);
            if (r->rseq == 0) {
                rc = -1;
                goto out;
            }
            npub++;
        }
        if (r->settle == TM_SETTLE_DEAD)
            r->seq = publish_dead(at, r);
        else if (r->settle == TM_SETTLE_RETRY)
            r->seq = publish_retry(at, r);
        else
            continue;
        if (r->seq == 0) {
            rc = -1;
            goto out;
        }
        npub++;
    }
    if (npub > 0 && wait_confirms(at) != 0) {
        rc = -1;
        goto out;
    }

    /* 3. the originals */
    if (w->n > at->tagcap) {
        at->tagcap = w->n * 2;
        at->tags = tm_realloc(at->tags, at->tagcap * sizeof *at->tags);
        at->ntags = tm_realloc(at->ntags, at->tagcap * sizeof *at->ntags);
    }
    size_t na = 0, nn = 0;
    for (size_t i = 0; i < w->n; i++) {
        struct ab_rec *r = &w->v[i];
        if (r->stale)
            continue;
        if (r->rseq != 0 && pub_state(&at->rpub, r->rseq) != AB_ACKED)
            tm_log_write(TM_LOG_WARNING, SRC, at->cfg->name, r->d->id,
                         "the reply to '%s' was not confirmed; the "
                         "requester gets no answer", r->d->reply_to);
        if (r->seq != 0 && (r->returned ||
                            pub_state(&at->pub, r->seq) != AB_ACKED)) {
            if (!r->returned)
                tm_log_write(TM_LOG_ERR, SRC, at->cfg->name, r->d->id,
                             "RabbitMQ refused the %s copy for '%s'; the "
                             "message stays in the queue and is delivered "
                             "again", r->settle == TM_SETTLE_DEAD
                                          ? "dead-letter"
                                          : "retry",
                             r->rk);
            at->ntags[nn++] = r->tag;
            continue;
        }
        at->tags[na++] = r->tag;
    }
    int err = 0;
    settle_tags(at, at->tags, na, at->ntags, nn, &err);
    if (err)
        rc = -1;
out:
    if (stale > 0)
        tm_log_write(TM_LOG_DEBUG, SRC, at->cfg->name, NULL,
                     "%zu settlement(s) dropped: their connection was lost "
                     "and RabbitMQ delivers those messages again", stale);
    recvec_clear(w);
    return rc;
}

/* stop_consuming cancels the task's consumer (wake()) without waiting
 * for the broker's answer, and gives back the deliveries not handed over
 * yet, so that RabbitMQ can deliver them elsewhere at once; what arrives
 * after is given back as it comes (delivery_done). io_mu held. */
static int stop_consuming(struct ab_task *at)
{
    if (at->stopped || at->conn == NULL)
        return 0;
    at->stopped = 1;
    amqp_basic_cancel_t cancel;
    memset(&cancel, 0, sizeof cancel);
    cancel.consumer_tag = amqp_cstring_bytes(at->consumer_tag);
    cancel.nowait = 1;
    if (amqp_send_method(at->conn, AB_CH_CONSUME, AMQP_BASIC_CANCEL_METHOD,
                         &cancel) != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.cancel failed");
        return -1;
    }
    int err = 0;
    struct ab_delivery *d;
    while (!err && (d = ready_pop(at)) != NULL) {
        settle_tags(at, NULL, 0, &d->tag, 1, &err);
        delivery_free(d);
    }
    return err ? -1 : 0;
}

/* resume_consuming starts the consumer again when intake comes back
 * after a wake() (a reload that did not happen). io_mu held. */
static int resume_consuming(struct ab_task *at)
{
    char ctag[AB_SHORTSTR_MAX + 1];
    if (ab_consume(at, at->conn, ctag, at->errstr, sizeof at->errstr) != 0)
        return -1;
    tm_snprintf(at->consumer_tag, sizeof at->consumer_tag, "%s", ctag);
    at->stopped = 0;
    return 0;
}

/* serve does what a holder of io_mu owes the connection: read what
 * arrived (heartbeats, confirms, deliveries) and flush settlements. */
static int serve(struct ab_task *at, const char *what)
{
    if (at->conn == NULL) {
        /* settlements of a lost connection are moot */
        pthread_mutex_lock(&at->q_mu);
        recvec_clear(&at->pending);
        pthread_mutex_unlock(&at->q_mu);
        return 0;
    }
    if (ab_pump(at) != 0 || ab_flush(at) != 0) {
        conn_lost(at, what);
        return -1;
    }
    return 0;
}

/* signal_intake wakes the task's intake thread if it waits in fetch. */
static void signal_intake(struct ab_task *at)
{
    uint64_t one = 1;
    if (write(at->efd, &one, sizeof one) < 0) {
        /* the counter is saturated: it is signalled anyway */
    }
}

/* ---- the vtable: daemon side ------------------------------------------- */

static void cb_release_batch(struct tm_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        delivery_free(b->msgs[i].bctx);
    tm_free(b);
}

/* woken says whether wake() was called since this task's intake last
 * noticed; noticing it makes this fetch return at once. */
static int woken(struct ab_task *at)
{
    unsigned seq = atomic_load(&at->ab->wake_seq);
    if (seq == at->seen_wake)
        return 0;
    at->seen_wake = seq;
    return 1;
}

/*
 * ab_fetch reads up to max deliveries for task ti. It holds io_mu only
 * while it touches the connection: connecting and waiting (poll on the
 * socket and the task's eventfd) happen without it, so the settle thread
 * can settle at any time. The first call after wake() returns 0 at once;
 * a call after that (intake started again) consumes again.
 */
static int ab_fetch(struct tm_broker *b, size_t ti, size_t max,
                    int timeout_ms, struct tm_batch **out)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    struct ab_task *at = &ab->tasks[ti];
    int n = 0;
    *out = NULL;
    pthread_mutex_lock(&at->io_mu);
    if (woken(at))
        goto out;
    if (at->conn == NULL) {
        int perm = 0;
        if (task_connect(at, &perm) != 0) {
            /* a new reason is worth a line; the same again is noise */
            uint64_t h = fnv64(at->errstr, strlen(at->errstr), FNV64_INIT);
            tm_log_write(h != at->err_hash ? (perm ? TM_LOG_ERR
                                                   : TM_LOG_WARNING)
                                           : TM_LOG_DEBUG,
                         SRC, at->cfg->name, NULL, "%s; retrying",
                         at->errstr);
            at->err_hash = h;
            task_down(at);
            n = -1;
            goto out;
        }
    }
    if (at->stopped && resume_consuming(at) != 0) {
        conn_lost(at, "consume");
        n = -1;
        goto out;
    }
    int64_t deadline = tm_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (at->conn == NULL) {
            n = -1; /* lost by the settle thread meanwhile */
            goto out;
        }
        if (serve(at, "consume") != 0) {
            n = -1;
            goto out;
        }
        if (at->nready > 0 && max > 0)
            break;
        if (woken(at))
            goto out;
        int64_t left = deadline - tm_now_ms();
        if (left <= 0)
            goto out;
        struct pollfd p[2] = {
            {.fd = amqp_get_sockfd(at->conn), .events = POLLIN},
            {.fd = at->efd, .events = POLLIN},
        };
        pthread_mutex_unlock(&at->io_mu);
        if (poll(p, 2, (int)(left < INT_MAX ? left : INT_MAX)) > 0 &&
            (p[1].revents & POLLIN)) {
            uint64_t cnt;
            if (read(at->efd, &cnt, sizeof cnt) < 0) {
                /* EAGAIN: taken already */
            }
        }
        pthread_mutex_lock(&at->io_mu);
    }
    size_t k = at->nready < max ? at->nready : max;
    struct tm_batch *batch = tm_batch_new(k);
    batch->release = cb_release_batch;
    int64_t now = tm_now_ns();
    for (size_t i = 0; i < k; i++) {
        struct ab_delivery *d = ready_pop(at);
        struct tm_msg *m = &batch->msgs[i];
        m->task_index = ti;
        m->id = d->id;
        m->id_len = strlen(d->id);
        m->body = d->body;
        m->body_len = d->body_len;
        m->attempt = d->attempt;
        m->tag = d->tag;
        m->bctx = d;
        m->t_recv_ns = now;
    }
    *out = batch;
    n = (int)k;
out:
    pthread_mutex_unlock(&at->io_mu);
    return n;
}

/* settle_task does the task's queued settlements on the calling (settle)
 * thread, and wakes intake when frames read meanwhile brought
 * deliveries. */
static void settle_task(struct ab_task *at, const char *what)
{
    pthread_mutex_lock(&at->io_mu);
    serve(at, what);
    int ready = at->nready > 0;
    pthread_mutex_unlock(&at->io_mu);
    if (ready)
        signal_intake(at);
}

/*
 * ab_settle turns each message's settlement into a record on its task and
 * does them at once, a round per task: acks need only the delivery tag;
 * dead letters, retries and replies take the delivery, error and result
 * from the message (copies are published and confirmed before the
 * original is acked). It always returns 0: a settlement that cannot
 * be done because its connection was lost is moot, as RabbitMQ redelivers
 * every message that was not acknowledged on it.
 */
static size_t ab_settle(struct tm_broker *b, struct tm_msg **msgs,
                        size_t n)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    struct ab_task *locked = NULL;
    int64_t now = tm_wall_ms();
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        struct ab_delivery *d = m->bctx;
        if (m->settle == TM_SETTLE_NONE || d == NULL ||
            m->task_index >= ab->ntasks)
            continue;
        struct ab_task *at = &ab->tasks[m->task_index];
        struct ab_rec r;
        memset(&r, 0, sizeof r);
        r.settle = m->settle;
        r.outcome = m->outcome;
        r.tag = d->tag;
        r.gen = d->gen;
        r.attempt = m->attempt;
        r.delay_ms = m->retry_delay_ms;
        r.failed_at = now;
        if (m->settle != TM_SETTLE_ACK ||
            (d->reply_to != NULL && d->correlation_id != NULL)) {
            r.d = d;
            m->bctx = NULL;
            r.error = m->error;
            m->error = NULL;
            r.result = m->result;
            r.result_len = m->result_len;
            m->result = NULL;
        }
        if (locked != at) {
            if (locked != NULL)
                pthread_mutex_unlock(&locked->q_mu);
            pthread_mutex_lock(&at->q_mu);
            locked = at;
        }
        recvec_push(&at->pending, &r);
        at->touched = 1;
    }
    if (locked != NULL)
        pthread_mutex_unlock(&locked->q_mu);
    for (size_t i = 0; i < ab->ntasks; i++) {
        if (ab->tasks[i].touched) {
            ab->tasks[i].touched = 0;
            settle_task(&ab->tasks[i], "settle");
        }
    }
    return 0;
}

/* ab_wake makes blocked fetch calls return, and cancels the consumers:
 * intake is stopping (shutdown, or a reload handing over to a new
 * configuration), and deliveries not handed over yet go back to RabbitMQ
 * at once. Running work is still settled afterwards. */
static void ab_wake(struct tm_broker *b)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    atomic_fetch_add(&ab->wake_seq, 1);
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct ab_task *at = &ab->tasks[i];
        signal_intake(at);
        pthread_mutex_lock(&at->io_mu);
        if (at->conn != NULL && stop_consuming(at) != 0)
            conn_lost(at, "stop");
        pthread_mutex_unlock(&at->io_mu);
    }
}

/* ab_tick keeps quiet connections alive from the settle thread (intake
 * does not read while the pool is full): it reads frames, which sends a
 * heartbeat when one is due and notices a silent broker. */
static void ab_tick(struct tm_broker *b)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    for (size_t i = 0; i < ab->ntasks; i++)
        settle_task(&ab->tasks[i], "upkeep");
}

static int64_t ab_tick_ms(struct tm_broker *b)
{
    (void)b;
    return 1000;
}

static int ab_connect_all(struct tm_broker *b)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct ab_task *at = &ab->tasks[i];
        int perm = 0, rc = 0;
        pthread_mutex_lock(&at->io_mu);
        if (at->conn != NULL)
            serve(at, "connect"); /* still alive? */
        if (at->conn == NULL)
            rc = task_connect(at, &perm);
        if (rc != 0)
            tm_broker_set_error(b, perm ? EINVAL : ECONNREFUSED, "%s",
                                at->errstr);
        pthread_mutex_unlock(&at->io_mu);
        if (rc != 0)
            return -1;
    }
    if (ab->ntasks == 0) {
        atomic_store(&ab->base.up, 1);
        atomic_store(&ab->ever_up, 1);
    }
    return 0;
}

/* ---- the CLI connection ---------------------------------------------- */

static int cli_ready(struct ab_broker *ab)
{
    char eb[512];
    if (ab->cli != NULL)
        return 0;
    amqp_connection_state_t c = ab_open(ab, "cli", 0, eb, sizeof eb);
    if (c == NULL) {
        tm_broker_set_error(&ab->base, ECONNREFUSED, "%s", eb);
        return -1;
    }
    if (ab_channel(c, AB_CLI_PUB, 1, eb, sizeof eb) != 0 ||
        ab_channel(c, AB_CLI_GET, 0, eb, sizeof eb) != 0) {
        tm_broker_set_error(&ab->base, EIO, "%s", eb);
        ab_drop(c);
        return -1;
    }
    ab->cli = c;
    ab->cli_seq = 0;
    return 0;
}

static void cli_lost(struct ab_broker *ab)
{
    ab_drop(ab->cli);
    ab->cli = NULL;
}

static int cli_declare(struct ab_broker *ab, const struct tm_cfg_task *t)
{
    char eb[768];
    int perm = 0;
    if (cli_ready(ab) != 0)
        return -1;
    if (ab_declare(ab->cli, AB_CLI_GET, t, eb, sizeof eb, &perm) != 0) {
        tm_broker_set_error(&ab->base, perm ? EINVAL : EIO, "%s", eb);
        cli_lost(ab);
        return -1;
    }
    return 0;
}

/* struct cli_wait is what the CLI waits for: a publisher confirm, and
 * the reply to a request. */
struct cli_wait {
    uint64_t seq;          /* 0: no confirm awaited */
    int confirm;           /* AB_WAITING, AB_ACKED, AB_NACKED */
    int returned;
    char ret_text[128];
    const char *corr;      /* NULL: no reply awaited */
    char *reply;           /* the reply's body (owned) */
    char outcome[32];      /* its x-outcome header */
};

/* cli_wait reads frames until w is satisfied or deadline (monotonic ms)
 * passes. Returns 0, or -1 (b->err ETIMEDOUT on a timeout). */
static int cli_wait(struct ab_broker *ab, int64_t deadline,
                    struct cli_wait *w)
{
    amqp_connection_state_t c = ab->cli;
    for (;;) {
        if ((w->seq == 0 || w->confirm != AB_WAITING) &&
            (w->corr == NULL || w->reply != NULL))
            return 0;
        int64_t left = deadline - tm_now_ms();
        if (left <= 0) {
            tm_broker_set_error(&ab->base, ETIMEDOUT, "timed out");
            return -1;
        }
        struct timeval tv = tv_ms(left);
        amqp_frame_t f;
        int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            continue;
        if (rc != AMQP_STATUS_OK) {
            tm_broker_set_error(&ab->base, EIO, "%s",
                                amqp_error_string2(rc));
            cli_lost(ab);
            return -1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue; /* the content of a returned message */
        const amqp_method_t *m = &f.payload.method;
        switch (m->id) {
        case AMQP_BASIC_ACK_METHOD: {
            const amqp_basic_ack_t *x = m->decoded;
            if (f.channel == AB_CLI_PUB &&
                (x->delivery_tag == w->seq ||
                 (x->multiple && x->delivery_tag >= w->seq)))
                w->confirm = AB_ACKED;
            break;
        }
        case AMQP_BASIC_NACK_METHOD: {
            const amqp_basic_nack_t *x = m->decoded;
            if (f.channel == AB_CLI_PUB &&
                (x->delivery_tag == w->seq ||
                 (x->multiple && x->delivery_tag >= w->seq)))
                w->confirm = AB_NACKED;
            break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
            const amqp_basic_return_t *x = m->decoded;
            w->returned = 1;
            tm_snprintf(w->ret_text, sizeof w->ret_text, "%u %.*s",
                        x->reply_code, (int)x->reply_text.len,
                        (const char *)x->reply_text.bytes);
            break;
        }
        case AMQP_BASIC_DELIVER_METHOD: {
            amqp_message_t msg;
            amqp_rpc_reply_t r = amqp_read_message(c, f.channel, &msg, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL) {
                char eb[256];
                tm_broker_set_error(&ab->base, EIO, "reading a reply: %s",
                                    ab_strerror(r, eb, sizeof eb));
                cli_lost(ab);
                return -1;
            }
            const amqp_basic_properties_t *p = &msg.properties;
            if (w->corr != NULL && w->reply == NULL &&
                (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) &&
                p->correlation_id.len == strlen(w->corr) &&
                memcmp(p->correlation_id.bytes, w->corr,
                       p->correlation_id.len) == 0) {
                w->reply = bytes_dup(msg.body);
                char *o = NULL;
                if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
                    o = field_str(table_get(&p->headers, "x-outcome"));
                tm_snprintf(w->outcome, sizeof w->outcome, "%s",
                            o != NULL ? o : "success");
                tm_free(o);
            }
            amqp_destroy_message(&msg);
            break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD: {
            amqp_rpc_reply_t r;
            memset(&r, 0, sizeof r);
            r.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION;
            r.reply = *m;
            char eb[256];
            tm_broker_set_error(&ab->base, EIO, "%s",
                                ab_strerror(r, eb, sizeof eb));
            cli_lost(ab);
            return -1;
        }
        default:
            break;
        }
        amqp_maybe_release_buffers(c);
    }
}

/* cli_publish publishes on the CLI's confirm channel through the default
 * exchange and waits for the confirm. With w, the caller's wait state is
 * used (and may also wait for a reply). */
static int cli_publish(struct ab_broker *ab, const char *rk,
                       const amqp_basic_properties_t *props,
                       const char *body, size_t len, struct cli_wait *w,
                       int64_t deadline)
{
    struct cli_wait own;
    if (w == NULL) {
        memset(&own, 0, sizeof own);
        w = &own;
    }
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)body};
    int rc = amqp_basic_publish(ab->cli, AB_CLI_PUB, amqp_empty_bytes,
                                amqp_cstring_bytes(rk), /* mandatory = */ 1,
                                /* immediate = */ 0, props, b);
    if (rc != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.publish to '%s': %s", rk,
                            amqp_error_string2(rc));
        cli_lost(ab);
        return -1;
    }
    w->seq = ++ab->cli_seq;
    w->confirm = AB_WAITING;
    if (cli_wait(ab, deadline, w) != 0) {
        if (ab->base.err == ETIMEDOUT && w->confirm == AB_WAITING)
            tm_broker_set_error(&ab->base, ETIMEDOUT, "no publisher "
                                "confirm from RabbitMQ in time");
        return -1;
    }
    if (w->confirm == AB_NACKED) {
        tm_broker_set_error(&ab->base, EIO, "RabbitMQ refused the message "
                            "(basic.nack)");
        return -1;
    }
    if (w->returned) {
        tm_broker_set_error(&ab->base, EIO, "RabbitMQ could not route the "
                            "message to queue '%s' (%s)", rk, w->ret_text);
        return -1;
    }
    return 0;
}

static void new_message_props(amqp_basic_properties_t *p,
                              const struct tm_cfg_task *t, int priority,
                              const char *id)
{
    memset(p, 0, sizeof *p);
    p->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
                AMQP_BASIC_APP_ID_FLAG;
    p->content_type = amqp_cstring_bytes("application/json");
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p->message_id = amqp_cstring_bytes(id);
    p->timestamp = (uint64_t)(tm_wall_ms() / 1000);
    p->app_id = amqp_cstring_bytes("taskmill");
    if (priority < 0 && t->max_priority > 0)
        priority = t->priority;
    if (priority >= 0) {
        p->_flags |= AMQP_BASIC_PRIORITY_FLAG;
        p->priority = (uint8_t)priority;
    }
}

static int ab_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority, char *id,
                      size_t idlen)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    if (cli_declare(ab, t) != 0)
        return -1;
    char uuid[40];
    ab_uuid(uuid, sizeof uuid);
    amqp_basic_properties_t p;
    new_message_props(&p, t, priority, uuid);
    if (cli_publish(ab, t->queue, &p, body, len, NULL,
                    tm_now_ms() + AB_CONFIRM_TIMEOUT_MS) != 0)
        return -1;
    tm_snprintf(id, idlen, "%s", uuid);
    return 0;
}

/*
 * ab_request publishes a request with reply_to (an exclusive, auto-delete
 * queue of this connection) and a correlation id, then waits up to
 * timeout_ms for the answer.
 */
static int ab_request(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority,
                      int64_t timeout_ms, char *id, size_t idlen,
                      char **reply, int *task_failed)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    char eb[256];
    *reply = NULL;
    *task_failed = 0;
    if (id != NULL && idlen > 0)
        id[0] = '\0';
    if (cli_declare(ab, t) != 0)
        return -1;
    amqp_queue_declare_ok_t *q = amqp_queue_declare(
        ab->cli, AB_CLI_GET, amqp_empty_bytes, /* passive = */ 0,
        /* durable = */ 0, /* exclusive = */ 1, /* auto_delete = */ 1,
        amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(ab->cli);
    if (q == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "declaring a reply queue: %s",
                            ab_strerror(r, eb, sizeof eb));
        cli_lost(ab);
        return -1;
    }
    char *rq = bytes_dup(q->queue);
    amqp_basic_consume(ab->cli, AB_CLI_GET, amqp_cstring_bytes(rq),
                       amqp_empty_bytes, /* no_local = */ 0,
                       /* no_ack = */ 1, /* exclusive = */ 1,
                       amqp_empty_table);
    r = amqp_get_rpc_reply(ab->cli);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "consuming the reply queue: %s",
                            ab_strerror(r, eb, sizeof eb));
        tm_free(rq);
        cli_lost(ab);
        return -1;
    }
    char uuid[40];
    ab_uuid(uuid, sizeof uuid);
    amqp_basic_properties_t p;
    new_message_props(&p, t, priority, uuid);
    p._flags |= AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG;
    p.reply_to = amqp_cstring_bytes(rq);
    p.correlation_id = amqp_cstring_bytes(uuid);
    struct cli_wait w;
    memset(&w, 0, sizeof w);
    w.corr = uuid;
    int64_t start = tm_now_ms();
    int64_t deadline = start + (timeout_ms > 0 ? timeout_ms : 0);
    int64_t cdeadline = start + AB_CONFIRM_TIMEOUT_MS;
    int rc = cli_publish(ab, t->queue, &p, body, len, &w,
                         cdeadline < deadline ? cdeadline : deadline);
    tm_free(rq);
    if (rc != 0 && !(b->err == ETIMEDOUT && w.confirm == AB_ACKED)) {
        tm_free(w.reply);
        return -1;
    }
    if (id != NULL)
        tm_snprintf(id, idlen, "%s", uuid);
    if (w.reply == NULL && cli_wait(ab, deadline, &w) != 0) {
        if (b->err == ETIMEDOUT)
            tm_broker_set_error(b, ETIMEDOUT, "no reply within %.3g s",
                                (double)timeout_ms / 1000.0);
        tm_free(w.reply);
        return -1;
    }
    *reply = w.reply;
    *task_failed = strcmp(w.outcome, "success") != 0;
    return 0;
}

/* ---- CLI: dead letters ---------------------------------------------- */

/* struct dlq_msg is one dead letter read with basic.get (unacked). */
struct dlq_msg {
    uint64_t tag;
    amqp_message_t msg;
};

/* dlq_get reads the next dead letter without acknowledging it. Returns
 * 1 with *out filled, 0 when the queue has no more, -1 on error; *left
 * is the broker's count of messages behind it. */
static int dlq_get(struct ab_broker *ab, const struct tm_cfg_task *t,
                   struct dlq_msg *out, long *left)
{
    char eb[256];
    amqp_rpc_reply_t r = amqp_basic_get(ab->cli, AB_CLI_GET,
                                        amqp_cstring_bytes(t->dead_letter),
                                        /* no_ack = */ 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(&ab->base, EIO, "basic.get '%s': %s",
                            t->dead_letter, ab_strerror(r, eb, sizeof eb));
        cli_lost(ab);
        return -1;
    }
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
        return 0;
    const amqp_basic_get_ok_t *ok = r.reply.decoded;
    out->tag = ok->delivery_tag;
    *left = (long)ok->message_count;
    r = amqp_read_message(ab->cli, AB_CLI_GET, &out->msg, 0);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(&ab->base, EIO, "reading from '%s': %s",
                            t->dead_letter, ab_strerror(r, eb, sizeof eb));
        cli_lost(ab);
        return -1;
    }
    return 1;
}

/* dlq_id is a dead letter's id: its message_id, or a hash of its body
 * and headers for one that has none (dead-lettered by someone else). */
static char *dlq_id(const amqp_message_t *msg)
{
    const amqp_basic_properties_t *p = &msg->properties;
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len > 0)
        return bytes_dup(p->message_id);
    uint64_t h = fnv64(msg->body.bytes, msg->body.len, FNV64_INIT);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        h = fnv64(&p->timestamp, sizeof p->timestamp, h);
    return tm_asprintf("h-%016llx", (unsigned long long)h);
}

static void dlq_fill(const amqp_message_t *msg, struct tm_dlq_entry *e)
{
    const amqp_basic_properties_t *p = &msg->properties;
    const amqp_table_t *h = (p->_flags & AMQP_BASIC_HEADERS_FLAG)
                                ? &p->headers
                                : NULL;
    long long x;
    memset(e, 0, sizeof *e);
    e->id = dlq_id(msg);
    e->origin_id = field_str(table_get(h, "x-origin-id"));
    if (e->origin_id == NULL && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
        e->origin_id = bytes_dup(p->message_id);
    e->task = field_str(table_get(h, "x-task"));
    e->error = field_str(table_get(h, "x-error"));
    if (e->error == NULL) {
        /* dead-lettered by RabbitMQ itself (x-dead-letter-exchange) */
        char *why = field_str(table_get(h, "x-first-death-reason"));
        char *from = field_str(table_get(h, "x-first-death-queue"));
        e->error = tm_asprintf("dead-lettered by RabbitMQ (%s in '%s')",
                               why ? why : "unknown reason",
                               from ? from : "?");
        tm_free(why);
        tm_free(from);
    }
    e->attempts = field_int(table_get(h, "x-attempts"), &x) == 0 ? (long)x
                                                                 : 0;
    if (field_int(table_get(h, "x-failed-at"), &x) == 0) {
        e->failed_at = x;
    } else {
        const amqp_field_value_t *death = table_get(h, "x-death");
        if (death != NULL && death->kind == AMQP_FIELD_KIND_ARRAY &&
            death->value.array.num_entries > 0 &&
            death->value.array.entries[0].kind == AMQP_FIELD_KIND_TABLE &&
            field_int(table_get(&death->value.array.entries[0].value.table,
                                "time"), &x) == 0)
            e->failed_at = x * 1000;
        else if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
            e->failed_at = (int64_t)p->timestamp * 1000;
    }
    e->body = bytes_dup(msg->body);
}

static int ab_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    *out = NULL;
    *n = 0;
    if (cli_declare(ab, t) != 0)
        return -1;
    struct tm_dlq_entry *v = NULL;
    size_t k = 0, cap = 0;
    uint64_t last = 0;
    long budget = -1;
    int rc = 0;
    /* browse: every message is read unacknowledged, then all are given
     * back (nack, requeue) to their places; the count at the first read
     * bounds the walk when dead letters keep arriving */
    while (k < max && budget != 0) {
        struct dlq_msg dm;
        long left = 0;
        int got = dlq_get(ab, t, &dm, &left);
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got == 0)
            break;
        if (budget < 0)
            budget = left + 1;
        budget--;
        last = dm.tag;
        if (k == cap) {
            cap = cap ? cap * 2 : 64;
            v = tm_realloc(v, cap * sizeof *v);
        }
        dlq_fill(&dm.msg, &v[k++]);
        amqp_destroy_message(&dm.msg);
        amqp_maybe_release_buffers(ab->cli);
    }
    if (rc == 0 && last != 0 &&
        amqp_basic_nack(ab->cli, AB_CLI_GET, last, /* multiple = */ 1,
                        /* requeue = */ 1) != AMQP_STATUS_OK) {
        tm_broker_set_error(b, EIO, "basic.nack on '%s' failed",
                            t->dead_letter);
        rc = -1;
    }
    if (rc != 0) {
        tm_dlq_entries_free(v, k);
        return -1;
    }
    /* newest first */
    for (size_t i = 0; i < k / 2; i++) {
        struct tm_dlq_entry x = v[i];
        v[i] = v[k - 1 - i];
        v[k - 1 - i] = x;
    }
    *out = v;
    *n = k;
    return 0;
}

/* dlq_walk visits the dead letters, oldest first: each one matching id
 * (all when id is NULL) is replayed to the task queue (replay) or
 * dropped, then acknowledged; the others go back where they were.
 * Returns the count handled, or -1. */
static long dlq_walk(struct ab_broker *ab, const struct tm_cfg_task *t,
                     const char *id, int replay)
{
    if (cli_declare(ab, t) != 0)
        return -1;
    long done = 0, budget = -1;
    uint64_t kept = 0;
    int rc = 0;
    while (budget != 0) {
        struct dlq_msg dm;
        long left = 0;
        int got = dlq_get(ab, t, &dm, &left);
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        if (budget < 0)
            budget = left + 1;
        budget--;
        char *mid = dlq_id(&dm.msg);
        int match = id == NULL || strcmp(mid, id) == 0;
        tm_free(mid);
        if (!match) {
            kept = dm.tag;
            amqp_destroy_message(&dm.msg);
            continue;
        }
        if (replay) {
            /* the original message again: its id, body and properties,
             * without the failure headers, attempts starting over */
            const amqp_basic_properties_t *op = &dm.msg.properties;
            const amqp_table_t *oh = (op->_flags & AMQP_BASIC_HEADERS_FLAG)
                                         ? &op->headers
                                         : NULL;
            char *origin = field_str(table_get(oh, "x-origin-id"));
            char fresh[40];
            if (origin == NULL || origin[0] == '\0') {
                tm_free(origin);
                ab_uuid(fresh, sizeof fresh);
                origin = tm_strdup(fresh);
            }
            amqp_basic_properties_t p = *op;
            p._flags &= ~(amqp_flags_t)(AMQP_BASIC_EXPIRATION_FLAG |
                                        AMQP_BASIC_USER_ID_FLAG);
            p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG |
                        AMQP_BASIC_HEADERS_FLAG |
                        AMQP_BASIC_DELIVERY_MODE_FLAG;
            p.message_id = amqp_cstring_bytes(origin);
            p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
            struct ab_hdrs h = {0};
            hdr_user(&h, oh);
            p.headers = hdr_table(&h);
            rc = cli_publish(ab, t->queue, &p, dm.msg.body.bytes,
                             dm.msg.body.len, NULL,
                             tm_now_ms() + AB_CONFIRM_TIMEOUT_MS);
            tm_free(h.e);
            tm_free(origin);
            if (rc != 0) {
                amqp_destroy_message(&dm.msg);
                return -1;
            }
        }
        amqp_destroy_message(&dm.msg);
        if (amqp_basic_ack(ab->cli, AB_CLI_GET, dm.tag, 0) !=
            AMQP_STATUS_OK) {
            tm_broker_set_error(&ab->base, EIO, "basic.ack on '%s' failed",
                                t->dead_letter);
            cli_lost(ab);
            return -1;
        }
        done++;
        amqp_maybe_release_buffers(ab->cli);
        if (id != NULL)
            break;
    }
    if (kept != 0 && amqp_basic_nack(ab->cli, AB_CLI_GET, kept,
                                     /* multiple = */ 1,
                                     /* requeue = */ 1) != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "basic.nack on '%s' failed",
                            t->dead_letter);
        cli_lost(ab);
        return -1;
    }
    /* a round trip, so that the acks are through before the exit */
    amqp_basic_qos(ab->cli, AB_CLI_GET, 0, 0, 0);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(ab->cli);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_broker_set_error(&ab->base, EIO, "%s",
                            ab_strerror(r, eb, sizeof eb));
        cli_lost(ab);
        return -1;
    }
    return done;
}

static long ab_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id)
{
    return dlq_walk((struct ab_broker *)b, t, id, 1);
}

static long ab_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    if (id != NULL)
        return dlq_walk(ab, t, id, 0);
    if (cli_declare(ab, t) != 0)
        return -1;
    amqp_queue_purge_ok_t *ok = amqp_queue_purge(
        ab->cli, AB_CLI_GET, amqp_cstring_bytes(t->dead_letter));
    amqp_rpc_reply_t r = amqp_get_rpc_reply(ab->cli);
    if (ok == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        char eb[256];
        tm_broker_set_error(b, EIO, "queue.purge '%s': %s", t->dead_letter,
                            ab_strerror(r, eb, sizeof eb));
        cli_lost(ab);
        return -1;
    }
    return (long)ok->message_count;
}

/* ---- monitoring ------------------------------------------------------- */

/* depth_count reads a queue's ready count with a passive declare: 0 for a
 * queue that does not exist; -1 when the connection failed. */
static long long depth_count(struct ab_broker *ab, const char *queue,
                             int *dead)
{
    char eb[256];
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        ab->dconn, 1, amqp_cstring_bytes(queue), /* passive = */ 1, 0, 0, 0,
        amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(ab->dconn);
    if (ok != NULL && r.reply_type == AMQP_RESPONSE_NORMAL)
        return (long long)ok->message_count;
    if (channel_error(r) &&
        channel_closed_ok(ab->dconn, 1) == AMQP_STATUS_OK &&
        ab_channel(ab->dconn, 1, 0, eb, sizeof eb) == 0)
        return reply_code(r) == AMQP_NOT_FOUND ? 0 : -1;
    tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth of '%s': %s", queue,
                 ab_strerror(r, eb, sizeof eb));
    *dead = 1;
    return -1;
}

/* ab_depth reads, on a monitoring connection of its own, the task queue's
 * and the dead-letter queue's ready counts. AMQP does not tell how many
 * deliveries are unacknowledged: pending is -1. */
static int ab_depth(struct tm_broker *b, size_t ti, long long *depth,
                    long long *pending, long long *dlq_depth)
{
    struct ab_broker *ab = (struct ab_broker *)b;
    int rc = -1;
    char eb[512];
    pthread_mutex_lock(&ab->depth_mu);
    if (ti == TM_BROKER_DEPTH_CLOSE) {
        ab_close(ab->dconn);
        ab->dconn = NULL;
        rc = 0;
        goto out;
    }
    *depth = *pending = *dlq_depth = -1;
    if (ti >= ab->ntasks)
        goto out;
    if (ab->dconn == NULL) {
        amqp_connection_state_t c = ab_open(ab, "monitor", 0, eb, sizeof eb);
        if (c == NULL || ab_channel(c, 1, 0, eb, sizeof eb) != 0) {
            tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth: %s", eb);
            ab_drop(c);
            goto out;
        }
        ab->dconn = c;
    }
    int dead = 0;
    const struct tm_cfg_task *t = ab->tasks[ti].cfg;
    *depth = depth_count(ab, t->queue, &dead);
    if (!dead)
        *dlq_depth = depth_count(ab, t->dead_letter, &dead);
    if (dead) {
        ab_drop(ab->dconn);
        ab->dconn = NULL;
        goto out;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&ab->depth_mu);
    return rc;
}

/* ---- lifecycle -------------------------------------------------------- */

static void ab_destroy(struct tm_broker *b);

static struct tm_broker *ab_create(const struct tm_cfg *cfg)
{
    struct ab_broker *ab = tm_calloc(1, sizeof *ab);
    ab->base.ops = &tm_broker_amqp_ops;
    ab->base.cfg = cfg;
    ab->ntasks = cfg->ntasks;
    ab->tasks = tm_calloc(cfg->ntasks ? cfg->ntasks : 1, sizeof *ab->tasks);
    atomic_init(&ab->ndown, (int)cfg->ntasks);
    pthread_mutex_init(&ab->depth_mu, NULL);
    for (size_t i = 0; i < cfg->ntasks; i++) {
        struct ab_task *at = &ab->tasks[i];
        at->ab = ab;
        at->cfg = &cfg->tasks[i];
        at->index = i;
        at->counted_down = 1;
        at->pub.ch = AB_CH_PUB;
        at->rpub.ch = AB_CH_REPLY;
        pthread_mutex_init(&at->io_mu, NULL);
        pthread_mutex_init(&at->q_mu, NULL);
        at->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (at->efd < 0) {
            char eb[TM_STRERRNO_BUF];
            tm_log_err(SRC, "eventfd: %s",
                       tm_strerror(errno, eb, sizeof eb));
            ab->ntasks = i + 1;
            ab_destroy(&ab->base);
            return NULL;
        }
    }
    return &ab->base;
}

static void ab_destroy(struct tm_broker *b)
{
    if (b == NULL)
        return;
    struct ab_broker *ab = (struct ab_broker *)b;
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct ab_task *at = &ab->tasks[i];
        pthread_mutex_lock(&at->io_mu);
        if (at->conn != NULL) {
            /* what settlement is left is still done before leaving */
            if (ab_flush(at) == 0)
                ab_close(at->conn);
            else
                ab_drop(at->conn);
            at->conn = NULL;
        }
        conn_reset(at);
        recvec_clear(&at->work);
        tm_free(at->work.v);
        tm_free(at->pending.v);
        tm_free(at->acks.above);
        tm_free(at->pub.st);
        tm_free(at->rpub.st);
        tm_free(at->levels);
        tm_free(at->tags);
        tm_free(at->ntags);
        pthread_mutex_unlock(&at->io_mu);
        pthread_mutex_destroy(&at->io_mu);
        pthread_mutex_destroy(&at->q_mu);
        if (at->efd >= 0)
            close(at->efd);
    }
    pthread_mutex_lock(&ab->depth_mu);
    ab_close(ab->dconn);
    ab->dconn = NULL;
    pthread_mutex_unlock(&ab->depth_mu);
    pthread_mutex_destroy(&ab->depth_mu);
    ab_close(ab->cli);
    tm_free(ab->tasks);
    tm_free(ab);
}

const struct tm_broker_ops tm_broker_amqp_ops = {
    .kind = "amqp",
    .create = ab_create,
    .connect = ab_connect_all,
    .fetch = ab_fetch,
    .settle = ab_settle,
    .wake = ab_wake,
    .tick = ab_tick,
    .tick_ms = ab_tick_ms,
    .publish = ab_publish,
    .dlq_list = ab_dlq_list,
    .dlq_replay = ab_dlq_replay,
    .dlq_purge = ab_dlq_purge,
    .destroy = ab_destroy,
    .depth = ab_depth,
    .request = ab_request,
};
