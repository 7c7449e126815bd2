/* api.c - the admin API under /api/v1/: routes, token and argument
 * checks, request bodies, and the answers. Broker operations run on the
 * worker (api_worker.c) while the connection is suspended. */
#include "http/api_private.h"
#include "http/http_private.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "daemon/daemon.h"
#include "util/util.h"

/* A request that reaches the broker is answered 504 past this. */
#define TM_API_DEADLINE_MS 15000
/* Dead letters listed by default and at most. */
#define TM_API_LIST_DEFAULT 50
#define TM_API_LIST_MAX 1000
/* Body bytes accepted (and ignored) by a request that takes none. */
#define TM_API_OTHER_BODY_MAX 4096

#define API_PREFIX "/api/v1/"

/* The worker; one HTTP server per process. Set before the HTTP thread
 * starts and freed after it stopped, so that thread reads it unlocked. */
static struct tm_api_worker *api_worker;

/* ---- answers ----------------------------------------------------------- */

/* send_json queues status with text (copied) plus a newline as the JSON
 * body; www_auth, allow: optional headers. */
static enum MHD_Result send_json_link(struct MHD_Connection *conn,
                                      unsigned status, const char *text,
                                      const char *www_auth,
                                      const char *allow, const char *link);

static enum MHD_Result send_json(struct MHD_Connection *conn,
                                 unsigned status, const char *text,
                                 const char *www_auth, const char *allow)
{
    return send_json_link(conn, status, text, www_auth, allow, NULL);
}

