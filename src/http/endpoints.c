/* endpoints.c - the HTTP endpoints: /ping, /healthz, /metrics, /status
 * and /asyncapi.json, their routing and the bearer token check. */
#include "http/http_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <arpa/inet.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "http/asyncapi.h"
#include "broker/broker.h"
#include "daemon/daemon.h"
#include "util/util.h"

struct reply {
    unsigned status;
    const char *type;
    char *body;       /* owned; malloc'd (MHD frees it) */
    size_t len;
    const char *www_auth;     /* WWW-Authenticate value for 401 */
};

typedef void (*endpoint_fn)(struct tm_daemon *d, struct reply *r);

#define TYPE_JSON "application/json"
#define TYPE_PROM "text/plain; version=0.0.4; charset=utf-8"

static void reply_text(struct reply *r, unsigned status, const char *type,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reply_text(struct reply *r, unsigned status, const char *type,
                       const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    r->body = tm_malloc((size_t)(n > 0 ? n : 0) + 1);
    va_start(ap, fmt);
    vsnprintf(r->body, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    va_end(ap);
    r->len = (size_t)(n > 0 ? n : 0);
    r->status = status;
    r->type = type;
}

/* reply_json sends j (deleted here) as the body, with a final newline. */
static void reply_json(struct reply *r, unsigned status, cJSON *j)
{
    char *text = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (text == NULL) {
        reply_text(r, 500, TYPE_JSON, "{\"error\":\"out of memory\"}\n");
        return;
    }
    size_t n = strlen(text);
    r->body = tm_malloc(n + 2);
    memcpy(r->body, text, n);
    r->body[n] = '\n';
    r->body[n + 1] = '\0';
    cJSON_free(text);
    r->len = n + 1;
    r->status = status;
    r->type = TYPE_JSON;
}

/* reply_status sends {"status": status[, "reason": reason]}. */
static void reply_status(struct reply *r, unsigned code, const char *status,
                         const char *reason)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "status", status);
    if (reason != NULL)
        cJSON_AddStringToObject(j, "reason", reason);
    reply_json(r, code, j);
}

/* The handlers that render a generation (/metrics, /status,
 * /asyncapi.json) hold a reference to the current one while they do
 * (tm_gen_current), not gen_lock: a reload publishes the next generation
 * meanwhile, and the one rendered is freed by whichever holder drops the
 * last reference (the handler's own only when the reload retired it
 * during the render). /ping and /healthz read a few fields under gen_lock (a
 * reader lock that only a reload takes for writing, briefly; the task
 * hot path never takes it), under which the published generation is
 * never freed. */

static void cb_ping(struct tm_daemon *d, struct reply *r)
{
    char why[256];
    pthread_rwlock_rdlock(&d->gen_lock);
    int ready = tm_daemon_ready(d, why, sizeof why);
    pthread_rwlock_unlock(&d->gen_lock);
    if (ready)
        reply_status(r, 200, "ok", NULL);
    else
        reply_status(r, 503, "unavailable", why);
}

static void cb_healthz(struct tm_daemon *d, struct reply *r)
{
    if (tm_daemon_alive(d))
        reply_status(r, 200, "ok", NULL);
    else
        reply_status(r, 503, "unavailable",
                     "a daemon loop is not responsive");
}

static void cb_metrics(struct tm_daemon *d, struct reply *r)
{
    tm_http_depth_want();
    struct tm_gen *g = tm_gen_current(d);
    r->body = tm_metrics_render(d, g, &r->len);
    tm_gen_unref(g);
    r->status = 200;
    r->type = TYPE_PROM;
}

/* round3 rounds to three decimals, so that JSON shows 12.345, not
 * 12.345000000000001. */
static double round3(double v)
{
    double x = v * 1000.0;
    return (double)(long long)(x + (x >= 0 ? 0.5 : -0.5)) / 1000.0;
}

