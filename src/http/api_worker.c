/* api_worker.c - the admin API's broker operations (dead letters,
 * publish, pause), run on a thread of their own so that a slow or silent broker
 * never stalls the HTTP thread: the request's connection is suspended
 * meanwhile, and resumed when the answer is ready or its deadline passed. */
#include "http/api_private.h"
#include "http/http_private.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "daemon/daemon.h"
#include "schedule/schedule.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "http"

/* Requests waiting for the worker at most; more answer 503 at once. */
#define TM_API_QUEUE_MAX 32

/*
 * struct tm_api_worker: list holds every suspended request (QUEUED or
 * RUNNING), in submission order; running is the one the worker runs, or
 * NULL (also once that one was answered by its deadline: the worker then
 * drops its result and never touches it again). All under mu.
 */
struct tm_api_worker {
    struct tm_daemon *d;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;                 /* a request queued, or stop */
    struct tm_api_req list;            /* circular, sentinel */
    size_t nlist;
    struct tm_api_req *running;
    int stop;
    int wake_fd;                       /* the HTTP thread's eventfd */
};

void tm_api_finish(struct tm_api_req *r, unsigned status, void *j)
{
    char *text = j != NULL ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    tm_free(r->answer);
    r->answer = text != NULL ? tm_strdup(text)
                             : tm_strdup("{\"error\":\"out of memory\"}");
    r->status = text != NULL ? status : 500;
    cJSON_free(text);
}

void tm_api_error(struct tm_api_req *r, unsigned status, const char *fmt,
                  ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    tm_api_finish(r, status, j);
}

unsigned tm_api_admin_status(const struct tm_admin_err *e)
{
    switch (e->code) {
    case TM_ADMIN_OK:
    case TM_ADMIN_E_BROKER:
        break;
    case TM_ADMIN_E_TIMEOUT:
        return 504;
    case TM_ADMIN_E_NO_ENTRY:
    case TM_ADMIN_E_NO_DELAYED:
        return 404;
    case TM_ADMIN_E_NO_PAUSE:
    case TM_ADMIN_E_NO_DELAY:
    case TM_ADMIN_E_NO_REQUEST:
    case TM_ADMIN_E_NO_BROWSE:
    case TM_ADMIN_E_NO_SCHEDULES:
        return 501;
    case TM_ADMIN_E_DUE_BOTH:
    case TM_ADMIN_E_DELAY_SYNTAX:
    case TM_ADMIN_E_AT_SYNTAX:
    case TM_ADMIN_E_TOO_FAR:
    case TM_ADMIN_E_BODY_EMPTY:
    case TM_ADMIN_E_BODY_NUL:
    case TM_ADMIN_E_BODY_UTF8:
    case TM_ADMIN_E_BODY_OTHER:
    case TM_ADMIN_E_BODY_JSON:
    case TM_ADMIN_E_FILTER:
        return 400;
    }
    return 502;
}

void tm_api_admin_error(struct tm_api_req *r, const struct tm_admin_err *e)
{
    if (e->code == TM_ADMIN_E_BROKER)
        tm_api_error(r, 502, "broker: %s", e->msg);
    else
        tm_api_error(r, tm_api_admin_status(e), "%s", e->msg);
}

/* ---- the list (mu held) ------------------------------------------------ */

static void list_add(struct tm_api_worker *w, struct tm_api_req *r)
{
    r->prev = w->list.prev;
    r->next = &w->list;
    w->list.prev->next = r;
    w->list.prev = r;
    w->nlist++;
}

/* settle_req unlinks r, makes it DONE and resumes its connection; the
 * HTTP thread then answers it from status and answer. MHD polled from
 * outside (MHD_USE_EPOLL without its own thread) does not signal a resume
 * itself, so the HTTP thread is woken here: without it, the answer
 * waited for the loop's next tick, up to a second. */
static void settle_req(struct tm_api_worker *w, struct tm_api_req *r)
{
    assert(r->state == TM_API_QUEUED || r->state == TM_API_RUNNING);
    r->prev->next = r->next;
    r->next->prev = r->prev;
    r->prev = r->next = NULL;
    w->nlist--;
    if (w->running == r)
        w->running = NULL;
    r->state = TM_API_DONE;
    MHD_resume_connection(r->conn);
    uint64_t one = 1;
    if (w->wake_fd >= 0 && write(w->wake_fd, &one, sizeof one) < 0) {
        /* saturated: the HTTP thread is awake anyway */
    }
}

