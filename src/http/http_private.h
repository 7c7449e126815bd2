/* http_private.h - what the HTTP files share: the endpoints and what
 * they render, the admin API's entry points, the queue depth refresher
 * and the connection table. The daemon includes http.h only. Not
 * installed. */
#ifndef TASKMILL_HTTP_PRIVATE_H
#define TASKMILL_HTTP_PRIVATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

struct cJSON;
struct tm_daemon;
struct tm_gen;

/* ---- endpoints.c ---- */

/* tm_http_request_done frees what tm_http_answer kept in *req_cls; MHD's
 * request-completed callback calls it. */
void tm_http_request_done(void *req_cls);

/*
 * tm_http_answer serves one request of conn (the arguments of MHD's
 * access handler). Returns MHD's verdict; sets *queued to 1 once an
 * answer is queued, or leaves it 0 while the request is still being
 * received (headers only, or body data that it discards).
 */
enum MHD_Result tm_http_answer(struct tm_daemon *d,
                               struct MHD_Connection *conn, const char *url,
                               const char *method, const char *upload_data,
                               size_t *upload_data_size, void **req_cls,
                               int *queued);

/* ---- guard.c ---- */

/* tm_http_seen_marker is the per-request pointer of a request that keeps
 * nothing (headers seen, answer once complete): tm_http_request_done
 * leaves it alone. */
void *tm_http_seen_marker(void);

/* tm_http_token_ok returns 1 when no http.token is configured or the
 * request carries it ("Authorization: Bearer TOKEN", compared in constant
 * time); otherwise 0 with *presented set when it carried some token. */
int tm_http_token_ok(struct tm_daemon *d, struct MHD_Connection *conn,
                     int *presented);

/* tm_http_host_ok returns 1 when the request's Host header names this
 * daemon: an IP literal, localhost, one of http.allowed_hosts, or no Host
 * at all (see guard.c); 0 when the answer must be 421. */
int tm_http_host_ok(struct tm_daemon *d, struct MHD_Connection *conn);

/* ---- task_json.c ---- */

/* tm_http_add_broker_pool adds the "broker" (kind, url, connected,
 * node, nodes) and "pool" (kind, size, busy, stuck) objects that /status
 * and GET /api/v1/tasks share to j, from g (the caller holds a reference,
 * see tm_gen_current). */
void tm_http_add_broker_pool(struct cJSON *j, const struct tm_gen *g);

/* tm_http_task_json returns what /status says about task i of g (the
 * caller holds a reference): queue, inflight, outcomes, retries,
 * dead_lettered, rates, percentiles, circuit, paused, scheduled. With
 * api (GET /api/v1/tasks) also name, dead_letter, the queue counts
 * (queue_depth, pending, dead_letters) and the limits. now_ns: the
 * monotonic clock the rates are read at. */
struct cJSON *tm_http_task_json(const struct tm_gen *g, size_t i,
                                int64_t now_ns, int api);

/* ---- metrics.c ---- */

/* tm_metrics_render returns the Prometheus text exposition of d, whose
 * generation g the caller holds a reference to, in a new buffer (caller
 * frees) of *len bytes. */
char *tm_metrics_render(struct tm_daemon *d, const struct tm_gen *g,
                        size_t *len);

/* ---- console.c ---- */

/* tm_http_console_path returns 1 for a path of the console's files. */
int tm_http_console_path(const char *url);

/* tm_http_console_answer serves one of them, as tm_http_answer (405 for
 * a method other than GET or HEAD). */
enum MHD_Result tm_http_console_answer(struct MHD_Connection *conn,
                                       const char *url, const char *method,
                                       size_t *upload_data_size,
                                       void **req_cls, int *queued);

/* ---- api.c ---- */

/* tm_http_api_path returns 1 for a path of the admin API (/api/...). */
int tm_http_api_path(const char *url);

/* tm_http_api_answer serves an admin API request, as tm_http_answer; a
 * request for the broker suspends its connection until the worker is
 * done (*queued is then 1 too: the request is complete). */
enum MHD_Result tm_http_api_answer(struct tm_daemon *d,
                                   struct MHD_Connection *conn,
                                   const char *url, const char *method,
                                   const char *upload_data,
                                   size_t *upload_data_size, void **req_cls,
                                   int *queued);

