/* admin.h - what an operator runs against the broker, once for both front
 * ends: emit (now, at a time, request/reply), pause and resume, dead
 * letters (list, page, one, replay, purge, count), delayed messages
 * (list, run now, delete), queue depths and the schedules report. src/cli/ parses arguments and prints; src/http/
 * routes, renders JSON and picks status codes; neither calls the broker
 * seam's produce, admin or pause tables itself.
 *
 * Errors: every operation returns 0 on success and -1 on failure with
 * *e filled: e->code says what went wrong (the one vocabulary both front
 * ends map, to an exit status or an HTTP status), e->msg says it in a
 * sentence without a prefix, the broker's own reason for
 * TM_ADMIN_E_BROKER. A front end that words a code its own way (the
 * CLI names its flags) switches on e->code. */
#ifndef TASKMILL_ADMIN_H
#define TASKMILL_ADMIN_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"
#include "config/config.h"

struct tm_daemon;

/* What went wrong (struct tm_admin_err.code). */
enum tm_admin_code {
    TM_ADMIN_OK = 0,
    TM_ADMIN_E_BROKER = 1,       /* the broker failed or refused */
    TM_ADMIN_E_TIMEOUT = 2,      /* request: published, no answer in time */
    TM_ADMIN_E_NO_ENTRY = 3,     /* no dead letter with that id */
    TM_ADMIN_E_NO_PAUSE = 4,     /* the broker cannot pause a task */
    TM_ADMIN_E_NO_DELAY = 5,     /* the broker has no delayed messages */
    TM_ADMIN_E_NO_REQUEST = 6,   /* the broker has no request/reply */
    TM_ADMIN_E_NO_BROWSE = 7,    /* the broker cannot page dead letters */
    TM_ADMIN_E_NO_SCHEDULES = 8, /* the broker keeps no schedule state */
    TM_ADMIN_E_DUE_BOTH = 9,     /* a delay and a time both given */
    TM_ADMIN_E_DELAY_SYNTAX = 10, /* the delay is no duration */
    TM_ADMIN_E_AT_SYNTAX = 11,   /* the time is no TIME */
    TM_ADMIN_E_TOO_FAR = 12,     /* due more than TM_ADMIN_DELAY_MAX_MS
                                    ahead */
    TM_ADMIN_E_BODY_EMPTY = 13,  /* a message body of no bytes */
    TM_ADMIN_E_BODY_NUL = 14,    /* a NUL byte inside (e->at) */
    TM_ADMIN_E_BODY_UTF8 = 15,   /* not UTF-8 */
    TM_ADMIN_E_BODY_OTHER = 16,  /* JSON, but not an object */
    TM_ADMIN_E_BODY_JSON = 17,   /* not JSON (wrong at byte e->at) */
    TM_ADMIN_E_FILTER = 18,      /* a dead-letter filter that is no
                                    filter (since/until no TIME, text too
                                    long) */
    TM_ADMIN_E_NO_DELAYED = 19   /* no delayed message with that id */
};

/* struct tm_admin_err is one operation's failure; msg is always a whole
 * sentence (NUL-terminated, cut to fit). */
struct tm_admin_err {
    enum tm_admin_code code;
    size_t at;          /* TM_ADMIN_E_BODY_NUL / _JSON: the byte */
    char msg[1100];
};

/* The farthest a delayed message may lie ahead: 30 days, the range
 * docs/delivery.md gives delayed messages (RabbitMQ's delay queues). */
#define TM_ADMIN_DELAY_MAX_MS (30LL * 86400 * 1000)

/* Most entries tm_admin_dlq_list and tm_admin_dlq_count read. */
#define TM_ADMIN_DLQ_LIST_MAX ((size_t)1 << 20)

/* ---- a broker for one command ------------------------------------------
 * tm_admin_broker creates the broker adapter of cfg (borrowed; it
 * outlives the broker) on connections of its own, never the intake's: it
 * connects on its first operation. NULL with the reason in err when the
 * kind is not built in. tm_admin_broker_close destroys it (NULL
 * accepted). One thread per broker. */
