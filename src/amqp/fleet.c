/* fleet.c - the fleet on RabbitMQ (docs/rabbitmq.md, The fleet): a
 * durable fanout exchange, taskmill.fleet, and each daemon's exclusive,
 * auto-delete queue bound to it. Announcements, departures and history
 * requests are messages on it; each daemon keeps the table of the others
 * from what it receives (gone TM_FLEET_TTL_MS after last heard), and
 * answers history requests from its own ring. The fleet thread
 * (src/daemon/fleet.c) owns the connection (announce, leave, serve); the
 * table is the process's, read by list on any thread. */
#include "amqp/amqp.h"
#include "amqp/fleet_private.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/log.h"
#include "util/util.h"

#define TM_AMQP_FLEET_EXCHANGE "taskmill.fleet"
/* How long hist_read waits for the daemons' answers at most. */
#define TM_AMQP_FLEET_ANSWER_MS 2000
/* A request's or answer's body at most (1440 buckets of four counts). */
#define TM_AMQP_FLEET_BODY_MAX (256 * 1024)
/* A daemon sends its announcement again for newcomers at most this
 * often (ms), however many join. */
#define TM_AMQP_FLEET_AGAIN_MS 1000
/* A refused fleet message is logged at most this often. */
#define TM_AMQP_FLEET_LOG_MS 60000

/* One daemon heard from: its announcement as it came. */
struct fleet_entry {
    char instance[TM_AMQP_SHORTSTR_MAX + 1];
    char *json;
    int64_t heard_ms;          /* monotonic */
};

/* The process's fleet: the table (under mu); the fleet thread's
 * connection and its last announcement, sent again when a daemon it did
 * not know announces itself, so that a newcomer learns of every daemon
 * at once rather than at their next announcement (that thread only). */
static struct {
    pthread_mutex_t mu;
    struct fleet_entry *v;
    size_t n;
    amqp_connection_state_t conn;
    char *self_json;
    size_t self_len;
    int64_t again_ms;          /* monotonic: last sent again */
    int again;                 /* a newcomer came since: send again once
                                  TM_AMQP_FLEET_AGAIN_MS passed */
} fleet = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Log gates of refused messages: the fleet thread's (serve) and the admin
 * API worker's (hist_read), one line a minute each. */
static struct tm_log_gate serve_gate = TM_LOG_GATE(1, TM_AMQP_FLEET_LOG_MS);
static struct tm_log_gate read_gate = TM_LOG_GATE(1, TM_AMQP_FLEET_LOG_MS);

static void refused(struct tm_log_gate *g, const char *why)
{
    unsigned long held = 0;
    if (tm_log_gate_pass(g, tm_now_ms(), &held))
        tm_log_warn(TM_AMQP_SRC, "fleet: a message on %s was ignored: %s "
                    "(%lu more since the last line)", TM_AMQP_FLEET_EXCHANGE,
                    why, held);
}

/* table_put records instance's announcement (copied) and returns 1 when
 * the instance was not in the table; table_drop forgets it. */
static int table_put(const char *instance, const char *json, size_t len)
{
    int added = 0;
    pthread_mutex_lock(&fleet.mu);
    int64_t now = tm_now_ms();
    struct fleet_entry *e = NULL;
    for (size_t i = 0; i < fleet.n && e == NULL; i++)
        if (strcmp(fleet.v[i].instance, instance) == 0)
            e = &fleet.v[i];
    if (e == NULL) {
        /* a full table takes the place of one not heard of for longest */
        for (size_t i = 0; i < fleet.n && e == NULL; i++)
            if (now - fleet.v[i].heard_ms > TM_FLEET_TTL_MS)
                e = &fleet.v[i];
        if (e == NULL && fleet.n < TM_FLEET_MAX) {
            fleet.v = tm_realloc(fleet.v, (fleet.n + 1) * sizeof *fleet.v);
            e = &fleet.v[fleet.n++];
            e->json = NULL;
        }
        if (e == NULL) {
            pthread_mutex_unlock(&fleet.mu);
            refused(&serve_gate, "the table is full");
            return 0;
        }
        tm_snprintf(e->instance, sizeof e->instance, "%s", instance);
        added = 1;
    }
    tm_free(e->json);
    e->json = tm_strndup(json, len);
    e->heard_ms = now;
    pthread_mutex_unlock(&fleet.mu);
    return added;
}

