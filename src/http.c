/* http.c - the embedded HTTP server (libmicrohttpd) and its endpoints. */
#include "daemon.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "log.h"
#include "util.h"

#define SRC "http"

/* Connections served at once; more wait in the kernel's backlog. */
#define TM_HTTP_CONN_LIMIT 256
/* Seconds an idle connection is kept. */
#define TM_HTTP_TIMEOUT_S 10

struct tm_http {
    struct MHD_Daemon *mhd;
    struct tm_daemon *d;
    int err;
    char errstr[256];
};

struct reply {
    unsigned status;
    const char *type;
    char *body;       /* owned */
    size_t len;
};

typedef void (*endpoint_fn)(struct tm_http *h, struct reply *r);

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

static void cb_ping(struct tm_http *h, struct reply *r)
{
    char why[128];
    if (tm_daemon_ready(h->d, why, sizeof why))
        reply_text(r, 200, "application/json", "{\"status\":\"ok\"}\n");
    else
        reply_text(r, 503, "application/json",
                   "{\"status\":\"unavailable\",\"reason\":\"%s\"}\n", why);
}

static void cb_healthz(struct tm_http *h, struct reply *r)
{
    if (tm_daemon_alive(h->d))
        reply_text(r, 200, "application/json", "{\"status\":\"ok\"}\n");
    else
        reply_text(r, 503, "application/json",
                   "{\"status\":\"unavailable\",\"reason\":\"a daemon loop "
                   "is not responsive\"}\n");
}

static void cb_metrics(struct tm_http *h, struct reply *r)
{
    r->body = tm_metrics_render(h->d, &r->len);
    r->status = 200;
    r->type = "text/plain; version=0.0.4; charset=utf-8";
}

static const struct {
    const char *path;
    endpoint_fn fn;
} endpoints[] = {
    {"/ping", cb_ping},
    {"/healthz", cb_healthz},
    {"/metrics", cb_metrics},
};

static enum MHD_Result cb_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct tm_http *h = cls;
    (void)version;
    (void)upload_data;
    (void)con_cls;
    struct reply r = {0};
    endpoint_fn fn = NULL;
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++)
        if (strcmp(url, endpoints[i].path) == 0)
            fn = endpoints[i].fn;
    if (fn == NULL) {
        reply_text(&r, 404, "application/json",
                   "{\"error\":\"not found\"}\n");
    } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        reply_text(&r, 405, "application/json",
                   "{\"error\":\"method not allowed\"}\n");
    } else if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a GET body is ignored */
        return MHD_YES;
    } else {
        fn(h, &r);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r.len, r.body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        tm_free(r.body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", r.type);
    if (r.status == 405)
        MHD_add_response_header(resp, "Allow", "GET, HEAD");
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
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
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
    tm_log_info(SRC, "listening on %s", d->cfg->http_listen);
    return h;
}

void tm_http_stop(struct tm_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->mhd);
    tm_free(h);
}
