/* http.c - the embedded HTTP server (libmicrohttpd) and its endpoints. */
#include "daemon.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "asyncapi.h"
#include "log.h"
#include "util.h"

#define SRC "http"

/* Connections served at once; more wait in the kernel's backlog. */
#define TM_HTTP_CONN_LIMIT 256
/* Seconds an idle connection is kept. */
#define TM_HTTP_TIMEOUT_S 10
/* Queue depths are read from the broker this often while it is up, and
 * retried this soon after a failed read or while it is down. */
#define TM_DEPTH_REFRESH_MS 5000
#define TM_DEPTH_RETRY_MS 1000

struct tm_http {
    struct MHD_Daemon *mhd;
    struct tm_daemon *d;
    /* the depth refresher: reads queue depths off the HTTP thread */
    pthread_t refresher;
    int refresher_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                 /* under mu */
    int err;
    char errstr[256];
};

struct reply {
    unsigned status;
    const char *type;
    char *body;       /* owned; malloc'd (MHD frees it) */
    size_t len;
    const char *www_auth;     /* WWW-Authenticate value for 401 */
};

typedef void (*endpoint_fn)(struct tm_http *h, struct reply *r);

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

/* The handlers read the current generation's config, tasks, broker and
 * pool under the daemon's gen_lock (a reader lock that only a reload
 * takes for writing, briefly; the task hot path never takes it). */

static void cb_ping(struct tm_http *h, struct reply *r)
{
    char why[256];
    pthread_rwlock_rdlock(&h->d->gen_lock);
    int ready = tm_daemon_ready(h->d, why, sizeof why);
    pthread_rwlock_unlock(&h->d->gen_lock);
    if (ready)
        reply_status(r, 200, "ok", NULL);
    else
        reply_status(r, 503, "unavailable", why);
}

static void cb_healthz(struct tm_http *h, struct reply *r)
{
    if (tm_daemon_alive(h->d))
        reply_status(r, 200, "ok", NULL);
    else
        reply_status(r, 503, "unavailable",
                     "a daemon loop is not responsive");
}

static void cb_metrics(struct tm_http *h, struct reply *r)
{
    pthread_rwlock_rdlock(&h->d->gen_lock);
    r->body = tm_metrics_render(h->d, &r->len);
    pthread_rwlock_unlock(&h->d->gen_lock);
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

static void cb_status(struct tm_http *h, struct reply *r)
{
    struct tm_daemon *d = h->d;
    int64_t now_ns = tm_now_ns();
    pthread_rwlock_rdlock(&d->gen_lock);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "version", TM_VERSION);
    cJSON_AddNumberToObject(j, "uptime_seconds",
                            (double)((tm_now_ms() - d->start_mono_ms) /
                                     1000));
    cJSON *b = cJSON_AddObjectToObject(j, "broker");
    cJSON_AddStringToObject(b, "kind", d->broker != NULL
                                           ? d->broker->ops->kind
                                           : d->cfg->url.scheme);
    cJSON_AddStringToObject(b, "url", d->cfg->url.redacted);
    cJSON_AddBoolToObject(b, "connected",
                          d->broker != NULL && atomic_load(&d->broker->up));
    cJSON *p = cJSON_AddObjectToObject(j, "pool");
    cJSON_AddStringToObject(p, "kind", d->cfg->pool_kind == TM_POOL_FORK
                                           ? "fork"
                                           : "thread");
    cJSON_AddNumberToObject(p, "size", d->pool != NULL ? d->pool->size
                                                       : d->cfg->pool_size);
    cJSON_AddNumberToObject(p, "busy", d->pool != NULL
                                           ? d->pool->ops->busy(d->pool)
                                           : 0);
    cJSON *tasks = cJSON_AddObjectToObject(j, "tasks");
    for (size_t i = 0; i < d->ntasks; i++) {
        const struct tm_task *t = &d->tasks[i];
        const struct tm_task_stats *s = &t->stats;
        cJSON *o = cJSON_AddObjectToObject(tasks, t->cfg->name);
        cJSON_AddStringToObject(o, "queue", t->cfg->queue);
        cJSON_AddNumberToObject(o, "inflight",
                                (double)atomic_load(&s->inflight));
        cJSON *oc = cJSON_AddObjectToObject(o, "outcomes");
        for (int k = 1; k < TM_OUT_COUNT; k++)
            cJSON_AddNumberToObject(
                oc, tm_outcome_label((enum tm_outcome)k),
                (double)atomic_load_explicit(&s->outcomes[k],
                                             memory_order_relaxed));
        cJSON_AddNumberToObject(o, "retries",
                                (double)atomic_load(&s->retries));
        cJSON_AddNumberToObject(o, "dead_lettered",
                                (double)atomic_load(&s->dead_lettered));
        double r1, r60, p50, p99;
        tm_rate_read(&s->rate, now_ns, d->start_mono_ms * 1000000LL, &r1,
                     &r60);
        tm_durwin_percentiles(&s->durs, &p50, &p99);
        cJSON_AddNumberToObject(o, "rate_1s", round3(r1));
        cJSON_AddNumberToObject(o, "rate_60s", round3(r60));
        cJSON_AddNumberToObject(o, "p50_ms", round3(p50));
        cJSON_AddNumberToObject(o, "p99_ms", round3(p99));
        cJSON_AddStringToObject(o, "circuit",
                                tm_circuit_state_name(tm_circuit_state(
                                    &t->circuit, now_ns / 1000000LL)));
    }
    pthread_rwlock_unlock(&d->gen_lock);
    reply_json(r, 200, j);
}