static void table_drop(const char *instance)
{
    pthread_mutex_lock(&fleet.mu);
    for (size_t i = 0; i < fleet.n; i++)
        if (strcmp(fleet.v[i].instance, instance) == 0) {
            tm_free(fleet.v[i].json);
            fleet.v[i] = fleet.v[--fleet.n];
            break;
        }
    pthread_mutex_unlock(&fleet.mu);
}

/* table_live counts the daemons heard from in the last TM_FLEET_TTL_MS. */
static size_t table_live(void)
{
    size_t k = 0;
    int64_t now = tm_now_ms();
    pthread_mutex_lock(&fleet.mu);
    for (size_t i = 0; i < fleet.n; i++)
        if (now - fleet.v[i].heard_ms <= TM_FLEET_TTL_MS)
            k++;
    pthread_mutex_unlock(&fleet.mu);
    return k;
}

static void conn_drop(void)
{
    tm_amqp_drop(fleet.conn);
    fleet.conn = NULL;
}

/* conn_get opens the fleet thread's connection when it has none: the
 * exchange, a server-named exclusive queue bound to it, consumed without
 * acks. NULL with the broker's error set. */
static amqp_connection_state_t conn_get(struct tm_amqp_broker *ab)
{
    char eb[512];
    if (fleet.conn != NULL)
        return fleet.conn;
    amqp_connection_state_t c = tm_amqp_open(ab, "fleet", 0, NULL, eb,
                                             sizeof eb);
    if (c == NULL || tm_amqp_channel(c, 1, 0, eb, sizeof eb) != 0) {
        tm_broker_set_error(&ab->base, EIO, "fleet: %s", eb);
        tm_amqp_drop(c);
        return NULL;
    }
    sym_amqp_exchange_declare(c, 1,
                              sym_amqp_cstring_bytes(TM_AMQP_FLEET_EXCHANGE),
                              sym_amqp_cstring_bytes("fanout"),
                              /* passive = */ 0, /* durable = */ 1,
                              /* auto_delete = */ 0, /* internal = */ 0,
                              TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    amqp_queue_declare_ok_t *q = NULL;
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        q = sym_amqp_queue_declare(c, 1, TM_AMQP_EMPTY_BYTES,
                                   /* passive = */ 0, /* durable = */ 0,
                                   /* exclusive = */ 1,
                                   /* auto_delete = */ 1,
                                   TM_AMQP_EMPTY_TABLE);
        r = sym_amqp_get_rpc_reply(c);
    }
    char *name = q != NULL && r.reply_type == AMQP_RESPONSE_NORMAL
                     ? tm_amqp_bytes_dup(q->queue)
                     : NULL;
    if (name != NULL) {
        sym_amqp_queue_bind(c, 1, sym_amqp_cstring_bytes(name),
                            sym_amqp_cstring_bytes(TM_AMQP_FLEET_EXCHANGE),
                            TM_AMQP_EMPTY_BYTES, TM_AMQP_EMPTY_TABLE);
        r = sym_amqp_get_rpc_reply(c);
    }
    if (name != NULL && r.reply_type == AMQP_RESPONSE_NORMAL) {
        sym_amqp_basic_consume(c, 1, sym_amqp_cstring_bytes(name),
                               TM_AMQP_EMPTY_BYTES, /* no_local = */ 0,
                               /* no_ack = */ 1, /* exclusive = */ 1,
                               TM_AMQP_EMPTY_TABLE);
        r = sym_amqp_get_rpc_reply(c);
    }
    tm_free(name);
    if (name == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(&ab->base, EIO, "fleet: declaring %s: %s",
                            TM_AMQP_FLEET_EXCHANGE,
                            tm_amqp_strerror(r, eb, sizeof eb));
        tm_amqp_drop(c);
        return NULL;
    }
    fleet.conn = c;
    return c;
}

/* send publishes body with type (and app_id instance, reply_to and
 * correlation id when given) to exchange ex with routing key rk. */
