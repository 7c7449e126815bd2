/* fleet_api.c - the fleet in the admin API: GET /api/v1/daemons, GET
 * /api/v1/daemons/INSTANCE and GET /api/v1/history (docs/http.md, The
 * fleet), run on the API worker with its broker. Announcements come from
 * other processes through the broker: each is checked field by field and
 * rebuilt before it is shown; one that does not pass is left out. */
#include "http/api_private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "broker/broker.h"
#include "daemon/daemon.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "http"

/* struct answer is what a job answers: status and JSON (or an error). */
struct answer {
    unsigned status;
    cJSON *json;
    char *err;          /* the error text, owned, when json is NULL */
};

/* Bounds of an announcement's strings and task list. */
#define FLEET_STR_MAX 256
#define FLEET_TASKS_MAX 10000
/* A refused announcement is logged at most this often. */
#define FLEET_LOG_MS 60000

/* one log line per FLEET_LOG_MS for refused announcements (any number
 * may be on the broker); the API worker is the one thread that logs them */
static struct tm_log_gate refused_gate = TM_LOG_GATE(1, FLEET_LOG_MS);

static void refused(const char *why, size_t len)
{
    unsigned long held = 0;
    if (tm_log_gate_pass(&refused_gate, tm_now_ms(), &held))
        tm_log_warn(SRC, "fleet: an announcement of %zu bytes was ignored: "
                    "%s (%lu more since the last line)", len, why, held);
}

/* str_field copies o's string field name (1..FLEET_STR_MAX bytes) into
 * dst; -1 when absent or another type or size. */
static int str_field(const cJSON *o, const char *name, cJSON *dst)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return -1;
    size_t n = strlen(v->valuestring);
    if (n == 0 || n > FLEET_STR_MAX)
        return -1;
    cJSON_AddStringToObject(dst, name, v->valuestring);
    return 0;
}

/* num_field copies o's whole number field name (0..2^53) into dst. */
static int num_field(const cJSON *o, const char *name, cJSON *dst)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
        v->valuedouble > 9007199254740992.0 ||
        v->valuedouble != (double)(long long)v->valuedouble)
        return -1;
    cJSON_AddNumberToObject(dst, name, v->valuedouble);
    return 0;
}

/* clean rebuilds one announcement from its text: only the documented
 * fields, each of its type; NULL (with why set) when any is missing or
 * wrong. */
static cJSON *clean(const char *text, const char **why)
{
    cJSON *in = cJSON_ParseWithLength(text, strlen(text));
    cJSON *out = cJSON_CreateObject();
    *why = "not a JSON object";
    if (!cJSON_IsObject(in))
        goto fail;
    *why = "a field is missing or of the wrong type";
    if (str_field(in, "instance", out) != 0 ||
        str_field(in, "host", out) != 0 || num_field(in, "pid", out) != 0 ||
        str_field(in, "version", out) != 0 ||
        str_field(in, "started", out) != 0 ||
        num_field(in, "config_generation", out) != 0 ||
        str_field(in, "broker", out) != 0)
        goto fail;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "pool");
    if (!cJSON_IsObject(p))
        goto fail;
    cJSON *po = cJSON_AddObjectToObject(out, "pool");
    if (str_field(p, "kind", po) != 0 || num_field(p, "size", po) != 0 ||
        num_field(p, "busy", po) != 0)
        goto fail;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(in, "tasks");
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) > FLEET_TASKS_MAX)
        goto fail;
    cJSON *to = cJSON_AddArrayToObject(out, "tasks");
    const cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsString(e) || e->valuestring == NULL ||
            strlen(e->valuestring) > FLEET_STR_MAX)
            goto fail;
        cJSON_AddItemToArray(to, cJSON_CreateString(e->valuestring));
    }
    if (str_field(in, "last_seen", out) != 0)
        goto fail;
    cJSON_Delete(in);
    return out;
fail:
    cJSON_Delete(in);
    cJSON_Delete(out);
    return NULL;
}

static void set_json(struct answer *out, cJSON *j)
{
    out->status = 200;
    out->json = j;
}

static void set_error(struct answer *out, unsigned status, const char *fmt,
                      ...) __attribute__((format(printf, 3, 4)));

static void set_error(struct answer *out, unsigned status, const char *fmt,
                      ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    out->status = status;
    out->err = tm_strdup(msg);
}

static int by_instance(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(cJSON_GetObjectItemCaseSensitive(x, "instance")->valuestring,
                  cJSON_GetObjectItemCaseSensitive(y, "instance")->valuestring);
}

