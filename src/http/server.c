/* server.c - the embedded HTTP server: libmicrohttpd driven by a thread of
 * our own, connection limits, request deadlines and shedding. */
#include "http/http.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "daemon/daemon.h"
#include "http/http_private.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "http"

/*
 * Connections and descriptors.
 *
 * Probes must keep answering while any number of other clients hold
 * connections open, idle or sending a request a byte at a time. MHD alone
 * cannot do that: at its connection limit it stops accepting, so a probe
 * waits in the kernel's backlog until some connection times out, and its
 * timeout restarts with every byte received. So the server thread keeps
 * its own table of connections (conns.c) and:
 *
 *  - gives every connection TM_HTTP_REQUEST_DEADLINE_MS, from its accept
 *    or from the end of its previous answer, to deliver a complete
 *    request; past that its socket is shut down, however many bytes keep
 *    trickling in;
 *  - at cap live connections, sheds the one that has waited for a
 *    request the longest (else the oldest one being answered) for each
 *    new one: a new connection is never refused for an old one;
 *  - shuts down at once a connection whose descriptor number is within
 *    TM_HTTP_FD_FLOOR of the process limit (accept returns the lowest free
 *    number, so all below it are taken): HTTP never takes the last
 *    descriptors from the brokers, plugins and pool.
 *
 * Shedding is shutdown(2) on the socket, from the server thread (the only
 * one that runs MHD, so the descriptor cannot be closed under it); MHD
 * then reads end-of-file and closes the connection on its next pass.
 */

/* Connections held at most, whatever the descriptor limit allows: enough
 * for every legitimate client many times over (probes and scrapes come
 * and go), a bound on the memory a flood can pin. */
#define TM_HTTP_CONN_MAX 4096
/* Descriptors always left to the rest of the daemon (broker connections
 * of two generations during a reload, plugin files, pool sockets, logs):
 * a quarter of the limit, at least this many. */
#define TM_HTTP_FD_RESERVE_MIN 256
/* A connection on a descriptor this close to the limit is closed at once. */
#define TM_HTTP_FD_FLOOR 64
/* Shed connections not yet reaped by MHD still count against its own
 * limit, which is this much above ours so that it never refuses one. */
#define TM_HTTP_SHED_SLACK 64
/* Time to deliver a complete request (headers and any body), from accept
 * or from the end of the previous answer on the connection. */
#define TM_HTTP_REQUEST_DEADLINE_MS 5000
/* Seconds without progress while an answer is being sent. */
#define TM_HTTP_IDLE_TIMEOUT_S 5
/* Memory for one connection's request headers and answer head. */
#define TM_HTTP_CONN_MEMORY (16 * 1024)
/* The server loop wakes at least this often (stop requests wake it at
 * once through the eventfd). */
#define TM_HTTP_TICK_MAX_MS 1000
/* Shed and expired connections are summarised in the log at most this
 * often. */
#define TM_HTTP_REPORT_MS 10000

struct tm_http {
    struct MHD_Daemon *mhd;
    struct tm_daemon *d;
    struct tm_http_depth *depth;

    /* the server thread: waits on ep (MHD's epoll descriptor and wake_fd),
     * then runs MHD */
    pthread_t thread;
    int thread_started;
    int api_started;
    int ep;
    int wake_fd;
    atomic_int stop;

    /* server thread only (MHD's callbacks run there) */
    struct tm_http_conns conns;
    size_t cap;                   /* live connections at most */
    long fd_ceiling;              /* descriptors numbered this or above
                                     are closed at once */
    unsigned long shed, expired, starved;   /* since the last report */
    int64_t next_report_ms;
};

/* ---- connection tracking (MHD callbacks, server thread) ---------------- */

/* shed closes c from our side: its socket is shut down and MHD, reading
 * end-of-file, closes it on its next pass. Server thread only, the thread
 * that runs MHD. MHD reports a connection closed (and cb_connection
 * forgets it) before it closes the descriptor, in that same thread, so a
 * tracked descriptor is always the connection's own open socket, never
 * one reused by a broker connection. */
static void shed(struct tm_http *h, struct tm_http_conn *c)
{
    if (c->state == TM_HTTP_CONN_SHED)
        return;
    tm_http_conns_shed(&h->conns, c);
    if (shutdown(c->fd, SHUT_RDWR) != 0) {
        /* already reset by the peer: MHD closes it anyway */
    }
}

/* report logs, at most every TM_HTTP_REPORT_MS, how many connections were
 * closed since the last report: a warning when some had to make room or
 * lacked descriptors, a debug line when they only outlived the request
 * deadline (idle keep-alive connections do, every time). */