static int send(struct tm_amqp_broker *ab, amqp_connection_state_t c,
                const char *ex, const char *rk, const char *type,
                const char *instance, const char *reply_to,
                const char *corr, const char *body, size_t len)
{
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG |
               AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.type = sym_amqp_cstring_bytes(type);
    p.content_type = sym_amqp_cstring_bytes("application/json");
    p.delivery_mode = 1; /* transient */
    if (instance != NULL) {
        p._flags |= AMQP_BASIC_APP_ID_FLAG;
        p.app_id = sym_amqp_cstring_bytes(instance);
    }
    if (reply_to != NULL) {
        p._flags |= AMQP_BASIC_REPLY_TO_FLAG;
        p.reply_to = sym_amqp_cstring_bytes(reply_to);
    }
    if (corr != NULL) {
        p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
        p.correlation_id = sym_amqp_cstring_bytes(corr);
    }
    amqp_bytes_t b = {.len = len, .bytes = (void *)body};
    int rc = sym_amqp_basic_publish(c, 1, sym_amqp_cstring_bytes(ex),
                                    sym_amqp_cstring_bytes(rk),
                                    /* mandatory = */ 0,
                                    /* immediate = */ 0, &p, b);
    if (rc != AMQP_STATUS_OK) {
        tm_broker_set_error(&ab->base, EIO, "fleet: basic.publish: %s",
                            sym_amqp_error_string2(rc));
        return -1;
    }
    return 0;
}

/* bytes_is says whether b holds exactly s. */
static int bytes_is(amqp_bytes_t b, const char *s)
{
    return b.len == strlen(s) && memcmp(b.bytes, s, b.len) == 0;
}

/* prop copies an AMQP short string property into out (size
 * TM_AMQP_SHORTSTR_MAX + 1); 0, or -1 when absent or empty. */
static int prop(const amqp_basic_properties_t *p, amqp_flags_t flag,
                amqp_bytes_t b, char *out)
{
    if (!(p->_flags & flag) || b.len == 0 || b.len > TM_AMQP_SHORTSTR_MAX ||
        memchr(b.bytes, '\0', b.len) != NULL)
        return -1;
    memcpy(out, b.bytes, b.len);
    out[b.len] = '\0';
    return 0;
}

int tm_amqp_fleet_announce(struct tm_broker *b, const char *instance,
                           const char *json, size_t len)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    amqp_connection_state_t c = conn_get(ab);
    if (c == NULL)
        return -1;
    /* this daemon is in its own table at once, as its message comes back
     * to it too */
    table_put(instance, json, len);
    tm_free(fleet.self_json);
    fleet.self_json = tm_strndup(json, len);
    fleet.self_len = len;
    if (send(ab, c, TM_AMQP_FLEET_EXCHANGE, "", "announce", instance, NULL,
             NULL, json, len) != 0) {
        conn_drop();
        return -1;
    }
    return 0;
}

int tm_amqp_fleet_leave(struct tm_broker *b, const char *instance)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    table_drop(instance);
    tm_free(fleet.self_json);
    fleet.self_json = NULL;
    amqp_connection_state_t c = conn_get(ab);
    if (c == NULL)
        return -1;
    int rc = send(ab, c, TM_AMQP_FLEET_EXCHANGE, "", "leave", instance, NULL,
                  NULL, "{}", 2);
    /* the exclusive queue goes with the connection */
    tm_amqp_close(c);
    fleet.conn = NULL;
    return rc;
}

int tm_amqp_fleet_list(struct tm_broker *b, char ***out, size_t *n)
{
    (void)b;
    int64_t now = tm_now_ms();
    pthread_mutex_lock(&fleet.mu);
    char **v = tm_calloc(fleet.n + 1, sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < fleet.n; i++)
        if (now - fleet.v[i].heard_ms <= TM_FLEET_TTL_MS)
            v[k++] = tm_strdup(fleet.v[i].json);
    pthread_mutex_unlock(&fleet.mu);
    *out = v;
    *n = k;
    return 0;
}

/* struct hist_req is a history request, read from its JSON body. */
struct hist_req {
    char task[TM_AMQP_SHORTSTR_MAX + 1]; /* "" = every task */
    int hourly;
    int64_t first;
    size_t n;
};