static void cb_asyncapi(struct tm_http *h, struct reply *r)
{
    struct tm_daemon *d = h->d;
    pthread_rwlock_rdlock(&d->gen_lock);
    r->body = tm_asyncapi_render(d->cfg, d->tasks, d->ntasks, &r->len);
    pthread_rwlock_unlock(&d->gen_lock);
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

/* allowed returns 1 when no token is configured or the request carries
 * it; otherwise 0 with *presented set when it carried some token. */
static int allowed(struct tm_daemon *d, struct MHD_Connection *conn,
                   int *presented)
{
    *presented = 0;
    pthread_rwlock_rdlock(&d->gen_lock);
    const char *token = d->cfg->http_token;
    int ok = token == NULL || authorized(conn, token, presented);
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}

/* Marks a request whose headers were seen (MHD's per-request pointer). */
static int request_seen;

static enum MHD_Result cb_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct tm_http *h = cls;
    (void)version;
    (void)upload_data;
    struct reply r = {0};
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
    } else if (*con_cls == NULL) {
        /* headers only: answer once the request is complete, so that
         * the connection can be kept alive */
        *con_cls = &request_seen;
        return MHD_YES;
    } else if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a GET body is ignored */
        return MHD_YES;
    } else if (endpoints[e].protected && !allowed(h->d, conn, &presented)) {
        reply_text(&r, 401, TYPE_JSON, "{\"error\":\"unauthorized\"}\n");
        r.www_auth = presented
                         ? "Bearer realm=\"taskmill\", error=\"invalid_token\""
                         : "Bearer realm=\"taskmill\"";
    } else {
        endpoints[e].fn(h, &r);
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
    return ret;
}

static void cb_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "%s", line);
}

/* ---- queue depth refresher ----------------------------------------------
 * Broker reads for taskmill_queue_depth and friends run here, every few
 * seconds, on the adapter's own monitoring connection: a scrape only reads
 * the cached values, so no burst of scrapes reaches the broker and no
 * handler waits for it. */

/* locked_refresh reads every task's counts; gen_lock is held. Returns 0,
 * 1 when the broker is not connected or has no depth reads, or -1 when
 * it could not be read (the last values are kept). */
static int locked_refresh(struct tm_daemon *d)
{
    struct tm_broker *b = d->broker;
    if (b == NULL || b->ops->depth == NULL || !atomic_load(&b->up))
        return 1;
    for (size_t i = 0; i < d->ntasks; i++) {
        long long depth, pending, dlq;
        if (b->ops->depth(b, i, &depth, &pending, &dlq) != 0)
            return -1;
        struct tm_task_stats *s = &d->tasks[i].stats;
        atomic_store(&s->queue_depth, depth);
        atomic_store(&s->queue_pending, pending);
        atomic_store(&s->dead_letter_depth, dlq);
        atomic_store(&s->depth_at_ms, tm_now_ms());
    }
    return 0;
}

