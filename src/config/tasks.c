/* config/tasks.c - the tasks: section. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif

#include "config/config_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "taskmill.h" /* TM_LOG_* levels */
#include "util/util.h"

/* ---------------------------------------------------------------- tasks */

/* in the order of tm_cfg_sec_task (keys.c) */
enum task_key {
    TK_PLUGIN, TK_QUEUE, TK_GROUP, TK_PREFETCH, TK_TIMEOUT, TK_CLAIM_IDLE,
    TK_MAXLEN, TK_ON_ERROR, TK_MAX_RETRIES, TK_BACKOFF, TK_MAX_BACKOFF,
    TK_DEAD_LETTER, TK_MAX_PAYLOAD, TK_MAX_PRIORITY, TK_PRIORITY, TK_CONFIG,
    TK_CIRCUIT_FAILURES, TK_CIRCUIT_COOL_OFF, TK_CIRCUIT_MAX_COOL_OFF,
    TK_RATE_LIMIT, TK_CONCURRENCY, TK_DEDUP_TTL, TK_REPLY_TTL
};

static const struct choice on_error_choices[] = {
    { "requeue", TM_ON_ERROR_REQUEUE, 1 },
    { "reject", TM_ON_ERROR_REJECT, 1 },
};

int tm_cfg_valid_task_name(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++) {
        if (!tm_cfg_is_host_char((unsigned char)*s))
            return 0;
    }
    return 1;
}

static void task_defaults(struct tm_cfg_task *t)
{
    t->group = tm_strdup("taskmill");
    t->prefetch = 16;
    t->timeout_ms = 30000;
    t->claim_idle_ms = 60000;
    t->maxlen = 0;
    t->on_error = TM_ON_ERROR_REQUEUE;
    t->max_retries = 3;
    t->backoff_ms = 1000;
    t->max_backoff_ms = 300000;
    t->max_payload = (size_t)1 << 20;
    t->max_priority = 0;
    t->priority = 0;
    t->circuit_failures = 5;
    t->circuit_cool_off_ms = 5000;
    t->circuit_max_cool_off_ms = 300000;
    t->reply_ttl_ms = 300000;
}

/* task_walk is what a task's keys need besides the task itself. */
struct task_walk {
    struct tm_cfg_task *t;
    struct task_marks *tmk;
    bool has_max_backoff;
    const yaml_node_t *max_backoff_v;
    const yaml_node_t *max_cool_off_v;  /* circuit_max_cool_off, if given */
};

/* RATE_MAX bounds rate_limit's count: far above any broker's rate, and
 * small enough that count * period stays exact in every computation. */
#define RATE_MAX 1000000000LL

/*
 * get_rate reads rate_limit: "N/s", "N/m" or "N/h" (also "/sec", "/min",
 * "/hour"), N a whole number 1..RATE_MAX, or null for none. Stores
 * rate_count = N and rate_period_ms = the unit; rate_count 0 means no
 * limit. Returns 0, or -1 after reporting an error.
 */
static int get_rate(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, struct tm_cfg_task *t)
{
    static const struct { const char *unit; int64_t ms; } units[] = {
        { "s", 1000 }, { "sec", 1000 }, { "m", 60000 }, { "min", 60000 },
        { "h", 3600000 }, { "hour", 3600000 },
    };
    char shown[CFG_CLIP + 8];
    if (tm_cfg_is_null(v)) {
        t->rate_count = 0;
        t->rate_period_ms = 0;
        return 0;
    }
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    int rc = -1;
    char *slash = strchr(s, '/');
    int64_t n = 0;
    if (slash != NULL) {
        *slash = '\0';
        if (tm_cfg_parse_i64(s, &n) == 0 && n >= 1 && n <= RATE_MAX) {
            for (size_t i = 0; i < NELEM(units); i++) {
                if (strcmp(slash + 1, units[i].unit) == 0) {
                    t->rate_count = (uint32_t)n;
                    t->rate_period_ms = units[i].ms;
                    rc = 0;
                    break;
                }
            }
        }
        *slash = '/';
    }
    if (rc != 0)
        tm_cfg_fail(c, tm_cfg_mark_of(v),
                    "%s: '%s' is not a rate; expected a rate like 100/s, "
                    "30/m or 1000/h (a whole number from 1 to %lld per "
                    "second, minute or hour)",
                    path, tm_cfg_clip(s, shown, sizeof shown), RATE_MAX);
    tm_free(s);
    return rc;
}