static void report(struct tm_http *h, int64_t now)
{
    if (now < h->next_report_ms || (h->shed | h->expired | h->starved) == 0)
        return;
    tm_log_write((h->shed | h->starved) != 0 ? TM_LOG_WARNING : TM_LOG_DEBUG,
                 SRC, NULL, NULL, "closed %lu connection(s) to make room "
                 "(limit %zu), %lu for want of descriptors and %lu that "
                 "sent no complete request within %d ms", h->shed, h->cap,
                 h->starved, h->expired, TM_HTTP_REQUEST_DEADLINE_MS);
    h->shed = h->expired = h->starved = 0;
    h->next_report_ms = now + TM_HTTP_REPORT_MS;
}

/* cb_accept runs before MHD takes a new connection on: at the cap, the
 * longest waiting connection goes instead of this one. */
static enum MHD_Result cb_accept(void *cls, const struct sockaddr *addr,
                                 socklen_t addrlen)
{
    struct tm_http *h = cls;
    (void)addr;
    (void)addrlen;
    while (h->conns.nlive >= h->cap) {
        struct tm_http_conn *v = tm_http_conns_victim(&h->conns);
        if (v == NULL)
            break;
        shed(h, v);
        h->shed++;
    }
    return MHD_YES;
}

/* cb_connection tracks MHD's connections: a new one waits for its request
 * from now on (and is shut down at once on a descriptor too close to the
 * limit); a closed one is forgotten. */
static void cb_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct tm_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        tm_http_conns_remove(&h->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci == NULL)
        return;
    struct tm_http_conn *c =
        tm_http_conns_add(&h->conns, ci->connect_fd, tm_now_ms());
    *socket_context = c;
    if (ci->connect_fd >= h->fd_ceiling) {
        shed(h, c);
        h->starved++;
    }
}

/* conn_of returns the tracked record of conn, NULL when it has none. */
static struct tm_http_conn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* cb_completed: the answer was sent (or the request abandoned); a
 * connection kept alive waits for its next request from now on. */
static void cb_completed(void *cls, struct MHD_Connection *conn,
                         void **req_cls, enum MHD_RequestTerminationCode toe)
{
    struct tm_http *h = cls;
    (void)toe;
    tm_http_request_done(*req_cls);
    *req_cls = NULL;
    struct tm_http_conn *c = conn_of(conn);
    if (c != NULL)
        tm_http_conns_set(&h->conns, c, TM_HTTP_CONN_WAITING, tm_now_ms());
}

/* cb_request hands the request to the endpoints; once an answer is
 * queued the connection is busy, out of reach of the request deadline. */
static enum MHD_Result cb_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version,
                                  const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct tm_http *h = cls;
    (void)version;
    int queued = 0;
    enum MHD_Result ret = tm_http_answer(h->d, conn, url, method,
                                         upload_data, upload_data_size,
                                         req_cls, &queued);
    /* until its answer is queued, the request deadline runs on */
    struct tm_http_conn *c = queued ? conn_of(conn) : NULL;
    if (c != NULL)
        tm_http_conns_set(&h->conns, c, TM_HTTP_CONN_BUSY, tm_now_ms());
    return ret;
}

static void cb_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (!tm_log_enabled(TM_LOG_DEBUG))
        return; /* a flood makes MHD log a line per connection */
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "%s", line);
}

/* ---- the server thread --------------------------------------------------- */

/* next_wait_ms is how long the loop may sleep at now: until MHD's next
 * timeout or the next request deadline, TM_HTTP_TICK_MAX_MS at most. */
static int next_wait_ms(struct tm_http *h, int64_t now)
{
    int64_t wait = TM_HTTP_TICK_MAX_MS;
    MHD_UNSIGNED_LONG_LONG mhd_ms;
    if (MHD_get_timeout(h->mhd, &mhd_ms) == MHD_YES &&
        mhd_ms < (MHD_UNSIGNED_LONG_LONG)wait)
        wait = (int64_t)mhd_ms;
    int64_t expiry =
        tm_http_conns_next_expiry(&h->conns, TM_HTTP_REQUEST_DEADLINE_MS);
    if (expiry >= 0 && expiry - now < wait)
        wait = expiry - now;
    return wait > 0 ? (int)wait : 0;
}