/* send_json_link is send_json with an optional Link header. */
static enum MHD_Result send_json_link(struct MHD_Connection *conn,
                                      unsigned status, const char *text,
                                      const char *www_auth,
                                      const char *allow, const char *link)
{
    size_t n = strlen(text);
    char *body = tm_malloc(n + 2);
    memcpy(body, text, n);
    body[n] = '\n';
    body[n + 1] = '\0';
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n + 1, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        tm_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    tm_http_secure_headers(resp);
    if (www_auth != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                www_auth);
    if (allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (link != NULL)
        MHD_add_response_header(resp, "Link", link);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* send_error queues {"error": text}. */
static enum MHD_Result send_error(struct MHD_Connection *conn,
                                  unsigned status, const char *text,
                                  const char *www_auth, const char *allow)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", text);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (s == NULL)
        return MHD_NO;
    enum MHD_Result ret = send_json(conn, status, s, www_auth, allow);
    cJSON_free(s);
    return ret;
}

/* ---- GET /api/v1/tasks ------------------------------------------------- */

static enum MHD_Result answer_tasks(struct tm_daemon *d,
                                    struct MHD_Connection *conn)
{
    tm_http_depth_want();
    int64_t now_ns = tm_now_ns();
    cJSON *j = cJSON_CreateObject();
    /* rendered from a reference, as /status (endpoints.c) */
    struct tm_gen *g = tm_gen_current(d);
    cJSON_AddStringToObject(j, "version", TM_VERSION);
    tm_http_add_broker_pool(j, g);
    cJSON_AddBoolToObject(j, "writable", g->cfg->http_token != NULL);
    cJSON *a = cJSON_AddArrayToObject(j, "tasks");
    for (size_t i = 0; i < g->ntasks; i++)
        cJSON_AddItemToArray(a, tm_http_task_json(g, i, now_ns, 1));
    tm_gen_unref(g);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (s == NULL)
        return send_error(conn, 500, "out of memory", NULL, NULL);
    enum MHD_Result ret = send_json(conn, 200, s, NULL, NULL);
    cJSON_free(s);
    return ret;
}

/* ---- routing ------------------------------------------------------------ */

/* struct route is what a path and method ask for. */
struct route {
    int tasks;                 /* GET /api/v1/tasks */
    enum tm_api_op op;         /* else this operation */
    int write;                 /* changes something: needs the token */
    int bodies;                /* returns message bodies: needs the token */
    char task[TM_API_NAME_MAX + 1];
    char id[TM_API_ID_MAX + 1];
    const char *allow;         /* for 405: the methods the path takes */
};

/* segment copies the path segment at *p (up to '/' or the end) into out
 * and moves *p past it and its '/'. Returns its length, or -1 when it is
 * longer than size - 1. */
static int segment(const char **p, char *out, size_t size)
{
    size_t n = strcspn(*p, "/");
    if (n >= size)
        return -1;
    memcpy(out, *p, n);
    out[n] = '\0';
    *p += n;
    if (**p == '/')
        (*p)++;
    return (int)n;
}

/* delayed_route fills rt for the path p after "tasks/NAME/delayed/":
 * "" (the list), "ID" (delete) or "ID/run-now". 0, 404 or 405. */
static unsigned delayed_route(const char *p, int get, int post, int del,
                              struct route *rt)
{
    if (*p == '\0') {
        rt->op = TM_API_DELAYED_LIST;
        rt->bodies = 1;
        rt->allow = "GET, HEAD";
        return get ? 0 : 405;
    }
    if (segment(&p, rt->id, sizeof rt->id) <= 0)
        return 404;
    rt->write = 1;
    if (*p == '\0') {
        rt->op = TM_API_DELAYED_DELETE;
        rt->allow = "DELETE";
        return del ? 0 : 405;
    }
    if (strcmp(p, "run-now") == 0) {
        rt->op = TM_API_DELAYED_RUN;
        rt->allow = "POST";
        return post ? 0 : 405;
    }
    return 404;
}

/*
 * parse_route fills rt from the path after API_PREFIX and the method.
 * Returns 0, 404 for a path the API does not have, 405 for a method the
 * path does not take (rt->allow set).
 */
static unsigned parse_route(const char *path, const char *method,
                            struct route *rt)
{
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    int del = strcmp(method, "DELETE") == 0;
    char seg[TM_API_ID_MAX + 1];
    memset(rt, 0, sizeof *rt);
    if (strcmp(path, "tasks") == 0) {
        rt->tasks = 1;
        rt->allow = "GET, HEAD";
        return get ? 0 : 405;
    }
    if (strcmp(path, "schedules") == 0) {
        rt->op = TM_API_SCHEDULES;
        rt->allow = "GET, HEAD";
        return get ? 0 : 405;
    }
    if (strncmp(path, "tasks/", 6) != 0)
        return 404;
    const char *p = path + 6;
    if (segment(&p, rt->task, sizeof rt->task) <= 0)
        return 404;
    /* the rest: "messages", "pause", "resume", "delayed...", "dead-letters",
     * "dead-letters/replay", "dead-letters/ID", "dead-letters/ID/replay" */
    if (segment(&p, seg, sizeof seg) < 0)
        return 404;
    if (strcmp(seg, "messages") == 0 && *p == '\0') {
        rt->op = TM_API_PUBLISH;
        rt->write = 1;
        rt->allow = "POST";
        return post ? 0 : 405;
    }
    if ((strcmp(seg, "pause") == 0 || strcmp(seg, "resume") == 0) &&
        *p == '\0') {
        rt->op = seg[0] == 'p' ? TM_API_PAUSE : TM_API_RESUME;
        rt->write = 1;
        rt->allow = "POST";
        return post ? 0 : 405;
    }
    if (strcmp(seg, "delayed") == 0)
        return delayed_route(p, get, post, del, rt);
    if (strcmp(seg, "dead-letters") != 0)
        return 404;
    if (*p == '\0') {
        rt->allow = "GET, HEAD, DELETE";
        rt->op = get ? TM_API_DLQ_LIST : TM_API_DLQ_PURGE;
        rt->write = del;
        rt->bodies = get;
        return get || del ? 0 : 405;
    }
    if (strcmp(p, "replay") == 0) {
        rt->op = TM_API_DLQ_REPLAY;
        rt->write = 1;
        rt->allow = "POST";
        return post ? 0 : 405;
    }
    if (segment(&p, rt->id, sizeof rt->id) <= 0)
        return 404;
    if (*p == '\0') {
        rt->op = get ? TM_API_DLQ_GET : TM_API_DLQ_PURGE;
        rt->write = del;
        rt->bodies = get;
        rt->allow = "GET, HEAD, DELETE";
        return get || del ? 0 : 405;
    }
    if (strcmp(p, "replay") == 0) {
        rt->op = TM_API_DLQ_REPLAY;
        rt->write = 1;
        rt->allow = "POST";
        return post ? 0 : 405;
    }
    return 404;
}

/* parse_limit reads ?limit=N into *limit. Returns 0, or -1 when it is not
 * a number from 1 to TM_API_LIST_MAX. */
static int parse_limit(struct MHD_Connection *conn, size_t *limit)
{
    const char *v =
        MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    *limit = TM_API_LIST_DEFAULT;
    if (v == NULL)
        return 0;
    size_t n = strspn(v, "0123456789");
    if (n == 0 || n > 4 || v[n] != '\0')
        return -1;
    long x = strtol(v, NULL, 10);
    if (x < 1 || x > TM_API_LIST_MAX)
        return -1;
    *limit = (size_t)x;
    return 0;
}

/*
 * parse_due reads ?delay=DURATION or ?at=TIME of a publish into *due_ms
 * (epoch ms; 0 when neither is given, or the time is not in the future:
 * run now), at most 30 days ahead on either broker. Returns 0, or the
 * status to refuse with (400: bad or too far; 501: the broker has no
 * delayed messages) with msg set.
 */
static unsigned parse_due(struct MHD_Connection *conn,
                          enum tm_broker_kind kind, int64_t *due_ms,
                          char *msg, size_t size)
{
    const char *delay =
        MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "delay");
    const char *at =
        MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "at");
    int64_t now = tm_wall_ms();
    struct tm_admin_err err;
    if (tm_admin_due(kind, delay, at, now, /* bound = */ 1, due_ms,
                     &err) != 0) {
        tm_snprintf(msg, size, "%s", err.msg);
        return tm_api_admin_status(&err);
    }
    /* a time already past runs now, as a message due then would */
    if (*due_ms <= now)
        *due_ms = 0;
    return 0;
}