/* ---- the operations (worker thread, no lock) ---------------------------- */

/* struct job is the worker's own copy of a request's inputs. */
struct job {
    enum tm_api_op op;
    char task[TM_API_NAME_MAX + 1];
    char id[TM_API_ID_MAX + 1];
    size_t limit;
    char after[TM_API_ID_MAX + 1];   /* DLQ_LIST: "" = from the newest */
    char q[TM_API_Q_MAX + 1];        /* the dead-letter filter's */
    struct tm_dlq_filter filter;     /* text is q, or NULL */
    int64_t due_ms;    /* PUBLISH: epoch ms, 0 = now */
    char *body;
    size_t len;
};

static cJSON *entry_json(const struct tm_dlq_entry *e)
{
    char when[40];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", e->id != NULL ? e->id : "");
    if (e->origin_id != NULL)
        cJSON_AddStringToObject(o, "origin_id", e->origin_id);
    else
        cJSON_AddNullToObject(o, "origin_id");
    cJSON_AddNumberToObject(o, "attempts", (double)e->attempts);
    if (e->failed_at > 0) {
        tm_rfc3339(e->failed_at, when, sizeof when);
        cJSON_AddStringToObject(o, "failed_at", when);
    } else {
        cJSON_AddNullToObject(o, "failed_at");
    }
    cJSON_AddStringToObject(o, "error", e->error != NULL ? e->error : "");
    cJSON_AddStringToObject(o, "body", e->body != NULL ? e->body : "");
    cJSON_AddBoolToObject(o, "truncated", e->truncated);
    cJSON_AddNumberToObject(o, "body_bytes", (double)e->body_len);
    return o;
}

/* json_len is the length of s as a JSON string, quotes included (as
 * cJSON escapes it: a two-byte escape for quote, backslash and \b \f \n
 * \r \t, six bytes for the other control characters). */
static size_t json_len(const char *s)
{
    size_t n = 2;
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
            c == '\r' || c == '\t')
            n += 2;
        else if (c < 0x20)
            n += 6;
        else
            n++;
    }
    return n;
}

/* entry_cost bounds the JSON text of entry_json(e) from above: its
 * strings as escaped, plus the names, numbers and punctuation. */
static size_t entry_cost(const struct tm_dlq_entry *e)
{
    return json_len(e->id) + json_len(e->origin_id) + json_len(e->error) +
           json_len(e->body) + 200;
}

/* run_list answers one page of t's dead letters: at most job->limit
 * entries, bodies cut at TM_API_BODY_MAX, and no more entries than fit
 * TM_API_PAGE_BYTES of JSON; out->next_after names the last entry when older
 * ones follow it. */
static void run_list(struct tm_broker *b, const struct tm_cfg_task *t,
                     const struct job *job, struct tm_api_req *out)
{
    struct tm_dlq_entry *e = NULL;
    size_t n = 0;
    int more = 0;
    struct tm_admin_err err;
    if (tm_admin_dlq_page(b, t, &job->filter,
                          job->after[0] != '\0' ? job->after : NULL,
                          job->limit, TM_API_BODY_MAX, TM_API_PAGE_BYTES, &e,
                          &n, &more, &err) != 0) {
        tm_api_admin_error(out, &err);
        return;
    }
    cJSON *a = cJSON_CreateArray();
    size_t used = 2, i = 0;
    for (; i < n; i++) {
        size_t cost = entry_cost(&e[i]) + 1;
        if (i > 0 && used + cost > TM_API_PAGE_BYTES)
            break;
        used += cost;
        cJSON_AddItemToArray(a, entry_json(&e[i]));
    }
    if ((more || i < n) && i > 0)
        tm_snprintf(out->next_after, sizeof out->next_after, "%s", e[i - 1].id);
    tm_dlq_entries_free(e, n);
    tm_api_finish(out, 200, a);
}

/* add_slot adds a slot as RFC 3339 (name) and epoch ms (name_ms), both
 * null when ms < 0 (none, or unknown). */