void tm_http_add_broker_pool(struct cJSON *j, const struct tm_gen *g)
{
    cJSON *b = cJSON_AddObjectToObject(j, "broker");
    cJSON_AddStringToObject(b, "kind", g->broker != NULL
                                           ? g->broker->ops->kind
                                           : g->cfg->url.scheme);
    cJSON_AddStringToObject(b, "url", g->cfg->url.redacted);
    cJSON_AddBoolToObject(b, "connected",
                          g->broker != NULL && atomic_load(&g->broker->up));
    /* the nodes (broker.url's list, or those the adapter found: a Redis
     * cluster's masters, the sentinels' master) with their state; node:
     * the first one up, null while not connected */
    struct tm_broker_node *nodes = tm_calloc(TM_BROKER_NODES_MAX,
                                             sizeof *nodes);
    size_t nn = tm_broker_nodes(g->cfg, g->broker, nodes,
                                TM_BROKER_NODES_MAX);
    int connected = g->broker != NULL && atomic_load(&g->broker->up);
    size_t first = 0;
    while (first < nn && !nodes[first].up)
        first++;
    if (connected && first < nn)
        cJSON_AddStringToObject(b, "node", nodes[first].name);
    else
        cJSON_AddNullToObject(b, "node");
    cJSON *na = cJSON_AddArrayToObject(b, "nodes");
    for (size_t i = 0; i < nn; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "node", nodes[i].name);
        cJSON_AddBoolToObject(o, "up", nodes[i].up);
        cJSON_AddItemToArray(na, o);
    }
    tm_free(nodes);
    cJSON *p = cJSON_AddObjectToObject(j, "pool");
    cJSON_AddStringToObject(p, "kind", g->cfg->pool_kind == TM_POOL_FORK
                                           ? "fork"
                                           : "thread");
    cJSON_AddNumberToObject(p, "size", g->pool != NULL ? g->pool->size
                                                       : g->cfg->pool_size);
    cJSON_AddNumberToObject(p, "busy", g->pool != NULL
                                           ? g->pool->ops->busy(g->pool)
                                           : 0);
    /* runs settled at their deadline whose code never returned */
    struct tm_pool_stuck *st;
    size_t ns = tm_pool_stuck_runs(g->pool, &st);
    int64_t now_ns = tm_now_ns();
    cJSON *sa = cJSON_AddArrayToObject(p, "stuck");
    for (size_t i = 0; i < ns; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "task",
                                st[i].task_index < g->ntasks
                                    ? g->tasks[st[i].task_index].cfg->name
                                    : "");
        cJSON_AddStringToObject(o, "id", st[i].id);
        cJSON_AddNumberToObject(
            o, "past_deadline_ms",
            (double)((now_ns - st[i].deadline_ns) / 1000000));
        cJSON_AddItemToArray(sa, o);
    }
    tm_free(st);
}

/* add_count adds v, or null when the broker could not tell (v < 0) or
 * was never read. */
static void add_count(cJSON *o, const char *name, long long v, int read)
{
    if (read && v >= 0)
        cJSON_AddNumberToObject(o, name, (double)v);
    else
        cJSON_AddNullToObject(o, name);
}

cJSON *tm_http_task_json(const struct tm_gen *g, size_t i, int64_t now_ns,
                         int api)
{
    const struct tm_task *t = &g->tasks[i];
    const struct tm_cfg_task *c = t->cfg;
    const struct tm_task_stats *s = &t->stats;
    cJSON *o = cJSON_CreateObject();
    if (api)
        cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "queue", c->queue);
    if (api)
        cJSON_AddStringToObject(o, "dead_letter", c->dead_letter);
    cJSON_AddNumberToObject(o, "inflight", (double)atomic_load(&s->inflight));
    cJSON *oc = cJSON_AddObjectToObject(o, "outcomes");
    for (int k = 1; k < TM_OUT_COUNT; k++)
        cJSON_AddNumberToObject(oc, tm_outcome_label((enum tm_outcome)k),
                                (double)atomic_load_explicit(
                                    &s->outcomes[k], memory_order_relaxed));
    cJSON_AddNumberToObject(o, "retries", (double)atomic_load(&s->retries));
    cJSON_AddNumberToObject(o, "dead_lettered",
                            (double)atomic_load(&s->dead_lettered));
    double r1, r60, p50, p99;
    tm_rate_read(&s->win->rate, now_ns, g->d->start_mono_ms * 1000000LL,
                 &r1, &r60);
    tm_durwin_percentiles(&s->win->durs, &p50, &p99);
    cJSON_AddNumberToObject(o, "rate_1s", round3(r1));
    cJSON_AddNumberToObject(o, "rate_60s", round3(r60));
    cJSON_AddNumberToObject(o, "p50_ms", round3(p50));
    cJSON_AddNumberToObject(o, "p99_ms", round3(p99));
    cJSON_AddStringToObject(o, "circuit",
                            tm_circuit_state_name(tm_circuit_state(
                                &t->circuit, now_ns / 1000000LL)));
    cJSON_AddBoolToObject(o, "paused", tm_broker_paused(g->broker, i));
    /* the depth refresher's last reads (depth.c); null when never read
     * or the broker cannot tell */
    int read = atomic_load(&s->depth_at_ms) != 0;
    if (api) {
        add_count(o, "queue_depth", atomic_load(&s->queue_depth), read);
        add_count(o, "pending", atomic_load(&s->queue_pending), read);
        add_count(o, "dead_letters", atomic_load(&s->dead_letter_depth),
                  read);
    }
    /* delayed messages waiting */
    add_count(o, "scheduled", atomic_load(&s->scheduled_depth), read);
    if (!api)
        return o;
    cJSON *l = cJSON_AddObjectToObject(o, "limits");
    cJSON_AddNumberToObject(l, "prefetch", c->prefetch);
    cJSON_AddNumberToObject(l, "timeout_ms", (double)c->timeout_ms);
    cJSON_AddNumberToObject(l, "max_retries", c->max_retries);
    cJSON_AddNumberToObject(l, "backoff_ms", (double)c->backoff_ms);
    cJSON_AddNumberToObject(l, "max_backoff_ms", (double)c->max_backoff_ms);
    cJSON_AddNumberToObject(l, "max_payload", (double)c->max_payload);
    cJSON_AddStringToObject(l, "on_error", c->on_error == TM_ON_ERROR_REJECT
                                               ? "reject"
                                               : "requeue");
    return o;
}