static int cb_task_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct task_walk *tw = arg;
    struct tm_cfg_task *t = tw->t;
    int64_t x = 0;
    int e = 0, r = 0;
    switch ((enum task_key)i) {
    case TK_PLUGIN:
        r = tm_cfg_get_string(c, key, val, path, &t->plugin);
        if (r == 0)
            t->plugin_at = tm_cfg_mark_of(val);
        break;
    case TK_QUEUE:
        r = tm_cfg_get_string(c, key, val, path, &t->queue);
        tw->tmk->queue_at = tm_cfg_mark_of(val);
        tw->tmk->has_queue = true;
        break;
    case TK_GROUP:
        r = tm_cfg_get_string(c, key, val, path, &t->group);
        break;
    case TK_PREFETCH:
        r = tm_cfg_get_int(c, key, val, path, 1, 65535, &x);
        t->prefetch = (unsigned)x;
        break;
    case TK_TIMEOUT:
        r = tm_cfg_get_duration(c, key, val, path, 0, &t->timeout_ms);
        break;
    case TK_CLAIM_IDLE:
        r = tm_cfg_get_duration(c, key, val, path, 1, &t->claim_idle_ms);
        break;
    case TK_MAXLEN:
        r = tm_cfg_get_int(c, key, val, path, 0, INT64_MAX, &t->maxlen);
        break;
    case TK_ON_ERROR:
        r = tm_cfg_get_enum(c, key, val, path, on_error_choices,
                     NELEM(on_error_choices), &e);
        t->on_error = (enum tm_on_error)e;
        break;
    case TK_MAX_RETRIES:
        r = tm_cfg_get_int(c, key, val, path, -1, INT_MAX, &x);
        t->max_retries = (int)x;
        break;
    case TK_BACKOFF:
        r = tm_cfg_get_duration(c, key, val, path, 1, &t->backoff_ms);
        break;
    case TK_MAX_BACKOFF:
        r = tm_cfg_get_duration(c, key, val, path, 0, &t->max_backoff_ms);
        tw->has_max_backoff = true;
        tw->max_backoff_v = val;
        break;
    case TK_DEAD_LETTER:
        r = tm_cfg_get_string(c, key, val, path, &t->dead_letter);
        tw->tmk->dead_letter_at = tm_cfg_mark_of(val);
        tw->tmk->has_dead_letter = true;
        break;
    case TK_MAX_PAYLOAD:
        r = tm_cfg_get_size(c, key, val, path, &t->max_payload);
        break;
    case TK_MAX_PRIORITY:
        r = tm_cfg_get_int(c, key, val, path, 0, 255, &x);
        t->max_priority = (int)x;
        t->has_max_priority = true;
        tw->tmk->max_priority_at = tm_cfg_mark_of(key);
        break;
    case TK_PRIORITY:
        r = tm_cfg_get_int(c, key, val, path, 0, 255, &x);
        t->priority = (int)x;
        t->has_priority = true;
        tw->tmk->priority_at = tm_cfg_mark_of(key);
        tw->tmk->priority_val_at = tm_cfg_mark_of(val);
        break;
    case TK_CONFIG:
        r = tm_cfg_get_mapping_json(c, val, path, &t->config_json);
        t->config_at = tm_cfg_mark_of(key);
        if (r == 0 && val->type == YAML_MAPPING_NODE) {
            /* the keys' places (a mapping, checked above, whose keys are
             * scalars, or the JSON conversion had failed) */
            size_t n = (size_t)(val->data.mapping.pairs.top -
                                val->data.mapping.pairs.start);
            for (size_t k = 0; k < t->nconfig_keys; k++)
                tm_free(t->config_keys[k].name);
            tm_free(t->config_keys);
            t->nconfig_keys = 0;
            t->config_keys = tm_calloc(n ? n : 1, sizeof *t->config_keys);
            for (yaml_node_pair_t *p = val->data.mapping.pairs.start;
                 p < val->data.mapping.pairs.top; p++) {
                const yaml_node_t *k = tm_cfg_node_at(c, p->key);
                struct tm_cfg_key *ck = &t->config_keys[t->nconfig_keys++];
                ck->name = tm_strdup(tm_cfg_scalar_raw(k));
                ck->at = tm_cfg_mark_of(k);
            }
        }
        break;
    case TK_CIRCUIT_FAILURES:
        r = tm_cfg_get_int(c, key, val, path, 0, 1000000, &x);
        t->circuit_failures = (unsigned)x;
        break;
    case TK_CIRCUIT_COOL_OFF:
        r = tm_cfg_get_duration(c, key, val, path, 1, &t->circuit_cool_off_ms);
        break;
    case TK_CIRCUIT_MAX_COOL_OFF:
        r = tm_cfg_get_duration(c, key, val, path, 1, &t->circuit_max_cool_off_ms);
        tw->max_cool_off_v = val;
        break;
    case TK_RATE_LIMIT:
        r = get_rate(c, key, val, path, t);
        break;
    case TK_CONCURRENCY:
        r = tm_cfg_get_int(c, key, val, path, 1, 65535, &x);
        t->concurrency = (unsigned)x;
        break;
    case TK_DEDUP_TTL:
        r = tm_cfg_get_duration(c, key, val, path, 0, &t->dedup_ttl_ms);
        tw->tmk->dedup_ttl_at = tm_cfg_mark_of(key);
        break;
    case TK_REPLY_TTL:
        r = tm_cfg_get_duration(c, key, val, path, 1, &t->reply_ttl_ms);
        break;
    }
    return r < 0 ? -1 : 0;
}

