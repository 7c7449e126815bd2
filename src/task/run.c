/* run.c - running one message through its plugin; the plugins' host
 * table, whose callbacks file what the plugin sets into the run. */
#include "task/task.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "task/host_json.h"
#include "util/json.h"
#include "util/log.h"
#include "util/util.h"

/* Largest result a plugin may set: results travel in replies and logs. */
#define TM_RESULT_MAX (16u * 1024u * 1024u)

/* struct tm_run is a call plus what the host needs to file its result.
 * What the plugin sets while it runs (error, result) is kept here, not in
 * the message: a watched run that outlives its deadline is settled by the
 * pool's watchdog while its code may still call the host, and the
 * settlement owns the message from then on (tm_exec_run_watched). */
struct tm_run {
    struct tm_call call;
    struct tm_msg *m;
    char *error;      /* owned, or NULL */
    char *result;     /* owned, or NULL */
    size_t result_len;
};

static struct tm_run *run_of(const struct tm_call *call)
{
    /* call is the first member of struct tm_run */
    return (struct tm_run *)(void *)(uintptr_t)call;
}

static void cb_host_log(const void *ctx, int kind, int level,
                        const char *fmt, ...)
{
    const char *task = NULL, *id = NULL;
    if (kind == 1) {
        const struct tm_run *r = run_of(ctx);
        task = r->m->task != NULL ? r->m->task->cfg->name : NULL;
        id = r->m->id;
    } else if (ctx != NULL) {
        task = ((const struct tm_task_env *)ctx)->task;
    }
    if (level < TM_LOG_ERR)
        level = TM_LOG_ERR;
    if (level > TM_LOG_DEBUG)
        level = TM_LOG_DEBUG;
    va_list ap;
    va_start(ap, fmt);
    tm_log_vwrite(level, "task", task, id, fmt, ap);
    va_end(ap);
}

static int cb_host_set_result(struct tm_call *call, const char *json,
                              size_t len)
{
    if (json == NULL || len > TM_RESULT_MAX)
        return -1;
    struct tm_run *r = run_of(call);
    char *copy = tm_malloc(len + 1);
    memcpy(copy, json, len);
    copy[len] = '\0';
    tm_free(r->result);
    r->result = copy;
    r->result_len = len;
    return 0;
}