static void cb_status(struct tm_daemon *d, struct reply *r)
{
    tm_http_depth_want();
    int64_t now_ns = tm_now_ns();
    char reload_error[sizeof d->last_reload_error];
    /* the generation and the last reload's error as of one moment */
    pthread_rwlock_rdlock(&d->gen_lock);
    struct tm_gen *g = d->gen;
    tm_gen_ref(g);
    memcpy(reload_error, d->last_reload_error, sizeof reload_error);
    pthread_rwlock_unlock(&d->gen_lock);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "version", TM_VERSION);
    cJSON_AddNumberToObject(j, "uptime_seconds",
                            (double)((tm_now_ms() - d->start_mono_ms) /
                                     1000));
    cJSON *cf = cJSON_AddObjectToObject(j, "config");
    cJSON_AddNumberToObject(cf, "generation",
                            atomic_load(&d->config_generation));
    cJSON_AddBoolToObject(cf, "last_reload_successful",
                          atomic_load(&d->last_reload_ok));
    char when[40];
    tm_rfc3339(atomic_load(&d->last_reload_ok_wall_ms), when, sizeof when);
    cJSON_AddStringToObject(cf, "last_reload_success_time", when);
    if (reload_error[0] != '\0')
        cJSON_AddStringToObject(cf, "last_reload_error", reload_error);
    tm_http_add_broker_pool(j, g);
    cJSON *tasks = cJSON_AddObjectToObject(j, "tasks");
    for (size_t i = 0; i < g->ntasks; i++)
        cJSON_AddItemToObject(tasks, g->tasks[i].cfg->name,
                              tm_http_task_json(g, i, now_ns, 0));
    tm_gen_unref(g);
    reply_json(r, 200, j);
}

static void cb_asyncapi(struct tm_daemon *d, struct reply *r)
{
    struct tm_gen *g = tm_gen_current(d);
    r->body = tm_asyncapi_render(g->cfg, g->tasks, g->ntasks, &r->len);
    tm_gen_unref(g);
    if (r->body == NULL) {
        reply_text(r, 500, TYPE_JSON, "{\"error\":\"out of memory\"}\n");
        return;
    }
    r->status = 200;
    r->type = TYPE_JSON;
}

static const struct {
    const char *path;
    endpoint_fn fn;
    int protected;    /* needs the bearer token when one is set */
} endpoints[] = {
    {"/ping", cb_ping, 0},
    {"/healthz", cb_healthz, 0},
    {"/metrics", cb_metrics, 0},
    {"/status", cb_status, 1},
    {"/asyncapi.json", cb_asyncapi, 1},
};

/* same_secret compares a and b in time that depends on b's length only
 * (b is the configured token). Returns 1 when equal. */
static int same_secret(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char x = alen > 0 ? (unsigned char)a[i % alen] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}

/* authorized checks "Authorization: Bearer <token>". Returns 1 when it
 * matches; otherwise 0 with *presented set when a token was given. */
static int authorized(struct MHD_Connection *conn, const char *token,
                      int *presented)
{
    *presented = 0;
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    v += 7;
    while (*v == ' ')
        v++;
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    *presented = 1;
    return same_secret(v, n, token);
}

int tm_http_token_ok(struct tm_daemon *d, struct MHD_Connection *conn,
                     int *presented)
{
    *presented = 0;
    pthread_rwlock_rdlock(&d->gen_lock);
    const char *token = d->cfg->http_token;
    int ok = token == NULL || authorized(conn, token, presented);
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}

/* port_ok accepts the ":PORT" part of a Host header: "" or ':' and 1 to
 * 5 digits. */
static int port_ok(const char *p)
{
    if (*p == '\0')
        return 1;
    if (*p != ':')
        return 0;
    size_t n = strspn(p + 1, "0123456789");
    return n >= 1 && n <= 5 && p[1 + n] == '\0';
}

/*
 * host_ok checks a Host header value against DNS rebinding: an IPv4
 * literal, a bracketed IPv6 literal, "localhost" (each with or without a
 * port), or one of http.allowed_hosts (as configured now; gen_lock is
 * taken here). A name may end in one dot; names compare without regard
 * to case.
 */