static void add_slot(cJSON *o, const char *name, int64_t ms)
{
    char key[40], when[40];
    tm_snprintf(key, sizeof key, "%s_ms", name);
    if (ms < 0) {
        cJSON_AddNullToObject(o, name);
        cJSON_AddNullToObject(o, key);
        return;
    }
    tm_rfc3339(ms, when, sizeof when);
    cJSON_AddStringToObject(o, name, when);
    cJSON_AddNumberToObject(o, key, (double)ms);
}

/* run_delayed answers one page of t's delayed messages, bounded as
 * run_list's dead letters; out->next_after names the last entry when
 * later ones follow it. */
static void run_delayed(struct tm_broker *b, const struct tm_cfg_task *t,
                        const struct job *job, struct tm_api_req *out)
{
    struct tm_delayed_entry *e = NULL;
    size_t n = 0;
    int more = 0;
    struct tm_admin_err err;
    if (tm_admin_delayed_page(b, t, job->after[0] != '\0' ? job->after : NULL,
                              job->limit, TM_API_BODY_MAX, TM_API_PAGE_BYTES,
                              &e, &n, &more, &err) != 0) {
        tm_api_admin_error(out, &err);
        return;
    }
    cJSON *a = cJSON_CreateArray();
    size_t used = 2, i = 0;
    for (; i < n; i++) {
        size_t cost = json_len(e[i].id) + json_len(e[i].body) + 200;
        if (i > 0 && used + cost > TM_API_PAGE_BYTES)
            break;
        used += cost;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", e[i].id);
        add_slot(o, "due", e[i].due_ms);
        cJSON_AddStringToObject(o, "body", e[i].body);
        cJSON_AddBoolToObject(o, "truncated", e[i].truncated);
        cJSON_AddNumberToObject(o, "body_bytes", (double)e[i].body_len);
        cJSON_AddItemToArray(a, o);
    }
    if ((more || i < n) && i > 0)
        tm_snprintf(out->next_after, sizeof out->next_after, "%s", e[i - 1].id);
    tm_delayed_entries_free(e, n);
    tm_api_finish(out, 200, a);
}

/* run_get answers one dead letter of t, body whole, or 404. */
static void run_get(struct tm_broker *b, const struct tm_cfg_task *t,
                    const struct job *job, struct tm_api_req *out)
{
    struct tm_dlq_entry *e = NULL;
    struct tm_admin_err err;
    if (tm_admin_dlq_get(b, t, job->id, &e, &err) != 0) {
        tm_api_admin_error(out, &err);
        return;
    }
    tm_api_finish(out, 200, entry_json(&e[0]));
    tm_dlq_entries_free(e, 1);
}

/* set_pause writes task t's pause state with b, tells d's own intake at
 * once (the other daemons read it within their poll period), and answers
 * the task's new state. t is a task of the generation the job holds
 * (see run_job), which may have been replaced since. */
static void set_pause(struct tm_daemon *d, struct tm_broker *b,
                      const struct tm_cfg_task *t, int paused,
                      struct tm_api_req *out)
{
    struct tm_admin_err err;
    if (tm_admin_pause(b, t, paused, &err) != 0) {
        tm_api_admin_error(out, &err);
        return;
    }
    tm_admin_pause_note(d, t->name, paused);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", t->name);
    cJSON_AddBoolToObject(j, "paused", paused);
    tm_api_finish(out, 200, j);
}

/* run_schedules answers GET /api/v1/schedules: each schedule of b's
 * configuration with its last slot, read from the broker, and its next. */
static void run_schedules(struct tm_broker *b, struct tm_api_req *out)
{
    const struct tm_cfg *cfg = b->cfg;
    size_t n = cfg->nschedules;
    struct tm_admin_sched_row *rows = tm_calloc(n ? n : 1, sizeof *rows);
    struct tm_admin_err err;
    if (tm_admin_schedules(b, tm_sched_now_ms(), rows, &err) != 0) {
        /* 502 whatever the reason, a broker without schedule state too */
        tm_api_error(out, 502, "broker: %s", err.msg);
        tm_free(rows);
        return;
    }
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        const struct tm_cfg_schedule *s = rows[i].s;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "task", s->task);
        cJSON_AddStringToObject(o, "spec", s->spec_text);
        if (s->timezone != NULL)
            cJSON_AddStringToObject(o, "timezone", s->timezone);
        else
            cJSON_AddNullToObject(o, "timezone");
        cJSON_AddStringToObject(o, "catch_up", s->catch_up ==
                                TM_CATCH_UP_ONCE ? "once" : "skip");
        add_slot(o, "last_slot", rows[i].last_ms);
        add_slot(o, "next_slot", rows[i].next_ms);
        cJSON_AddItemToArray(a, o);
    }
    tm_free(rows);
    tm_api_finish(out, 200, a);
}