static int req_parse(const char *body, size_t len, struct hist_req *q)
{
    memset(q, 0, sizeof *q);
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "task");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "hourly");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "first");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(j, "n");
    int ok = cJSON_IsObject(j) && (cJSON_IsNull(t) || cJSON_IsString(t)) &&
             cJSON_IsBool(h) && cJSON_IsNumber(f) && cJSON_IsNumber(n) &&
             f->valuedouble >= 0 && f->valuedouble < 4294967295.0 &&
             n->valuedouble >= 1 && n->valuedouble <= TM_HIST_MINUTES;
    if (ok && cJSON_IsString(t)) {
        ok = strlen(t->valuestring) <= TM_AMQP_SHORTSTR_MAX;
        if (ok)
            tm_snprintf(q->task, sizeof q->task, "%s", t->valuestring);
    }
    if (ok) {
        q->hourly = cJSON_IsTrue(h);
        q->first = (int64_t)f->valuedouble;
        q->n = (size_t)n->valuedouble;
    }
    cJSON_Delete(j);
    return ok ? 0 : -1;
}

/* answer_request answers a history request (env) from this daemon's
 * ring through answer, to the request's reply_to. */
static int answer_request(struct tm_amqp_broker *ab,
                          const amqp_envelope_t *env, const char *self,
                          void (*answer)(void *ctx, const char *task,
                                         int hourly, int64_t first, size_t n,
                                         uint64_t (*out)[TM_HK_N]),
                          void *ctx)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    char reply_to[TM_AMQP_SHORTSTR_MAX + 1], corr[TM_AMQP_SHORTSTR_MAX + 1];
    struct hist_req q;
    if (prop(p, AMQP_BASIC_REPLY_TO_FLAG, p->reply_to, reply_to) != 0 ||
        prop(p, AMQP_BASIC_CORRELATION_ID_FLAG, p->correlation_id, corr) !=
            0 ||
        env->message.body.len > TM_AMQP_FLEET_BODY_MAX ||
        req_parse(env->message.body.bytes, env->message.body.len, &q) != 0) {
        refused(&serve_gate, "a history request without reply_to, correlation_id or a "
                "valid body");
        return 0;
    }
    uint64_t (*c)[TM_HK_N] = tm_calloc(q.n, sizeof *c);
    answer(ctx, q.task[0] != '\0' ? q.task : NULL, q.hourly, q.first, q.n,
           c);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "instance", self);
    cJSON *a = cJSON_AddArrayToObject(j, "points");
    for (size_t i = 0; i < q.n; i++) {
        cJSON *pt = cJSON_CreateArray();
        for (int k = 0; k < TM_HK_N; k++)
            cJSON_AddItemToArray(pt, cJSON_CreateNumber((double)c[i][k]));
        cJSON_AddItemToArray(a, pt);
    }
    tm_free(c);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int rc = text != NULL ? send(ab, fleet.conn, "", reply_to, "history",
                                 self, NULL, corr, text, strlen(text))
                          : 0;
    cJSON_free(text);
    return rc;
}