_Static_assert(TM_API_Q_MAX == TM_ADMIN_DLQ_TEXT_MAX,
               "the request keeps every text the admin layer takes");

/* parse_filter reads the dead-letter filter of a list, replay or purge:
 * ?q=TEXT&since=TIME&until=TIME (f->text borrowed from the connection).
 * Returns 0, or 400 with msg set. */
static unsigned parse_filter(struct MHD_Connection *conn,
                             struct tm_dlq_filter *f, char *msg,
                             size_t size)
{
    struct tm_admin_err err;
    if (tm_admin_dlq_filter(
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "q"),
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND,
                                        "since"),
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND,
                                        "until"),
            f, &err) != 0) {
        tm_snprintf(msg, size, "%s", err.msg);
        return tm_api_admin_status(&err);
    }
    return 0;
}

/*
 * first_call checks a new request from its headers: route, token, task,
 * id, query. Returns 0 with *out set to a new request to read the body
 * of, or queues the refusal and returns 1 with *ret set.
 */
static int first_call(struct tm_daemon *d, struct MHD_Connection *conn,
                      const char *url, const char *method,
                      struct tm_api_req **out, enum MHD_Result *ret)
{
    struct route rt;
    char msg[600];
    *out = NULL;
    unsigned code = strncmp(url, API_PREFIX, strlen(API_PREFIX)) == 0
                        ? parse_route(url + strlen(API_PREFIX), method, &rt)
                        : 404;
    if (code == 404) {
        *ret = send_error(conn, 404, "not found", NULL, NULL);
        return 1;
    }
    if (code == 405) {
        *ret = send_error(conn, 405, "method not allowed", NULL, rt.allow);
        return 1;
    }
    int presented = 0;
    if (!tm_http_token_ok(d, conn, &presented)) {
        *ret = presented
                   ? send_error(conn, 403, "wrong token", NULL, NULL)
                   : send_error(conn, 401, "unauthorized",
                                "Bearer realm=\"taskmill\"", NULL);
        return 1;
    }
    pthread_rwlock_rdlock(&d->gen_lock);
    int has_token = d->cfg->http_token != NULL;
    enum tm_broker_kind kind = d->cfg->url.kind;
    int no_task = rt.tasks || rt.op == TM_API_SCHEDULES;
    const struct tm_cfg_task *t =
        no_task ? NULL : tm_cfg_find_task(d->cfg, rt.task);
    size_t max_payload = t != NULL ? t->max_payload : 0;
    pthread_rwlock_unlock(&d->gen_lock);
    code = 0;
    size_t limit = 0;
    int64_t due_ms = 0;
    const char *after = NULL;
    struct tm_dlq_filter filter = TM_DLQ_FILTER_ALL;
    int delayed = rt.op == TM_API_DELAYED_LIST || rt.op == TM_API_DELAYED_RUN ||
                  rt.op == TM_API_DELAYED_DELETE;
    int lists = rt.op == TM_API_DLQ_LIST || rt.op == TM_API_DELAYED_LIST;
    if (!no_task && t == NULL) {
        code = 404;
        tm_snprintf(msg, sizeof msg, "no task '%s'", rt.task);
    } else if (rt.id[0] != '\0' && delayed &&
               !tm_admin_delayed_id_ok(rt.id, TM_API_ID_MAX)) {
        code = 400;
        tm_snprintf(msg, sizeof msg, "that is not a delayed message id: "
                    "printable ASCII without spaces expected");
    } else if (rt.id[0] != '\0' && !delayed &&
               !tm_admin_dlq_id_ok(kind, rt.id, TM_API_ID_MAX)) {
        code = 400;
        tm_snprintf(msg, sizeof msg, "'%s' is not a dead-letter id of "
                    "this broker", rt.id);
    } else if (rt.write && !has_token) {
        code = 403;
        tm_snprintf(msg, sizeof msg, "the API is read-only: set http.token "
                    "in the configuration to allow changes");
    } else if (rt.bodies && !has_token) {
        code = 403;
        tm_snprintf(msg, sizeof msg, "message bodies are served only with "
                    "http.token set: without it the API shows aggregate "
                    "figures only");
    } else if (lists && parse_limit(conn, &limit) != 0) {
        code = 400;
        tm_snprintf(msg, sizeof msg, "limit: expected a number from 1 to "
                    "%d", TM_API_LIST_MAX);
    } else if (lists &&
               (after = MHD_lookup_connection_value(
                    conn, MHD_GET_ARGUMENT_KIND, "after")) != NULL &&
               !(delayed ? tm_admin_delayed_id_ok(after, TM_API_ID_MAX)
                         : tm_admin_dlq_id_ok(kind, after, TM_API_ID_MAX))) {
        code = 400;
        tm_snprintf(msg, sizeof msg, "after: that is not a%s id of this "
                    "broker", delayed ? " delayed message" : " dead-letter");
    } else if (rt.op == TM_API_PUBLISH) {
        code = parse_due(conn, kind, &due_ms, msg, sizeof msg);
    } else if (rt.id[0] == '\0' && (rt.op == TM_API_DLQ_LIST ||
                                    rt.op == TM_API_DLQ_REPLAY ||
                                    rt.op == TM_API_DLQ_PURGE)) {
        code = parse_filter(conn, &filter, msg, sizeof msg);
    }
    if (code != 0) {
        *ret = send_error(conn, code, msg, NULL, NULL);
        return 1;
    }
    struct tm_api_req *r = tm_calloc(1, sizeof *r);
    r->state = TM_API_RECEIVING;
    r->tasks = rt.tasks;
    r->op = rt.op;
    r->conn = conn;
    tm_snprintf(r->task, sizeof r->task, "%s", rt.task);
    tm_snprintf(r->id, sizeof r->id, "%s", rt.id);
    r->limit = limit;
    tm_snprintf(r->after, sizeof r->after, "%s", after != NULL ? after : "");
    r->due_ms = due_ms;
    tm_snprintf(r->q, sizeof r->q, "%s",
                filter.text != NULL ? filter.text : "");
    r->since = filter.since;
    r->until = filter.until;
    r->max = rt.op == TM_API_PUBLISH ? max_payload : TM_API_OTHER_BODY_MAX;
    *out = r;
    return 0;
}