/* run_on runs job on broker b for task t; the answer goes to out. */
static void run_on(struct tm_daemon *d, struct tm_broker *b,
                   const struct tm_cfg_task *t, const struct job *job,
                   struct tm_api_req *out)
{
    const char *id = job->id[0] != '\0' ? job->id : NULL;
    struct tm_admin_err err;
    switch (job->op) {
    case TM_API_SCHEDULES:
        run_schedules(b, out);
        break;
    case TM_API_DLQ_LIST:
        run_list(b, t, job, out);
        break;
    case TM_API_DLQ_GET:
        run_get(b, t, job, out);
        break;
    case TM_API_DELAYED_LIST:
        run_delayed(b, t, job, out);
        break;
    case TM_API_DELAYED_RUN:
    case TM_API_DELAYED_DELETE: {
        int run = job->op == TM_API_DELAYED_RUN;
        if (tm_admin_delayed_take(b, t, job->id, run, &err) != 0) {
            tm_api_admin_error(out, &err);
            break;
        }
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", job->id);
        cJSON_AddBoolToObject(j, run ? "run_now" : "deleted", 1);
        tm_api_finish(out, 200, j);
        break;
    }
    case TM_API_DLQ_REPLAY:
    case TM_API_DLQ_PURGE: {
        int replay = job->op == TM_API_DLQ_REPLAY;
        long n = 0;
        if (tm_admin_dlq_move(b, t, replay ? TM_ADMIN_REPLAY : TM_ADMIN_PURGE,
                              id, &job->filter, &n, &err) != 0) {
            tm_api_admin_error(out, &err);
            break;
        }
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, replay ? "replayed" : "purged", (double)n);
        tm_api_finish(out, 200, j);
        break;
    }
    case TM_API_PUBLISH: {
        char newid[TM_API_ID_MAX];
        /* a due time was accepted only for a broker with delayed
         * messages (parse_due) */
        if (tm_admin_emit_traced(d->otel, b, t, job->body, job->len,
                                 /* pub = */ NULL, job->due_ms, newid,
                                 sizeof newid, &err) != 0) {
            tm_api_admin_error(out, &err);
            break;
        }
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", newid);
        tm_api_finish(out, 201, j);
        break;
    }
    case TM_API_PAUSE:
    case TM_API_RESUME:
        set_pause(d, b, t, job->op == TM_API_PAUSE, out);
        break;
    case TM_API_DAEMONS:
    case TM_API_DAEMON:
    case TM_API_HISTORY: {
        void *j = NULL;
        char *why = NULL;
        unsigned st = tm_api_fleet_run(d, b, job->op, job->task, job->limit,
                                       &j, &why);
        if (j != NULL)
            tm_api_finish(out, st, j);
        else
            tm_api_error(out, st, "%s", why != NULL ? why : "failed");
        tm_free(why);
        break;
    }
    }
}

/*
 * The generation a job runs on: its broker connection borrows the
 * generation's configuration, and the job's task is one of its tasks.
 * run_job takes the current generation with a reference of its own
 * (tm_gen_current: gen_lock is held for that moment only) and calls the
 * broker without gen_lock, so a reload (gen_lock for writing) never waits
 * for a broker call, however slow; HTTP readers do not either. A reload
 * meanwhile publishes the next generation, and the one the job holds is
 * freed by whichever holder drops the last reference: the job, when it
 * is the last. A configuration is not changed once published.
 */

/* run_job runs job on a broker connection of its own, made like the
 * CLI's, never the intake's, for the generation current when it starts
 * (held by a reference; gen_lock is not held). */