int tm_amqp_fleet_serve(struct tm_broker *b, const char *self,
                        int64_t timeout_ms,
                        void (*answer)(void *ctx, const char *task,
                                       int hourly, int64_t first, size_t n,
                                       uint64_t (*out)[TM_HK_N]),
                        void *ctx)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    char eb[256];
    amqp_connection_state_t c = conn_get(ab);
    if (c == NULL)
        return -1;
    int64_t until = tm_now_ms() + timeout_ms;
    for (;;) {
        int64_t now = tm_now_ms();
        if (fleet.again && fleet.self_json != NULL &&
            now - fleet.again_ms >= TM_AMQP_FLEET_AGAIN_MS) {
            /* a newcomer hears of this daemon now rather than at its next
             * announcement; many joining at once cost one message */
            fleet.again = 0;
            fleet.again_ms = now;
            if (send(ab, c, TM_AMQP_FLEET_EXCHANGE, "", "announce", self,
                     NULL, NULL, fleet.self_json, fleet.self_len) != 0) {
                conn_drop();
                return -1;
            }
        }
        int64_t left = until - now;
        if (fleet.again && fleet.again_ms + TM_AMQP_FLEET_AGAIN_MS - now < left)
            left = fleet.again_ms + TM_AMQP_FLEET_AGAIN_MS - now;
        if (left <= 0 && !fleet.again && until <= now)
            return 0;
        struct timeval tv = tm_amqp_tv_ms(left > 0 ? left : 0);
        amqp_envelope_t env;
        sym_amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = sym_amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            const amqp_basic_properties_t *p = &env.message.properties;
            char inst[TM_AMQP_SHORTSTR_MAX + 1];
            int rc = 0;
            if (!(p->_flags & AMQP_BASIC_TYPE_FLAG)) {
                refused(&serve_gate, "no type");
            } else if (bytes_is(p->type, "history-request")) {
                rc = answer_request(ab, &env, self, answer, ctx);
            } else if (prop(p, AMQP_BASIC_APP_ID_FLAG, p->app_id, inst) != 0) {
                refused(&serve_gate, "no app_id naming the daemon");
            } else if (bytes_is(p->type, "announce")) {
                if (env.message.body.len > TM_FLEET_ANNOUNCE_MAX)
                    refused(&serve_gate, "an announcement over 64 KiB");
                else if (table_put(inst, env.message.body.bytes,
                                   env.message.body.len) &&
                         strcmp(inst, self) != 0)
                    fleet.again = 1;
            } else if (bytes_is(p->type, "leave")) {
                table_drop(inst);
            } else {
                refused(&serve_gate, "an unknown type");
            }
            sym_amqp_destroy_envelope(&env);
            if (rc != 0) {
                conn_drop();
                return -1;
            }
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT) {
            if (tm_now_ms() >= until)
                return 0;
            continue; /* the time to send again came */
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            if (tm_amqp_frame_ends(c, eb, sizeof eb)) {
                tm_broker_set_error(b, EIO, "fleet: the broker sent %s", eb);
                conn_drop();
                return -1;
            }
            continue;
        }
        tm_broker_set_error(b, EIO, "fleet: reading: %s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        conn_drop();
        return -1;
    }
}

/* add_answer adds an answer's points (a JSON array of n arrays of four
 * counts) to out; -1 when it is not one. */
static int add_answer(const char *body, size_t len, size_t n,
                      uint64_t (*out)[TM_HK_N], char *inst, size_t isize)
{
    cJSON *j = cJSON_ParseWithLength(body, len);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "instance");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(j, "points");
    int ok = cJSON_IsString(in) && cJSON_IsArray(pts) &&
             (size_t)cJSON_GetArraySize(pts) == n;
    const cJSON *pt;
    size_t i = 0;
    if (ok)
        cJSON_ArrayForEach(pt, pts) {
            ok = ok && cJSON_IsArray(pt) && cJSON_GetArraySize(pt) == TM_HK_N;
            for (int k = 0; ok && k < TM_HK_N; k++) {
                const cJSON *v = cJSON_GetArrayItem(pt, k);
                ok = cJSON_IsNumber(v) && v->valuedouble >= 0 &&
                     v->valuedouble < 1e15;
            }
            i++;
        }
    if (ok) {
        tm_snprintf(inst, isize, "%s", in->valuestring);
        i = 0;
        cJSON_ArrayForEach(pt, pts) {
            for (int k = 0; k < TM_HK_N; k++)
                out[i][k] += (uint64_t)cJSON_GetArrayItem(pt, k)->valuedouble;
            i++;
        }
    }
    cJSON_Delete(j);
    return ok ? 0 : -1;
}