static void *server_main(void *arg)
{
    struct tm_http *h = arg;
    while (!atomic_load(&h->stop)) {
        int64_t now = tm_now_ms();
        struct tm_http_conn *c;
        while ((c = tm_http_conns_expired(&h->conns, now,
                                          TM_HTTP_REQUEST_DEADLINE_MS)) !=
               NULL) {
            shed(h, c);
            h->expired++;
        }
        report(h, now);
        tm_http_api_tick(now);
        struct epoll_event ev[2];
        int n = epoll_wait(h->ep, ev, 2, next_wait_ms(h, now));
        for (int i = 0; i < n; i++) {
            uint64_t v;
            if (ev[i].data.fd == h->wake_fd &&
                read(h->wake_fd, &v, sizeof v) < 0) {
                /* drained already */
            }
        }
        MHD_run(h->mhd);
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------ */

/* plan_descriptors sets the connection cap and the descriptor ceiling
 * from the process's descriptor limit. */
static void plan_descriptors(struct tm_http *h)
{
    struct rlimit rl;
    long limit = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1L << 30
                    ? 1L << 30
                    : (long)rl.rlim_cur;
    long reserve = limit / 4 > TM_HTTP_FD_RESERVE_MIN ? limit / 4
                                                      : TM_HTTP_FD_RESERVE_MIN;
    long budget = limit - reserve - TM_HTTP_SHED_SLACK;
    if (budget > TM_HTTP_CONN_MAX)
        budget = TM_HTTP_CONN_MAX;
    if (budget < 8)
        budget = 8; /* a tiny limit: the ceiling below still guards it */
    h->cap = (size_t)budget;
    h->fd_ceiling = limit - TM_HTTP_FD_FLOOR;
    tm_log_debug(SRC, "at most %zu connections (descriptor limit %ld, %ld "
                 "kept for the rest of the daemon)", h->cap, limit, reserve);
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

/* watch adds fd to the server thread's epoll set; returns 0 or -1. */
static int watch(struct tm_http *h, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    return epoll_ctl(h->ep, EPOLL_CTL_ADD, fd, &ev);
}

struct tm_http *tm_http_start(struct tm_daemon *d, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (parse_listen(d->cfg->http_listen, &ss, &sslen, err, errlen) != 0)
        return NULL;
    struct tm_http *h = tm_calloc(1, sizeof *h);
    h->d = d;
    h->ep = h->wake_fd = -1;
    tm_http_conns_init(&h->conns);
    plan_descriptors(h);
    /* epoll without an internal thread: MHD runs on our server thread, in
     * between which the deadlines are enforced; epoll because select()
     * fails on descriptors past FD_SETSIZE */
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->mhd = MHD_start_daemon(
        flags, 0, cb_accept, h, cb_request, h,
        MHD_OPTION_EXTERNAL_LOGGER, cb_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(h->cap + TM_HTTP_SHED_SLACK),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TM_HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)TM_HTTP_CONN_MEMORY,
        MHD_OPTION_NOTIFY_CONNECTION, cb_connection, h,
        MHD_OPTION_NOTIFY_COMPLETED, cb_completed, h,
        MHD_OPTION_END);
    if (h->mhd == NULL) {
        tm_snprintf(err, errlen, "cannot listen on %s (address in use, "
                    "not local, or not permitted)", d->cfg->http_listen);
        goto fail;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    h->ep = epoll_create1(EPOLL_CLOEXEC);
    h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (di == NULL || h->ep < 0 || h->wake_fd < 0 ||
        watch(h, di->epoll_fd) != 0 || watch(h, h->wake_fd) != 0) {
        char eb[TM_STRERRNO_BUF];
        tm_snprintf(err, errlen, "http: cannot set up polling: %s",
                    tm_strerror(errno, eb, sizeof eb));
        goto fail;
    }
    tm_http_api_start(d, h->wake_fd);
    h->api_started = 1;
    if (pthread_create(&h->thread, NULL, server_main, h) != 0) {
        tm_snprintf(err, errlen, "http: cannot start the server thread");
        goto fail;
    }
    h->thread_started = 1;
    h->depth = tm_http_depth_start(d);
    tm_log_info(SRC, "listening on %s%s", d->cfg->http_listen,
                d->cfg->http_token != NULL
                    ? " (the console, the API, /status and /asyncapi.json "
                      "need the bearer token)"
                    : " (no http.token: aggregate figures only, no message "
                      "bodies, no changes)");
    return h;
fail:
    tm_http_stop(h);
    return NULL;
}

void tm_http_stop(struct tm_http *h)
{
    if (h == NULL)
        return;
    tm_http_depth_stop(h->depth);
    /* API requests still waiting are answered while MHD still runs */
    if (h->thread_started)
        tm_http_api_close();
    if (h->thread_started) {
        atomic_store(&h->stop, 1);
        uint64_t one = 1;
        if (write(h->wake_fd, &one, sizeof one) < 0) {
            /* the loop wakes within TM_HTTP_TICK_MAX_MS anyway */
        }
        pthread_join(h->thread, NULL);
    }
    if (h->api_started)
        tm_http_api_free();
    /* closes every connection; their records go in cb_connection */
    if (h->mhd != NULL)
        MHD_stop_daemon(h->mhd);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    if (h->ep >= 0)
        close(h->ep);
    assert(h->conns.nlive == 0);
    tm_free(h);
}