struct tm_broker *tm_admin_broker(const struct tm_cfg *cfg, char *err,
                                  size_t errlen);
void tm_admin_broker_close(struct tm_broker *b);

/* ---- emit (emit.c) ------------------------------------------------------ */

/* tm_admin_can_delay / tm_admin_can_request say whether the adapter of
 * kind has delayed messages / request and reply (0 when this build has
 * no such adapter). */
int tm_admin_can_delay(enum tm_broker_kind kind);
int tm_admin_can_request(enum tm_broker_kind kind);

/*
 * tm_admin_due reads when a message is due: delay (a duration from now,
 * config units) or at (a TIME: RFC 3339 with a zone, or epoch ms), at
 * most one of them (both NULL: now). Sets *due_ms to the time (epoch ms:
 * now + delay, or at as given, which may be past), or 0 when neither is
 * given. With bound set, a time more than TM_ADMIN_DELAY_MAX_MS after now
 * is refused. Returns 0, or -1 with e->code TM_ADMIN_E_DUE_BOTH,
 * _NO_DELAY (the broker of kind has none), _DELAY_SYNTAX, _AT_SYNTAX or
 * _TOO_FAR, checked in that order. No I/O.
 */
int tm_admin_due(enum tm_broker_kind kind, const char *delay,
                 const char *at, int64_t now, int bound, int64_t *due_ms,
                 struct tm_admin_err *e);

/*
 * tm_admin_body_check accepts a message body of len bytes (body may be
 * NULL when len is 0): a UTF-8 JSON object. Returns 0, or -1 with e->code
 * TM_ADMIN_E_BODY_EMPTY, _NUL (e->at the first NUL), _UTF8, _OTHER or
 * _JSON (e->at where it goes wrong; len when it ends too early), checked
 * in that order. No I/O.
 */
int tm_admin_body_check(const char *body, size_t len,
                        struct tm_admin_err *e);

/* tm_admin_emit adds body (len bytes, checked by the caller) to task t's
 * queue with pub's options (NULL: none): now when due_ms is 0, else as a
 * delayed message due then (epoch ms). The new message id goes to id
 * (size idlen). 0, or -1: TM_ADMIN_E_NO_DELAY, _BROKER. */
int tm_admin_emit(struct tm_broker *b, const struct tm_cfg_task *t,
                  const char *body, size_t len, const struct tm_pub *pub,
                  int64_t due_ms, char *id, size_t idlen,
                  struct tm_admin_err *e);

struct tm_otel;

/* tm_admin_emit_traced is tm_admin_emit that, with an exporter o (NULL:
 * plain tm_admin_emit), starts a new trace for the message: its
 * traceparent travels with it, and a sampled one gets the PRODUCER span
 * "send <queue>". */
int tm_admin_emit_traced(struct tm_otel *o, struct tm_broker *b,
                         const struct tm_cfg_task *t, const char *body,
                         size_t len, const struct tm_pub *pub, int64_t due_ms,
                         char *id, size_t idlen, struct tm_admin_err *e);

/* tm_admin_request publishes body to t as a request and waits up to
 * timeout_ms for its answer: 0 with *reply (JSON text; the caller frees
 * it with tm_free) and *task_failed (the answer is the task's error
 * object) set. -1: TM_ADMIN_E_NO_REQUEST, _TIMEOUT (the request, id, was
 * published and stays queued), _BROKER. id (size idlen) is "" until the
 * request is published. */
int tm_admin_request(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     int64_t timeout_ms, char *id, size_t idlen,
                     char **reply, int *task_failed, struct tm_admin_err *e);

/* ---- pause (pause.c) ---------------------------------------------------- */

/* tm_admin_pause writes task t's pause state (paused: 1 pause, 0 resume)
 * in the broker, where every daemon reads it. 0, or -1:
 * TM_ADMIN_E_NO_PAUSE, _BROKER. */
int tm_admin_pause(struct tm_broker *b, const struct tm_cfg_task *t,
                   int paused, struct tm_admin_err *e);

/* tm_admin_pause_note tells d's own intake that the task named task was
 * just set to paused, so that it acts at once rather than at its next
 * read of the state: the task of that name in the configuration d runs
 * now, if any. Takes d->gen_lock for reading; no I/O. */