/* tm_http_api_req_free frees an API request's record; NULL accepted. */
void tm_http_api_req_free(void *req_cls);

/* tm_http_secure_headers adds the console's and API's security headers
 * (Content-Security-Policy, X-Content-Type-Options, X-Frame-Options). */
void tm_http_secure_headers(struct MHD_Response *resp);

/* The API worker's life, driven by server.c: start before the HTTP thread
 * starts, with the eventfd that wakes that thread (wake_fd); tick on every
 * pass of it (answers requests past their deadline); close while it still
 * runs (answers the waiting ones); free once it stopped. */
void tm_http_api_start(struct tm_daemon *d, int wake_fd);
void tm_http_api_tick(int64_t now);
void tm_http_api_close(void);
void tm_http_api_free(void);

/* ---- depth.c ---- */

struct tm_http_depth;

/* tm_http_depth_start starts the thread that reads queue depths off the
 * broker into d's task stats when scrapes want them (tm_http_depth_want). Returns NULL (with a
 * warning logged) when the thread cannot start. */
struct tm_http_depth *tm_http_depth_start(struct tm_daemon *d);

/* tm_http_depth_stop stops and frees it; NULL accepted. */
void tm_http_depth_stop(struct tm_http_depth *r);

/* tm_http_depth_want is called by a scrape that shows queue depths, with
 * no lock held: when the cached values are older than the refresh floor
 * it asks the refresher for a read and waits for it, a second at most. */
void tm_http_depth_want(void);

/* ---- conns.c ---- */

enum tm_http_conn_state {
    TM_HTTP_CONN_WAITING = 1,  /* waiting for a complete request */
    TM_HTTP_CONN_BUSY = 2,     /* its answer is being sent */
    TM_HTTP_CONN_SHED = 3      /* its socket was shut down; MHD reaps it */
};

/* struct tm_http_conn is one tracked connection. */
struct tm_http_conn {
    int fd;
    enum tm_http_conn_state state;
    int64_t since_ms;          /* monotonic: in this state since */
    struct tm_http_conn *prev, *next;
};

/*
 * struct tm_http_conns tracks every connection of the HTTP server in two
 * lists, each ordered by since_ms (oldest first) because a connection is
 * always appended with the current time: waiting and busy. Shed
 * connections are in neither list. nlive counts the two lists. Used by
 * the HTTP thread only: no lock.
 */
struct tm_http_conns {
    struct tm_http_conn waiting;  /* list heads (circular, sentinels) */
    struct tm_http_conn busy;
    size_t nlive;
};

void tm_http_conns_init(struct tm_http_conns *t);

/* tm_http_conns_add tracks a new connection on fd, waiting since now.
 * Returns it (free it with tm_http_conns_remove). */
struct tm_http_conn *tm_http_conns_add(struct tm_http_conns *t, int fd,
                                       int64_t now);

/* tm_http_conns_set moves a live connection to state (WAITING or BUSY),
 * since now, at the end of that list. Shed connections stay shed. */
void tm_http_conns_set(struct tm_http_conns *t, struct tm_http_conn *c,
                       enum tm_http_conn_state state, int64_t now);

/* tm_http_conns_shed takes c out of the lists and marks it shed; the
 * caller shuts its socket down. */
void tm_http_conns_shed(struct tm_http_conns *t, struct tm_http_conn *c);

/* tm_http_conns_remove forgets c and frees it; NULL accepted. */
void tm_http_conns_remove(struct tm_http_conns *t, struct tm_http_conn *c);

/* tm_http_conns_victim returns the connection to shed to make room: the
 * one waiting for a request the longest, else the oldest busy one; NULL
 * when there is none. */
struct tm_http_conn *tm_http_conns_victim(struct tm_http_conns *t);

/* tm_http_conns_expired returns the oldest waiting connection when it has
 * waited deadline_ms or more at now, else NULL. */
struct tm_http_conn *tm_http_conns_expired(struct tm_http_conns *t,
                                           int64_t now, int64_t deadline_ms);

/* tm_http_conns_next_expiry returns when the oldest waiting connection
 * reaches deadline_ms, or -1 when none waits. */
int64_t tm_http_conns_next_expiry(const struct tm_http_conns *t,
                                  int64_t deadline_ms);


#endif /* TASKMILL_HTTP_PRIVATE_H */