static void cb_host_set_error(struct tm_call *call, const char *msg)
{
    struct tm_run *r = run_of(call);
    tm_free(r->error);
    r->error = tm_strdup(msg != NULL ? msg : "");
    /* one line, whatever the plugin wrote */
    for (char *p = r->error; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

static int64_t cb_host_now_ms(void)
{
    return tm_now_ms();
}

/* cb_host_should_stop answers for the call's own generation: a reload
 * that gives up on the replaced configuration's calls never stops the
 * calls of the configuration that replaced it. */
static int cb_host_should_stop(const struct tm_call *call)
{
    const struct tm_task *t = run_of(call)->m->task;
    if (t != NULL && t->abandon != NULL &&
        atomic_load_explicit(t->abandon, memory_order_relaxed))
        return 1;
    return call->deadline_ms > 0 && tm_now_ms() >= call->deadline_ms;
}

/* cb_host_json_result makes a builder's text the run's result: the
 * buffer changes hands, no copy. */
static int cb_host_json_result(struct tm_call *call, struct tm_json *jb)
{
    struct tm_run *r = run_of(call);
    char *text;
    size_t len;
    const char *why = tm_hjson_take(jb, &text, &len);
    if (why != NULL) {
        tm_free(r->error);
        r->error = tm_asprintf("cannot build the result: %s", why);
        return -1;
    }
    tm_free(r->result);
    r->result = text;
    r->result_len = len;
    return 0;
}

/* cb_host_traceparent: the run's trace context (tm_msg_trace_begin) */
static const char *cb_host_traceparent(const struct tm_call *call)
{
    const struct tm_msg *m = run_of(call)->m;
    return m->traceparent[0] != '\0' ? m->traceparent : NULL;
}

static const struct tm_host host = {
    .struct_size = sizeof(struct tm_host),
    .log = cb_host_log,
    .set_result = cb_host_set_result,
    .set_error = cb_host_set_error,
    .now_ms = cb_host_now_ms,
    .should_stop = cb_host_should_stop,
    TM_HOST_JSON_MEMBERS,
    .json_result = cb_host_json_result,
    .traceparent = cb_host_traceparent,
};

const struct tm_host *tm_exec_host(void)
{
    return &host;
}

/* validate_body returns 0 when the body is a UTF-8 JSON object within the
 * payload limit, else -1 with the reason in m->error. */
static int validate_body(struct tm_msg *m, const struct tm_cfg_task *t)
{
    if (m->invalid != NULL) {
        tm_msg_set_error(m, "%s", m->invalid);
        return -1;
    }
    if (m->body == NULL) {
        tm_msg_set_error(m, "no body field");
        return -1;
    }
    if (m->body_len > t->max_payload) {
        tm_msg_set_error(m, "body of %zu bytes exceeds max_payload "
                         "of %zu", m->body_len, t->max_payload);
        return -1;
    }
    /* One pass checks a body that is a JSON object in valid UTF-8 (which
     * holds no NUL byte, not even in a string). Any other is looked at
     * again, for the reason: a NUL byte, then bad UTF-8, then JSON. */
    size_t bad_at = 0;
    enum tm_json_check jc = tm_json_check_utf8(m->body, m->body_len);
    if (jc != TM_JSON_OBJECT) {
        if (memchr(m->body, '\0', m->body_len) != NULL) {
            tm_msg_set_error(m, "body contains a NUL byte");
            return -1;
        }
        if (!tm_utf8_valid(m->body, m->body_len)) {
            tm_msg_set_error(m, "body is not valid UTF-8");
            return -1;
        }
        jc = tm_json_check_at(m->body, m->body_len, &bad_at);
    }
    switch (jc) {
    case TM_JSON_OBJECT:
        break;
    case TM_JSON_OTHER:
        tm_msg_set_error(m, "body is not a JSON object");
        return -1;
    case TM_JSON_INVALID:
        tm_msg_set_error(m, "body is not valid JSON (at byte %zu)",
                         bad_at);
        return -1;
    }
    return 0;
}

void tm_exec_run(struct tm_msg *m, void *worker_data)
{
    tm_exec_run_from(m, worker_data, tm_now_ns());
}

void tm_exec_run_from(struct tm_msg *m, void *worker_data, int64_t start_ns)
{
    (void)tm_exec_run_watched(m, worker_data, start_ns, NULL);
}

/* watch_begin publishes a run with a deadline in watch: the deadline
 * first, then the state with release order, so that the watchdog, which
 * reads the state with acquire order, sees the deadline and everything
 * the worker wrote before the run (pool/thread.c: its chunk). Returns
 * the state published. */
static uint_fast64_t watch_begin(struct tm_run_watch *watch,
                                 int64_t deadline_ns)
{
    /* only this thread changes the run number; TAKEN is never set here:
     * a taken worker never runs again */
    uint_fast64_t s = atomic_load_explicit(&watch->state,
                                           memory_order_relaxed);
    uint_fast64_t next = ((s >> 2) + 1) << 2 | TM_RUN_ACTIVE;
    atomic_store_explicit(&watch->deadline_ns, deadline_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&watch->state, next, memory_order_release);
    return next;
}

/* watch_end ends the published run s: 0 when it is still this thread's
 * to file, -1 when the watchdog took it (set TM_RUN_TAKEN) first. */
static int watch_end(struct tm_run_watch *watch, uint_fast64_t s)
{
    uint_fast64_t want = s;
    return atomic_compare_exchange_strong_explicit(
               &watch->state, &want, s & ~(uint_fast64_t)TM_RUN_ACTIVE,
               memory_order_acq_rel, memory_order_acquire)
               ? 0
               : -1;
}

int tm_exec_run_watched(struct tm_msg *m, void *worker_data,
                        int64_t start_ns, struct tm_run_watch *watch)
{
    struct tm_task *task = m->task;
    const struct tm_cfg_task *t = task->cfg;
    m->t_start_ns = start_ns;
    if (validate_body(m, t) != 0) {
        m->outcome = TM_OUT_INVALID;
        m->t_end_ns = tm_now_ns();
        return 0;
    }
    if (!tm_policy_may_run(t, m->attempt)) {
        /* redelivered past the limit without being settled: the consumers
         * that ran it died (a crash, kill -9); do not run it again */
        m->outcome = TM_OUT_CRASHED;
        tm_msg_set_error(m, "delivery %u exceeds max_retries %d: earlier "
                         "runs failed or their consumer died; not run "
                         "again", m->attempt, t->max_retries);
        m->t_end_ns = tm_now_ns();
        return 0;
    }
    struct tm_run r = {
        .call = {
            .struct_size = sizeof(struct tm_call),
            .body = m->body,
            .body_len = m->body_len,
            .id = m->id,
            .attempt = m->attempt,
            .deadline_ms = t->timeout_ms > 0
                               ? m->t_start_ns / 1000000LL + t->timeout_ms
                               : 0,
            .task_data = task->plugin->task_data,
            .worker_data = worker_data,
            .host = &host,
        },
        .m = m,
    };
    /* a run with a deadline is published for the pool's watchdog, which
     * may settle it as a timeout while it runs; without a deadline there
     * is nothing to watch, and the fast path pays nothing */
    uint_fast64_t ws = 0;
    if (watch != NULL && r.call.deadline_ms > 0)
        ws = watch_begin(watch, m->t_start_ns + t->timeout_ms * 1000000LL);
    int rc = task->plugin->desc.cb_run(&r.call);
    int64_t end_ns = tm_now_ns();
    if (ws != 0 && watch_end(watch, ws) != 0) {
        /* settled at its deadline by the watchdog, which owns m now:
         * nothing of the run is filed, m is not written */
        tm_free(r.error);
        tm_free(r.result);
        return -1;
    }
    m->t_end_ns = end_ns;
    /* m->error and m->result are NULL before a run (validate_body and
     * the retry limit above return before it) */
    tm_free(m->error);
    m->error = r.error;
    tm_free(m->result);
    m->result = r.result;
    m->result_len = r.result_len;
    if (r.call.deadline_ms > 0 &&
        m->t_end_ns / 1000000LL >= r.call.deadline_ms) {
        /* cooperative timeout (thread pool): a late result is discarded */
        m->outcome = TM_OUT_TIMEOUT;
        tm_free(m->result);
        m->result = NULL;
        m->result_len = 0;
        tm_msg_set_error(m, "ran %lld ms, past the limit of %lld ms",
                         (long long)((m->t_end_ns - m->t_start_ns) / 1000000),
                         (long long)t->timeout_ms);
        return 0;
    }
    switch (rc) {
    case TM_TASK_OK:
        if (m->result != NULL &&
            (!tm_utf8_valid(m->result, m->result_len) ||
             tm_json_check(m->result, m->result_len) == TM_JSON_INVALID)) {
            /* never pass on what the task broke: a failed run instead */
            m->outcome = TM_OUT_ERROR;
            tm_free(m->result);
            m->result = NULL;
            m->result_len = 0;
            tm_msg_set_error(m, "invalid result: the task returned text "
                             "that is not UTF-8 JSON");
            break;
        }
        m->outcome = TM_OUT_SUCCESS;
        tm_free(m->error);
        m->error = NULL;
        break;
    case TM_TASK_ERROR:
        m->outcome = TM_OUT_ERROR;
        if (m->error == NULL)
            tm_msg_set_error(m, "task returned an error");
        break;
    case TM_TASK_REJECT:
        m->outcome = TM_OUT_REJECTED;
        if (m->error == NULL)
            tm_msg_set_error(m, "task rejected the message");
        break;
    default:
        m->outcome = TM_OUT_ERROR;
        tm_msg_set_error(m, "task returned %d, not a tm_task_result", rc);
        break;
    }
    return 0;
}