void tm_admin_pause_note(struct tm_daemon *d, const char *task, int paused);

/* ---- dead letters (dlq.c) ----------------------------------------------- */

/* What tm_admin_dlq_move does. */
enum tm_admin_move {
    TM_ADMIN_REPLAY = 1,   /* back to the task's queue */
    TM_ADMIN_PURGE = 2     /* deleted */
};

/* tm_admin_dlq_id_ok checks a dead-letter id's syntax for a broker of
 * kind: a Redis stream id (MS-SEQ, each part 1 to 20 digits), or for
 * RabbitMQ 1 to idmax printable ASCII characters without spaces. 1 or 0;
 * no I/O. */
int tm_admin_dlq_id_ok(enum tm_broker_kind kind, const char *id,
                       size_t idmax);

/* Longest text a dead-letter filter searches for, in bytes. */
#define TM_ADMIN_DLQ_TEXT_MAX 1024

/* tm_admin_dlq_filter reads a dead-letter filter (struct tm_dlq_filter:
 * text borrowed from text) from a front end's words: text (NULL or "":
 * any), since and until (NULL: no bound; a TIME as emit --at takes it:
 * RFC 3339 with a zone, or epoch ms). 0, or -1: TM_ADMIN_E_FILTER. No
 * I/O. */
int tm_admin_dlq_filter(const char *text, const char *since,
                        const char *until, struct tm_dlq_filter *f,
                        struct tm_admin_err *e);

/* tm_admin_dlq_list returns up to max of t's dead letters that f matches
 * (NULL: all), newest first, bodies whole, in a new array of *n entries
 * (free with tm_dlq_entries_free): the first max read, filtered here. 0,
 * or -1: TM_ADMIN_E_BROKER. */
int tm_admin_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                      size_t max, const struct tm_dlq_filter *f,
                      struct tm_dlq_entry **out, size_t *n,
                      struct tm_admin_err *e);

/* tm_admin_dlq_page returns one page of t's dead letters that f matches
 * (NULL: all; the broker filters), newest first:
 * those older than after (NULL: from the newest), max at most, a body or
 * error over body_max bytes cut and flagged, the page's kept bytes within
 * bytes_max (struct tm_dlq_query); a new array of *n entries (free with
 * tm_dlq_entries_free), *more set when older ones follow. 0, or -1:
 * TM_ADMIN_E_NO_BROWSE, _BROKER. */
int tm_admin_dlq_page(struct tm_broker *b, const struct tm_cfg_task *t,
                      const struct tm_dlq_filter *f,
                      const char *after, size_t max, size_t body_max,
                      size_t bytes_max, struct tm_dlq_entry **out,
                      size_t *n, int *more, struct tm_admin_err *e);

/* tm_admin_dlq_get returns t's dead letter id, body and error whole, in
 * a new array of one entry (free with tm_dlq_entries_free(*out, 1)). 0,
 * or -1: TM_ADMIN_E_NO_BROWSE, _NO_ENTRY, _BROKER. */
int tm_admin_dlq_get(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *id, struct tm_dlq_entry **out,
                     struct tm_admin_err *e);

/* tm_admin_dlq_move replays or purges t's dead letter id, or all of them
 * that f matches (id NULL; f NULL: every one), and sets *n to the count
 * this call moved (each entry is moved by one call only, however many
 * run at once). 0, or -1: TM_ADMIN_E_NO_ENTRY (an id that is not there),
 * _BROKER. */
int tm_admin_dlq_move(struct tm_broker *b, const struct tm_cfg_task *t,
                      enum tm_admin_move how, const char *id,
                      const struct tm_dlq_filter *f, long *n,
                      struct tm_admin_err *e);

/* tm_admin_dlq_count sets *n to how many dead letters task i of b->cfg
 * has: from the broker's depth read where it can tell, else by listing
 * them (up to TM_ADMIN_DLQ_LIST_MAX). The depth read opens its own
 * connection: close it with tm_admin_depth_close after the last count.
 * 0, or -1: TM_ADMIN_E_BROKER. */