static void run_daemons(struct tm_broker *b, enum tm_api_op op,
                        const char *instance, struct answer *out)
{
    char **texts = NULL;
    size_t n = 0;
    if (b->ops->fleet->list(b, &texts, &n) != 0) {
        set_error(out, 502, "broker: %s", b->errstr);
        return;
    }
    cJSON **v = tm_calloc(n + 1, sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *why;
        cJSON *o = clean(texts[i], &why);
        if (o == NULL)
            refused(why, strlen(texts[i]));
        else
            v[k++] = o;
    }
    tm_fleet_list_free(texts, n);
    qsort(v, k, sizeof *v, by_instance);
    cJSON *a = op == TM_API_DAEMONS ? cJSON_CreateArray() : NULL;
    cJSON *one = NULL;
    const char *last = NULL;
    for (size_t i = 0; i < k; i++) {
        const char *name =
            cJSON_GetObjectItemCaseSensitive(v[i], "instance")->valuestring;
        /* the same instance twice (two daemons given one name): the
         * first in order only (the array owns that one's name now) */
        int dup = last != NULL && strcmp(last, name) == 0;
        last = name;
        if (a != NULL && !dup) {
            cJSON_AddItemToArray(a, v[i]);
            v[i] = NULL;
        } else if (a == NULL && one == NULL && strcmp(name, instance) == 0) {
            one = v[i];
            v[i] = NULL;
        }
    }
    for (size_t i = 0; i < k; i++)
        cJSON_Delete(v[i]);
    tm_free(v);
    if (a != NULL)
        set_json(out, a);
    else if (one != NULL)
        set_json(out, one);
    else
        set_error(out, 404, "no daemon '%.*s' seen in the last %d s",
                     FLEET_STR_MAX, instance, TM_FLEET_TTL_MS / 1000);
}

/* add_local adds this daemon's counts of h to out[0..n) (buckets from
 * first): all of them when the broker keeps no history (unsent = 0), or
 * only those not sent to it yet. */
static void add_local(const struct tm_hist *h, int hourly, int64_t first,
                      size_t n, int unsent, uint64_t (*out)[TM_HK_N])
{
    if (!unsent) {
        tm_hist_read(h, hourly, first, n, out);
        return;
    }
    int64_t now_min = tm_wall_ms() / 60000;
    for (int64_t m = now_min - (TM_HIST_SHADOW - 1); m <= now_min; m++) {
        unsigned c[TM_HK_N];
        tm_hist_unsent(h, m, c, NULL);
        int64_t i = (hourly ? m / 60 : m) - first;
        if (i < 0 || i >= (int64_t)n)
            continue;
        for (int k = 0; k < TM_HK_N; k++)
            out[i][k] += c[k];
    }
}

static void run_history(struct tm_daemon *d, struct tm_broker *b,
                        const char *task, size_t range,
                        struct answer *out)
{
    int hourly = range == TM_API_RANGE_7D;
    size_t n = range == TM_API_RANGE_1H    ? 60
               : range == TM_API_RANGE_24H ? TM_HIST_MINUTES
                                           : TM_HIST_HOURS;
    int64_t step_ms = hourly ? 3600000 : 60000;
    int64_t first = tm_wall_ms() / step_ms - (int64_t)n + 1;
    uint64_t (*c)[TM_HK_N] = tm_calloc(n, sizeof *c);
    int kept = b->ops->fleet != NULL && b->ops->fleet->hist_read != NULL;
    if (kept && b->ops->fleet->hist_read(b, task[0] != '\0' ? task : NULL,
                                         hourly, first, n, c) != 0) {
        tm_free(c);
        set_error(out, 502, "broker: %s", b->errstr);
        return;
    }
    /* a broker that keeps the counts has this daemon's but those not
     * sent yet; the daemons' answers (no broker copy) include its own;
     * without a fleet the history is this daemon's ring */
    int unsent = kept && b->ops->fleet->hist_flush != NULL;
    if (kept && !unsent) {
        /* nothing of this daemon's to add */
    } else if (task[0] != '\0') {
        struct tm_hist *h = tm_hist_find(&d->hist, task);
        if (h != NULL)
            add_local(h, hourly, first, n, unsent, c);
    } else {
        size_t nh = 0;
        struct tm_hist **hv = tm_hist_snapshot(&d->hist, &nh);
        for (size_t i = 0; i < nh; i++)
            add_local(hv[i], hourly, first, n, unsent, c);
        tm_free(hv);
    }
    static const char *const names[TM_HK_N] = {"success", "failed",
                                               "dead_lettered", "retried"};
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step_seconds", (double)(step_ms / 1000));
    cJSON_AddStringToObject(j, "range", range == TM_API_RANGE_1H    ? "1h"
                                        : range == TM_API_RANGE_24H ? "24h"
                                                                    : "7d");
    if (task[0] != '\0')
        cJSON_AddStringToObject(j, "task", task);
    else
        cJSON_AddNullToObject(j, "task");
    cJSON *a = cJSON_AddArrayToObject(j, "points");
    for (size_t i = 0; i < n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "t",
                                (double)((first + (int64_t)i) * step_ms));
        for (int k = 0; k < TM_HK_N; k++)
            cJSON_AddNumberToObject(p, names[k], (double)c[i][k]);
        cJSON_AddItemToArray(a, p);
    }
    tm_free(c);
    set_json(out, j);
}

static void fleet_run(struct tm_daemon *d, struct tm_broker *b,
                      enum tm_api_op op, const char *name, size_t range,
                      struct answer *out);

unsigned tm_api_fleet_run(struct tm_daemon *d, struct tm_broker *b,
                          enum tm_api_op op, const char *name, size_t range,
                          void **json, char **err)
{
    struct answer a = {0};
    fleet_run(d, b, op, name, range, &a);
    *json = a.json;
    *err = a.err;
    return a.status;
}

static void fleet_run(struct tm_daemon *d, struct tm_broker *b,
                      enum tm_api_op op, const char *name, size_t range,
                      struct answer *out)
{
    if (op == TM_API_HISTORY) {
        run_history(d, b, name, range, out);
        return;
    }
    if (b->ops->fleet == NULL) {
        set_error(out, 501, "the %s broker has no fleet",
                     b->ops->kind);
        return;
    }
    run_daemons(b, op, name, out);
}