/* take_body keeps the body bytes of a publish, up to r->max; the bytes
 * of other requests are counted only. Past max, too_big is set. */
static void take_body(struct tm_api_req *r, const char *data, size_t n)
{
    if (r->too_big || n > r->max - r->len) {
        r->too_big = 1;
        return;
    }
    if (r->op == TM_API_PUBLISH) {
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap > 0 ? r->cap : 1024;
            while (cap < r->len + n + 1)
                cap *= 2;
            r->body = tm_realloc(r->body, cap);
            r->cap = cap;
        }
        memcpy(r->body + r->len, data, n);
        r->body[r->len + n] = '\0';
    }
    r->len += n;
}

/* body_error describes what is wrong with a publish body, or returns 0. */
static int body_error(const struct tm_api_req *r, char *msg, size_t size)
{
    struct tm_admin_err err;
    if (tm_admin_body_check(r->body, r->len, &err) == 0)
        return 0;
    tm_snprintf(msg, size, "%s", err.msg);
    return 1;
}

/* last_call runs a complete request: checks the body, then hands it to
 * the worker with its connection suspended. Sets *suspended. */
static enum MHD_Result last_call(struct MHD_Connection *conn,
                                 struct tm_api_req *r, int *suspended)
{
    char msg[300];
    *suspended = 0;
    if (r->too_big) {
        tm_snprintf(msg, sizeof msg, "the request body is over %zu bytes%s",
                    r->max, r->op == TM_API_PUBLISH
                                ? " (the task's max_payload)"
                                : "");
        return send_error(conn, 413, msg, NULL, NULL);
    }
    if (r->op == TM_API_PUBLISH && body_error(r, msg, sizeof msg))
        return send_error(conn, 400, msg, NULL, NULL);
    if (api_worker == NULL)
        return send_error(conn, 503, "the admin API worker is not running",
                          NULL, NULL);
    r->deadline_ms = tm_now_ms() + TM_API_DEADLINE_MS;
    /* suspended before the worker can see it, so that its resume always
     * follows this suspend */
    MHD_suspend_connection(conn);
    *suspended = 1;
    if (tm_api_worker_submit(api_worker, r) != 0) {
        tm_api_error(r, 503, "too many admin requests at once, or the "
                     "daemon is stopping; try again");
        r->state = TM_API_DONE;
        MHD_resume_connection(conn);
    }
    return MHD_YES;
}

