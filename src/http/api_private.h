/* api_private.h - what the admin API's two files share: api.c (routes, checks and
 * answers, on the HTTP thread) and api_worker.c (the thread that runs the
 * broker operations). Not installed. */
#ifndef TASKMILL_HTTP_API_H
#define TASKMILL_HTTP_API_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

struct tm_daemon;
struct tm_admin_err;

/* What a request asks of the broker. */
enum tm_api_op {
    TM_API_DLQ_LIST = 1,
    TM_API_DLQ_REPLAY = 2,     /* one (id set) or all */
    TM_API_DLQ_PURGE = 3,      /* one (id set) or all */
    TM_API_PUBLISH = 4,
    TM_API_PAUSE = 5,
    TM_API_RESUME = 6,
    TM_API_SCHEDULES = 7,      /* GET /api/v1/schedules: no task */
    TM_API_DLQ_GET = 8,        /* one dead letter (id), body whole */
    TM_API_DELAYED_LIST = 9,   /* a page of delayed messages */
    TM_API_DELAYED_RUN = 10,   /* run one (id) now */
    TM_API_DELAYED_DELETE = 11 /* delete one (id) */
};

/* Bounds of a dead-letter page: a body or error longer than
 * TM_API_BODY_MAX bytes is cut and flagged; the entries of one answer
 * stop before their JSON text passes TM_API_PAGE_BYTES (the first entry
 * always goes), and so does what is kept from the broker. */
#define TM_API_BODY_MAX (64 * 1024)
#define TM_API_PAGE_BYTES (4 * 1024 * 1024)

/* Where a request stands (struct tm_api_req.state). */
enum tm_api_state {
    TM_API_RECEIVING = 1,  /* headers seen, body being read (HTTP thread) */
    TM_API_QUEUED = 2,     /* suspended, waiting for the worker */
    TM_API_RUNNING = 3,    /* suspended, the worker runs it */
    TM_API_DONE = 4        /* answer ready (status, answer); resumed */
};

/* Longest id accepted in a path: Redis stream ids are at most 41
 * characters, AMQP message ids are bounded here. */
#define TM_API_ID_MAX 128
/* Longest task name in a path (a longer one cannot be configured). */
#define TM_API_NAME_MAX 256
/* Longest ?q= of a dead-letter filter (admin.h TM_ADMIN_DLQ_TEXT_MAX). */
#define TM_API_Q_MAX 1024

/*
 * struct tm_api_req is one admin API request, MHD's per-request pointer.
 * The HTTP thread owns it; while it is QUEUED or RUNNING it is also in
 * the worker's list, and state, status, answer and the list links are
 * read and written under the worker's mutex only. The worker copies what
 * it needs (op, task, id, body) before it runs the operation, so that a
 * request answered by its timeout meanwhile can go at once.
 */
struct tm_api_req {
    enum tm_api_state state;
    int tasks;                          /* GET /api/v1/tasks: no broker */
    enum tm_api_op op;                  /* else this operation */
    struct MHD_Connection *conn;
    char task[TM_API_NAME_MAX + 1];
    char id[TM_API_ID_MAX + 1];         /* "" = all */
    size_t limit;                       /* DLQ_LIST, DELAYED_LIST: entries
                                           at most */
    char after[TM_API_ID_MAX + 1];      /* ... ?after=, "" = none */
    char q[TM_API_Q_MAX + 1];           /* DLQ_LIST, _REPLAY, _PURGE of no
                                           id: ?q=, "" = any text */
    int64_t since, until;               /* ... ?since= and ?until= (epoch
                                           ms), INT64_MIN / INT64_MAX = no
                                           bound */
    int64_t due_ms;                     /* PUBLISH: not before this (epoch
                                           ms, ?delay= or ?at=); 0 = now */
    char *body;                         /* PUBLISH: the body received */
    size_t len, cap, max;               /* its length, room and cap */
    int too_big;                        /* more than max bytes came */
    int64_t deadline_ms;                /* answer 504 past this */
    /* the answer, once DONE: HTTP status and JSON text (owned) */
    unsigned status;
    char *answer;
    char next_after[TM_API_ID_MAX + 1]; /* the lists: the next page's after=
                                           ("" = this is the last page) */
    struct tm_api_req *prev, *next;     /* the worker's list */
};

struct tm_api_worker;

/* tm_api_worker_start starts the worker thread for d; NULL (with a
 * warning logged) when it cannot start: broker requests then answer 503.
 * wake_fd is the HTTP thread's eventfd, written once a request is
 * answered (see settle_req). */
struct tm_api_worker *tm_api_worker_start(struct tm_daemon *d, int wake_fd);

/* tm_api_worker_submit queues r (state RECEIVING, its connection just
 * suspended) with its deadline. Returns 0, or -1 when the queue is full or
 * the worker stopping: r is untouched and the caller resumes it itself. */
int tm_api_worker_submit(struct tm_api_worker *w, struct tm_api_req *r);

/* tm_api_worker_expire answers 504 to every queued or running request
 * past its deadline at now and resumes its connection. HTTP thread. */
void tm_api_worker_expire(struct tm_api_worker *w, int64_t now);

/* tm_api_worker_state returns r's state, read under the worker's mutex. */
enum tm_api_state tm_api_worker_state(struct tm_api_worker *w,
                                      const struct tm_api_req *r);

/* tm_api_worker_close answers 503 to every request still waiting, resumes
 * them, and waits for the operation under way; later submissions fail.
 * Call it while the HTTP thread still runs MHD. NULL accepted. */
void tm_api_worker_close(struct tm_api_worker *w);

/* tm_api_worker_free closes w if need be and frees it, once the HTTP
 * thread no longer runs; NULL accepted. */
void tm_api_worker_free(struct tm_api_worker *w);

/* tm_api_finish sets r's answer: status and the JSON text of j (deleted
 * here). Caller holds whatever guards r. */
void tm_api_finish(struct tm_api_req *r, unsigned status, void *j);

/* tm_api_error sets r's answer to {"error": TEXT}. */
void tm_api_error(struct tm_api_req *r, unsigned status, const char *fmt,
                  ...) __attribute__((format(printf, 3, 4)));

/* tm_api_admin_status is the HTTP status that answers an admin layer
 * refusal (admin/admin.h): 400 for what the request got wrong, 404 for
 * no such entry, 501 for what the broker cannot do, 502 for a broker's
 * failure, 504 for no answer in time. */
unsigned tm_api_admin_status(const struct tm_admin_err *e);

/* tm_api_admin_error sets r's answer to e: its status and
 * {"error": TEXT}, a broker's reason as "broker: REASON". */
void tm_api_admin_error(struct tm_api_req *r, const struct tm_admin_err *e);

#endif /* TASKMILL_HTTP_API_H */