int tm_amqp_fleet_hist_read(struct tm_broker *b, const char *task,
                            int hourly, int64_t first, size_t n,
                            uint64_t (*out)[TM_HK_N])
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    char eb[512];
    int rc = -1;
    char *rq = NULL;
    char **seen = NULL;
    size_t nseen = 0;
    /* the answers expected: every daemon in the table (this one too) */
    size_t want = table_live();
    amqp_connection_state_t c = tm_amqp_open(ab, "fleet-history", 0, NULL,
                                             eb, sizeof eb);
    if (c == NULL || tm_amqp_channel(c, 1, 0, eb, sizeof eb) != 0) {
        tm_broker_set_error(b, EIO, "fleet: %s", eb);
        goto out;
    }
    amqp_queue_declare_ok_t *q = sym_amqp_queue_declare(
        c, 1, TM_AMQP_EMPTY_BYTES, /* passive = */ 0, /* durable = */ 0,
        /* exclusive = */ 1, /* auto_delete = */ 1, TM_AMQP_EMPTY_TABLE);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (q == NULL || r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "fleet: a reply queue: %s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        goto out;
    }
    rq = tm_amqp_bytes_dup(q->queue);
    sym_amqp_basic_consume(c, 1, sym_amqp_cstring_bytes(rq),
                           TM_AMQP_EMPTY_BYTES, /* no_local = */ 0,
                           /* no_ack = */ 1, /* exclusive = */ 1,
                           TM_AMQP_EMPTY_TABLE);
    r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_broker_set_error(b, EIO, "fleet: consuming the reply queue: %s",
                            tm_amqp_strerror(r, eb, sizeof eb));
        goto out;
    }
    char corr[40];
    tm_uuid4(corr, sizeof corr);
    cJSON *j = cJSON_CreateObject();
    if (task != NULL)
        cJSON_AddStringToObject(j, "task", task);
    else
        cJSON_AddNullToObject(j, "task");
    cJSON_AddBoolToObject(j, "hourly", hourly);
    cJSON_AddNumberToObject(j, "first", (double)first);
    cJSON_AddNumberToObject(j, "n", (double)n);
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    int sent = body != NULL
                   ? send(ab, c, TM_AMQP_FLEET_EXCHANGE, "", "history-request",
                          NULL, rq, corr, body, strlen(body))
                   : -1;
    cJSON_free(body);
    if (sent != 0)
        goto out;
    seen = tm_calloc(want + 1, sizeof *seen);
    int64_t until = tm_now_ms() + TM_AMQP_FLEET_ANSWER_MS;
    while (nseen < want) {
        int64_t left = until - tm_now_ms();
        if (left <= 0)
            break;
        struct timeval tv = tm_amqp_tv_ms(left);
        amqp_envelope_t env;
        sym_amqp_maybe_release_buffers(c);
        r = sym_amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                r.library_error == AMQP_STATUS_UNEXPECTED_STATE &&
                !tm_amqp_frame_ends(c, eb, sizeof eb))
                continue;
            break; /* the wait is over (timeout) or the connection gone */
        }
        const amqp_basic_properties_t *p = &env.message.properties;
        char inst[TM_AMQP_SHORTSTR_MAX + 1];
        int mine = (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) &&
                   bytes_is(p->correlation_id, corr);
        if (mine && env.message.body.len <= TM_AMQP_FLEET_BODY_MAX) {
            /* an instance counted once, whatever it sends */
            uint64_t (*one)[TM_HK_N] = tm_calloc(n, sizeof *one);
            if (add_answer(env.message.body.bytes, env.message.body.len, n,
                           one, inst, sizeof inst) == 0) {
                int dup = 0;
                for (size_t i = 0; i < nseen && !dup; i++)
                    dup = strcmp(seen[i], inst) == 0;
                if (!dup) {
                    seen[nseen++] = tm_strdup(inst);
                    for (size_t i = 0; i < n; i++)
                        for (int k = 0; k < TM_HK_N; k++)
                            out[i][k] += one[i][k];
                }
            } else {
                refused(&read_gate, "a history answer that is not one");
            }
            tm_free(one);
        }
        sym_amqp_destroy_envelope(&env);
    }
    if (nseen < want)
        tm_log_write(TM_LOG_DEBUG, TM_AMQP_SRC, NULL, NULL,
                     "fleet: %zu of %zu daemons answered the history "
                     "request", nseen, want);
    rc = 0;
out:
    for (size_t i = 0; i < nseen; i++)
        tm_free(seen[i]);
    tm_free(seen);
    tm_free(rq);
    if (c != NULL)
        tm_amqp_close(c);
    return rc;
}