/* pct_encode writes s percent-encoded (RFC 3986 unreserved bytes kept)
 * to out (size at least 3 * strlen(s) + 1). */
static void pct_encode(const char *s, char *out, size_t size)
{
    size_t k = 0;
    for (const char *p = s; *p != '\0' && k + 4 <= size; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
            (c >= 'a' && c <= 'z') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            out[k++] = (char)c;
        } else {
            tm_snprintf(out + k, size - k, "%%%02X", c);
            k += 3;
        }
    }
    out[k] = '\0';
}

/* next_link is the Link header of a dead-letter or delayed page that has
 * a next
 * one: the same request (its filter too, the times as epoch ms) with
 * after= the page's last entry (RFC 8288, rel="next"), the id and text
 * percent-encoded. Returns a new string. */
static char *next_link(const struct tm_api_req *r)
{
    char id[3 * TM_API_ID_MAX + 1], q[3 * TM_API_Q_MAX + 1];
    char since[40] = "", until[40] = "";
    pct_encode(r->next_after, id, sizeof id);
    pct_encode(r->q, q, sizeof q);
    if (r->since != INT64_MIN)
        tm_snprintf(since, sizeof since, "&since=%lld", (long long)r->since);
    if (r->until != INT64_MAX)
        tm_snprintf(until, sizeof until, "&until=%lld", (long long)r->until);
    /* task names are letters, digits, '_', '.' and '-': safe in a path */
    return tm_asprintf("<" API_PREFIX "tasks/%s/%s?limit=%zu"
                       "&after=%s%s%s%s%s>; rel=\"next\"", r->task,
                       r->op == TM_API_DELAYED_LIST ? "delayed"
                                                    : "dead-letters",
                       r->limit, id, q[0] != '\0' ? "&q=" : "", q, since,
                       until);
}

