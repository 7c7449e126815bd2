/* endpoints.c - the HTTP endpoints: /ping, /healthz, /metrics, /status
 * and /asyncapi.json, and the routing of every request (these, the admin
 * API, the console) after guard.c's checks. */
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

void tm_http_request_done(void *req_cls)
{
    if (req_cls != NULL && req_cls != tm_http_seen_marker())
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
        *req_cls = tm_http_seen_marker();
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