/* parse_task fills t from the mapping v (or null) under the name key k. */
static int parse_task(struct ctx *c, struct tm_cfg_task *t,
                      struct task_marks *tmk, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    char where[CFG_PATH_LEN], a[32], b[32];
    tm_cfg_join_path(where, "tasks", t->name);
    struct task_walk tw = { t, tmk, false, NULL, NULL };
    if (tm_cfg_walk_section(c, k, v, where, &tm_cfg_sec_task,
                     cb_task_key, &tw) < 0)
        return -1;
    bool has_max_backoff = tw.has_max_backoff;
    const yaml_node_t *max_backoff_v = tw.max_backoff_v;
    if (t->plugin == NULL) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing required key 'plugin'", where);
        return -1;
    }
    if (has_max_backoff && t->max_backoff_ms < t->backoff_ms) {
        tm_cfg_fail(c, tm_cfg_mark_of(max_backoff_v), "%s.max_backoff: must be at "
                 "least backoff (%s), got %s", where,
                 tm_cfg_fmt_ms(t->backoff_ms, a, sizeof a),
                 tm_cfg_fmt_ms(t->max_backoff_ms, b, sizeof b));
        return -1;
    }
    if (!has_max_backoff && t->max_backoff_ms < t->backoff_ms)
        t->max_backoff_ms = t->backoff_ms;
    if (t->circuit_max_cool_off_ms < t->circuit_cool_off_ms) {
        if (tw.max_cool_off_v != NULL) {
            tm_cfg_fail(c, tm_cfg_mark_of(tw.max_cool_off_v), "%s.circuit_max_cool_off:"
                     " must be at least circuit_cool_off (%s), got %s", where,
                     tm_cfg_fmt_ms(t->circuit_cool_off_ms, a, sizeof a),
                     tm_cfg_fmt_ms(t->circuit_max_cool_off_ms, b, sizeof b));
            return -1;
        }
        t->circuit_max_cool_off_ms = t->circuit_cool_off_ms;
    }
    if (t->queue == NULL)
        t->queue = tm_asprintf("taskmill.%s", t->name);
    if (t->dead_letter == NULL)
        t->dead_letter = tm_asprintf("%s.dlq", t->queue);
    if (strcmp(t->dead_letter, t->queue) == 0) {
        tm_cfg_fail(c, tmk->has_dead_letter ? tmk->dead_letter_at : t->at,
                 "%s.dead_letter: must differ from the queue '%s'", where,
                 t->queue);
        return -1;
    }
    if (t->config_json == NULL)
        t->config_json = tm_strdup("{}");
    return 0;
}

int tm_cfg_parse_tasks(struct ctx *c, const yaml_node_t *k,
                       const yaml_node_t *v)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    c->has_tasks = true;
    if (tm_cfg_want_mapping(c, k, v, "tasks", false) < 0)
        return -1;
    size_t n = (size_t)(v->data.mapping.pairs.top -
                        v->data.mapping.pairs.start);
    if (n == 0) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "tasks: expected at least one task");
        return -1;
    }
    cfg->tasks = tm_calloc(n, sizeof *cfg->tasks);
    c->marks = tm_calloc(n, sizeof *c->marks);
    /* a task with a bad name is left out (and reported); one whose keys
     * are bad is kept with marks.ok unset, for tm_cfg_check_whole to skip */
    for (size_t i = 0; i < n && !(bad && tm_cfg_stop(c)); i++) {
        const yaml_node_pair_t *p = &v->data.mapping.pairs.start[i];
        const yaml_node_t *key = tm_cfg_node_at(c, p->key);
        char shown[CFG_CLIP + 8];
        if (key->type != YAML_SCALAR_NODE) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "tasks: expected a task name, got %s",
                     tm_cfg_node_kind(key));
            bad = 1;
            continue;
        }
        const char *name = tm_cfg_scalar_raw(key);
        if (!tm_cfg_valid_task_name(name) ||
            strlen(name) != key->data.scalar.length) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "tasks: invalid task name '%s'; use "
                     "letters, digits, '_', '.' and '-'",
                     tm_cfg_clip(name, shown, sizeof shown));
            bad = 1;
            continue;
        }
        int dup = 0;
        for (size_t j = 0; j < cfg->ntasks && !dup; j++)
            dup = strcmp(cfg->tasks[j].name, name) == 0;
        if (dup) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "duplicate key '%s' in tasks", name);
            bad = 1;
            continue;
        }
        /* marks[] is indexed like tasks[], not like the mapping's pairs */
        struct task_marks *tmk = &c->marks[cfg->ntasks];
        struct tm_cfg_task *t = &cfg->tasks[cfg->ntasks++];
        t->name = tm_strdup(name);
        t->at = tm_cfg_mark_of(key);
        task_defaults(t);
        if (parse_task(c, t, tmk, key, tm_cfg_node_at(c, p->value)) < 0)
            bad = 1;
        else
            tmk->ok = true;
    }
    return bad ? -1 : 0;
}

const struct tm_cfg_task *tm_cfg_find_task(const struct tm_cfg *cfg,
                                           const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->ntasks; i++) {
        if (strcmp(cfg->tasks[i].name, name) == 0)
            return &cfg->tasks[i];
    }
    return NULL;
}