enum MHD_Result tm_http_api_answer(struct tm_daemon *d,
                                   struct MHD_Connection *conn,
                                   const char *url, const char *method,
                                   const char *upload_data,
                                   size_t *upload_data_size, void **req_cls,
                                   int *queued)
{
    enum MHD_Result ret = MHD_YES;
    *queued = 0;
    if (*req_cls == NULL) {
        struct tm_api_req *r = NULL;
        if (first_call(d, conn, url, method, &r, &ret)) {
            *queued = ret == MHD_YES;
            return ret;
        }
        *req_cls = r;
        return MHD_YES;
    }
    struct tm_api_req *r = *req_cls;
    if (*upload_data_size != 0) {
        assert(r->state == TM_API_RECEIVING);
        take_body(r, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->tasks) {
        ret = answer_tasks(d, conn);
        *queued = ret == MHD_YES;
        return ret;
    }
    switch (api_worker != NULL ? tm_api_worker_state(api_worker, r)
                               : r->state) {
    case TM_API_RECEIVING: {
        int suspended;
        ret = last_call(conn, r, &suspended);
        /* a suspended request is being answered: out of reach of the
         * request deadline */
        *queued = ret == MHD_YES;
        break;
    }
    case TM_API_DONE: {
        char *link = r->next_after[0] != '\0' ? next_link(r) : NULL;
        ret = send_json_link(conn, r->status, r->answer, NULL, NULL, link);
        tm_free(link);
        *queued = ret == MHD_YES;
        break;
    }
    case TM_API_QUEUED:
    case TM_API_RUNNING:
        break; /* not called while suspended */
    }
    return ret;
}

int tm_http_api_path(const char *url)
{
    return strncmp(url, "/api/", 5) == 0;
}

void tm_http_api_req_free(void *req_cls)
{
    struct tm_api_req *r = req_cls;
    if (r == NULL)
        return;
    /* freed only when MHD is done with the request: never while the
     * worker holds it (tm_api_worker_close settles every one first) */
    assert(r->state == TM_API_RECEIVING || r->state == TM_API_DONE);
    tm_free(r->body);
    tm_free(r->answer);
    tm_free(r);
}

void tm_http_api_start(struct tm_daemon *d, int wake_fd)
{
    assert(api_worker == NULL);
    api_worker = tm_api_worker_start(d, wake_fd);
}

void tm_http_api_tick(int64_t now)
{
    tm_api_worker_expire(api_worker, now);
}

void tm_http_api_close(void)
{
    tm_api_worker_close(api_worker);
}

void tm_http_api_free(void)
{
    tm_api_worker_free(api_worker);
    api_worker = NULL;
}