static int host_ok(struct tm_daemon *d, const char *v)
{
    char host[256];
    unsigned char addr[16];
    if (v[0] == '[') {
        const char *end = strchr(v, ']');
        if (end == NULL || (size_t)(end - v - 1) >= sizeof host)
            return 0;
        tm_snprintf(host, sizeof host, "%.*s", (int)(end - v - 1), v + 1);
        return port_ok(end + 1) && inet_pton(AF_INET6, host, addr) == 1;
    }
    size_t n = strcspn(v, ":");
    if (n == 0 || n >= sizeof host || !port_ok(v + n))
        return 0;
    memcpy(host, v, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, addr) == 1)
        return 1;
    if (host[n - 1] == '.')
        host[--n] = '\0';
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    int ok = 0;
    pthread_rwlock_rdlock(&d->gen_lock);
    for (size_t i = 0; i < d->cfg->http_nallowed_hosts && !ok; i++)
        ok = strcasecmp(host, d->cfg->http_allowed_hosts[i]) == 0;
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}

int tm_http_host_ok(struct tm_daemon *d, struct MHD_Connection *conn)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_HOST);
    /* no Host at all (HTTP/1.0; MHD refuses an HTTP/1.1 request without
     * one): not a browser, which always sends it, so no rebinding */
    return v == NULL || host_ok(d, v);
}

/* Marks a request whose headers were seen (MHD's per-request pointer). */
static int request_seen;

void *tm_http_seen_marker(void)
{
    return &request_seen;
}

void tm_http_request_done(void *req_cls)
{
    if (req_cls != NULL && req_cls != &request_seen)
        tm_http_api_req_free(req_cls);
}

/* misdirected answers 421 to a request whose Host is not this daemon's
 * (see host_ok); any body it has is not read. */
static enum MHD_Result misdirected(struct MHD_Connection *conn, int *queued)
{
    static const char text[] =
        "{\"error\":\"misdirected request: the Host header is not an IP "
        "address, localhost or a name of http.allowed_hosts\"}\n";
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        sizeof text - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, TYPE_JSON);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    tm_http_secure_headers(resp);
    enum MHD_Result ret = MHD_queue_response(conn, 421, resp);
    MHD_destroy_response(resp);
    *queued = ret == MHD_YES;
    return ret;
}

enum MHD_Result tm_http_answer(struct tm_daemon *d,
                               struct MHD_Connection *conn, const char *url,
                               const char *method, const char *upload_data,
                               size_t *upload_data_size, void **req_cls,
                               int *queued)
{
    struct reply r = {0};
    *queued = 0;
    /* the probes and the scraper answer any Host; the rest is checked
     * once, on the headers */
    int probe = strcmp(url, "/ping") == 0 || strcmp(url, "/healthz") == 0 ||
                strcmp(url, "/metrics") == 0;
    if (!probe && *req_cls == NULL && !tm_http_host_ok(d, conn))
        return misdirected(conn, queued);
    if (tm_http_api_path(url))
        return tm_http_api_answer(d, conn, url, method, upload_data,
                                  upload_data_size, req_cls, queued);
    if (tm_http_console_path(url))
        return tm_http_console_answer(conn, url, method, upload_data_size,
                                      req_cls, queued);
    size_t n = sizeof endpoints / sizeof endpoints[0], e = n;
    for (size_t i = 0; i < n; i++)
        if (strcmp(url, endpoints[i].path) == 0)
            e = i;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int presented = 0;
    if (e == n) {
        /* refused at once, whatever body follows (not read) */
        reply_text(&r, 404, TYPE_JSON, "{\"error\":\"not found\"}\n");
    } else if (!get) {
        reply_text(&r, 405, TYPE_JSON,
                   "{\"error\":\"method not allowed\"}\n");
    } else if (*req_cls == NULL) {
        /* headers only: answer once the request is complete, so that
         * the connection can be kept alive */
        *req_cls = &request_seen;
        return MHD_YES;
    } else if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a GET body is ignored */
        return MHD_YES;
    } else if (endpoints[e].protected &&
               !tm_http_token_ok(d, conn, &presented)) {
        reply_text(&r, 401, TYPE_JSON, "{\"error\":\"unauthorized\"}\n");
        r.www_auth = presented
                         ? "Bearer realm=\"taskmill\", error=\"invalid_token\""
                         : "Bearer realm=\"taskmill\"";
    } else {
        endpoints[e].fn(d, &r);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r.len, r.body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        tm_free(r.body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r.type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (r.status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (r.www_auth != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                r.www_auth);
    enum MHD_Result ret = MHD_queue_response(conn, r.status, resp);
    MHD_destroy_response(resp);
    *queued = ret == MHD_YES;
    return ret;
}