int tm_admin_dlq_count(struct tm_broker *b, size_t i, long long *n,
                       struct tm_admin_err *e);

/* ---- delayed messages (delayed.c) ---------------------------------------- */

/* tm_admin_delayed_id_ok checks a delayed message id's syntax: 1 to idmax
 * printable ASCII characters without spaces (emit's are UUIDs). 1 or 0;
 * no I/O. */
int tm_admin_delayed_id_ok(const char *id, size_t idmax);

/* tm_admin_delayed_page returns one page of t's delayed messages, soonest
 * first: those after the one of id after (NULL: from the soonest), max at
 * most, a body over body_max bytes cut and flagged, the page's kept bytes
 * within bytes_max; a new array of *n entries (free with
 * tm_delayed_entries_free), *more set when later ones follow. 0, or -1:
 * TM_ADMIN_E_NO_DELAY (the broker cannot list them), _BROKER. */
int tm_admin_delayed_page(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *after, size_t max, size_t body_max,
                          size_t bytes_max, struct tm_delayed_entry **out,
                          size_t *n, int *more, struct tm_admin_err *e);

/* tm_admin_delayed_take runs t's delayed message id now (run_now set: it
 * enters the task's queue at once, its id and metadata kept) or deletes
 * it. Of concurrent calls on one id exactly one succeeds. 0, or -1:
 * TM_ADMIN_E_NO_DELAY, _NO_DELAYED (no such message waits: never there,
 * due already, or taken by another call), _BROKER. */
int tm_admin_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, int run_now,
                          struct tm_admin_err *e);

/* ---- queue depths (depth.c) ----------------------------------------------
 * Monitoring reads, on the adapter's own monitoring connection (the
 * broker seam's depth and scheduled: one caller at a time). */

/* struct tm_admin_depth is task i's counts, each -1 when the broker
 * cannot tell: messages not yet delivered, delivered and not
 * acknowledged, dead letters, the age of the oldest message not yet
 * delivered (ms), delayed messages already due (struct
 * tm_broker_depth says what each one is). */
struct tm_admin_depth {
    long long depth, pending, dlq, oldest_age_ms, delayed_due;
};

/* tm_admin_has_depth says whether b can read depths at all. */
int tm_admin_has_depth(const struct tm_broker *b);

/* tm_admin_depth reads task i's counts into *out. 0, or -1 when b has no
 * depth reads or cannot be reached (b->errstr is left alone: other
 * threads own it). */
int tm_admin_depth(struct tm_broker *b, size_t i, struct tm_admin_depth *out);

/* tm_admin_scheduled returns how many delayed messages of task i wait
 * for their time, -1 when the broker cannot tell cheaply. The depth
 * refresher's only, task 0 first in each round (the broker seam's
 * scheduled). */
long long tm_admin_scheduled(struct tm_broker *b, size_t i);

/* tm_admin_depth_close closes the connection depth reads opened; a
 * broker without depth reads has none. Call it before destroying b. */
void tm_admin_depth_close(struct tm_broker *b);

/* ---- schedules (schedules.c) -------------------------------------------- */

/* struct tm_admin_sched_row is one schedule: its configuration (borrowed
 * from the broker's), the last slot fired by any daemon and the next
 * slot (epoch ms; -1 when there is none or it is unknown). */
struct tm_admin_sched_row {
    const struct tm_cfg_schedule *s;
    int64_t last_ms;
    int64_t next_ms;
};

/*
 * tm_admin_schedules fills rows[0 .. b->cfg->nschedules) for the time
 * now: next slots from the configuration, last slots read from the
 * broker on a read-only session of their own (it takes no part in
 * firing). 0, or -1: TM_ADMIN_E_NO_SCHEDULES, _BROKER (the last slots are
 * then -1, the rest is filled).
 */
int tm_admin_schedules(struct tm_broker *b, int64_t now,
                       struct tm_admin_sched_row *rows,
                       struct tm_admin_err *e);

/* tm_admin_error fills e: its code and the sentence fmt makes. */
void tm_admin_error(struct tm_admin_err *e, enum tm_admin_code code,
                    const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* TASKMILL_ADMIN_H */