/* refresh_depths runs one round under gen_lock: a reload waits for one
 * round at most (bounded by the adapter's command timeout). */
static int refresh_depths(struct tm_daemon *d)
{
    pthread_rwlock_rdlock(&d->gen_lock);
    int rc = locked_refresh(d);
    pthread_rwlock_unlock(&d->gen_lock);
    return rc;
}

static void *refresher_main(void *arg)
{
    struct tm_http *h = arg;
    struct tm_daemon *d = h->d;
    int64_t wait_ms = 0;
    int failing = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(wait_ms / 1000);
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!h->stop &&
               pthread_cond_timedwait(&h->cv, &h->mu, &ts) != ETIMEDOUT)
            ;
        if (h->stop)
            break;
        pthread_mutex_unlock(&h->mu);
        int rc = refresh_depths(d);
        wait_ms = rc == 0 ? TM_DEPTH_REFRESH_MS : TM_DEPTH_RETRY_MS;
        if (rc < 0 && !failing)
            tm_log_debug(SRC, "cannot read queue depths; keeping the last "
                         "values");
        else if (rc == 0 && failing)
            tm_log_debug(SRC, "queue depths readable again");
        failing = rc < 0;
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    pthread_rwlock_rdlock(&d->gen_lock);
    if (d->broker != NULL && d->broker->ops->depth != NULL) {
        long long x;
        d->broker->ops->depth(d->broker, TM_BROKER_DEPTH_CLOSE, &x, &x, &x);
    }
    pthread_rwlock_unlock(&d->gen_lock);
    return NULL;
}

static void refresher_start(struct tm_http *h)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->refresher, NULL, refresher_main, h) == 0)
        h->refresher_started = 1;
    else
        tm_log_warn(SRC, "cannot start the queue depth refresher; "
                    "taskmill_queue_depth and friends stay absent");
}

static void refresher_stop(struct tm_http *h)
{
    if (h->refresher_started) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->refresher, NULL);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
}

/* ---- start and stop ------------------------------------------------------ */

/* parse_listen splits "host:port" or "[v6]:port" and resolves it. */
static int parse_listen(const char *listen, struct sockaddr_storage *ss,
                        socklen_t *sslen, char *err, size_t errlen)
{
    char host[256];
    const char *port;
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');
        if (end == NULL || end[1] != ':') {
            tm_snprintf(err, errlen, "http.listen '%s': expected "
                        "[address]:port", listen);
            return -1;
        }
        tm_snprintf(host, sizeof host, "%.*s", (int)(end - listen - 1),
                    listen + 1);
        port = end + 2;
    } else {
        const char *colon = strrchr(listen, ':');
        if (colon == NULL) {
            tm_snprintf(err, errlen, "http.listen '%s': expected host:port",
                        listen);
            return -1;
        }
        tm_snprintf(host, sizeof host, "%.*s", (int)(colon - listen),
                    listen);
        port = colon + 1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        tm_snprintf(err, errlen, "http.listen '%s': %s", listen,
                    gai_strerror(rc));
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sslen = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

struct tm_http *tm_http_start(struct tm_daemon *d, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (parse_listen(d->cfg->http_listen, &ss, &sslen, err, errlen) != 0)
        return NULL;
    struct tm_http *h = tm_calloc(1, sizeof *h);
    h->d = d;
    /* one internal thread, with epoll where there is one: select() would
     * fail on descriptors past FD_SETSIZE, which a busy daemon can reach */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, cb_request, h,
        MHD_OPTION_EXTERNAL_LOGGER, cb_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)TM_HTTP_CONN_LIMIT,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TM_HTTP_TIMEOUT_S,
        MHD_OPTION_END);
    if (h->mhd == NULL) {
        tm_snprintf(err, errlen, "cannot listen on %s (address in use, "
                    "not local, or not permitted)", d->cfg->http_listen);
        tm_free(h);
        return NULL;
    }
    refresher_start(h);
    tm_log_info(SRC, "listening on %s%s", d->cfg->http_listen,
                d->cfg->http_token != NULL
                    ? " (/status and /asyncapi.json need the bearer token)"
                    : "");
    return h;
}

void tm_http_stop(struct tm_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->mhd);
    refresher_stop(h);
    tm_free(h);
}