static void run_job(struct tm_daemon *d, const struct job *job,
                    struct tm_api_req *out)
{
    char err[512];
    struct tm_gen *g = tm_gen_current(d);
    const struct tm_cfg *cfg = g->cfg;
    const struct tm_cfg_task *t = tm_cfg_find_task(cfg, job->task);
    struct tm_broker *b = NULL;
    int no_task = job->op == TM_API_SCHEDULES || job->op == TM_API_DAEMONS ||
                  job->op == TM_API_DAEMON ||
                  (job->op == TM_API_HISTORY && job->task[0] == '\0');
    if (t == NULL && !no_task) {
        tm_api_error(out, 404, "no task '%s'", job->task);
        goto out;
    }
    b = tm_admin_broker(cfg, err, sizeof err);
    if (b == NULL) {
        tm_api_error(out, 500, "%s", err);
        goto out;
    }
    run_on(d, b, t, job, out);
out:
    tm_admin_broker_close(b);
    tm_gen_unref(g);
}

static void *worker_main(void *arg)
{
    struct tm_api_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        struct tm_api_req *r = w->list.next;
        while (r != &w->list && r->state != TM_API_QUEUED)
            r = r->next;
        if (w->stop)
            break;
        if (r == &w->list) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        struct job job = {.op = r->op, .limit = r->limit,
                          .due_ms = r->due_ms, .len = r->len};
        tm_snprintf(job.task, sizeof job.task, "%s", r->task);
        tm_snprintf(job.id, sizeof job.id, "%s", r->id);
        tm_snprintf(job.after, sizeof job.after, "%s", r->after);
        tm_snprintf(job.q, sizeof job.q, "%s", r->q);
        job.filter.text = job.q[0] != '\0' ? job.q : NULL;
        job.filter.since = r->since;
        job.filter.until = r->until;
        job.body = r->body != NULL ? tm_strndup(r->body, r->len) : NULL;
        r->state = TM_API_RUNNING;
        w->running = r;
        pthread_mutex_unlock(&w->mu);

        struct tm_api_req out = {0};
        run_job(w->d, &job, &out);
        tm_free(job.body);

        pthread_mutex_lock(&w->mu);
        /* r is only dereferenced while still ours: an expired request
         * was answered and may be gone (running was cleared then) */
        if (w->running == r) {
            assert(r->state == TM_API_RUNNING);
            tm_free(r->answer);
            r->answer = out.answer;
            r->status = out.status;
            memcpy(r->next_after, out.next_after, sizeof r->next_after);
            out.answer = NULL;
            settle_req(w, r);
        }
        tm_free(out.answer);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- the HTTP thread's side -------------------------------------------- */

struct tm_api_worker *tm_api_worker_start(struct tm_daemon *d, int wake_fd)
{
    struct tm_api_worker *w = tm_calloc(1, sizeof *w);
    w->d = d;
    w->wake_fd = wake_fd;
    w->list.prev = w->list.next = &w->list;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        tm_log_warn(SRC, "cannot start the admin API worker; API requests "
                    "that reach the broker answer 503");
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        tm_free(w);
        return NULL;
    }
    return w;
}

int tm_api_worker_submit(struct tm_api_worker *w, struct tm_api_req *r)
{
    int rc = -1;
    assert(r->state == TM_API_RECEIVING);
    pthread_mutex_lock(&w->mu);
    if (!w->stop && w->nlist < TM_API_QUEUE_MAX) {
        r->state = TM_API_QUEUED;
        list_add(w, r);
        pthread_cond_signal(&w->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void tm_api_worker_expire(struct tm_api_worker *w, int64_t now)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    /* submission order is deadline order: every deadline is the same
     * span after submission */
    while (w->list.next != &w->list && w->list.next->deadline_ms <= now) {
        struct tm_api_req *r = w->list.next;
        tm_api_error(r, 504, "the broker did not answer in time");
        settle_req(w, r);
    }
    pthread_mutex_unlock(&w->mu);
}

enum tm_api_state tm_api_worker_state(struct tm_api_worker *w,
                                      const struct tm_api_req *r)
{
    pthread_mutex_lock(&w->mu);
    enum tm_api_state s = r->state;
    pthread_mutex_unlock(&w->mu);
    return s;
}

void tm_api_worker_close(struct tm_api_worker *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        return;
    }
    w->stop = 1;
    while (w->list.next != &w->list) {
        struct tm_api_req *r = w->list.next;
        tm_api_error(r, 503, "the daemon is stopping");
        settle_req(w, r);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    assert(w->nlist == 0 && w->running == NULL);
}

void tm_api_worker_free(struct tm_api_worker *w)
{
    if (w == NULL)
        return;
    tm_api_worker_close(w);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    tm_free(w);
}
