/* config/schedules.c - the schedules: section. */
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

/* ------------------------------------------------------------ schedules */

/* in the order of tm_cfg_sec_schedule (keys.c) */
enum schedule_key {
    SK_TASK, SK_CRON, SK_EVERY, SK_TIMEZONE, SK_BODY, SK_CATCH_UP
};

static const struct choice catch_up_choices[] = {
    { "skip", TM_CATCH_UP_SKIP, 1 },
    { "once", TM_CATCH_UP_ONCE, 1 },
};

/* tm_cfg_schedule_clear frees what a schedule owns (the struct itself stays). */
void tm_cfg_schedule_clear(struct tm_cfg_schedule *s)
{
    tm_free(s->name);
    tm_free(s->task);
    tm_free(s->spec_text);
    tm_free(s->timezone);
    tm_tz_free(s->tz);
    tm_free(s->body_json);
    memset(s, 0, sizeof *s);
}

/* cron_mark places a cron error at the offending field: col is its
 * 1-based column in the spec text. That is exact when the value is the
 * file's text on one line (no ${VAR} expanded, no escapes); otherwise
 * the error stays at the value's start. */
static struct tm_mark cron_mark(const yaml_node_t *v, const char *text,
                                int col)
{
    struct tm_mark m = tm_cfg_mark_of(v);
    const char *raw = tm_cfg_scalar_raw(v);
    if (col < 1 || v->start_mark.line != v->end_mark.line ||
        strcmp(text, raw) != 0)
        return m;
    switch (v->data.scalar.style) {
    case YAML_PLAIN_SCALAR_STYLE:
        m.col += col - 1;
        break;
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        if (strpbrk(raw, "'\\\"") == NULL)
            m.col += col; /* past the opening quote */
        break;
    default:
        break;
    }
    return m;
}

/* schedule_walk is what a schedule's keys need besides the schedule. */
struct schedule_walk {
    struct tm_cfg_schedule *s;
    const yaml_node_t *spec_key;  /* cron: or every:, whichever came */
    const yaml_node_t *tz_key;    /* timezone:, if given */
};

static int cb_schedule_key(struct ctx *c, int i, const yaml_node_t *key,
                           const yaml_node_t *val, const char *path,
                           void *arg)
{
    struct schedule_walk *sw = arg;
    struct tm_cfg_schedule *s = sw->s;
    char why[512];
    int e = 0, r = 0;
    switch ((enum schedule_key)i) {
    case SK_TASK:
        r = tm_cfg_get_string(c, key, val, path, &s->task);
        s->task_at = tm_cfg_mark_of(val);
        break;
    case SK_CRON:
    case SK_EVERY: {
        if (sw->spec_key != NULL) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "%s: give either cron or every, not "
                     "both", path);
            return -1;
        }
        sw->spec_key = key;
        if (i == SK_EVERY) {
            r = tm_cfg_get_duration(c, key, val, path, 1, &s->spec.every_ms);
            if (r == 0) {
                s->spec.kind = TM_SCHED_EVERY;
                s->spec_text = tm_cfg_scalar_text(c, val, path);
                r = s->spec_text != NULL ? 0 : -1;
            }
            break;
        }
        char *text = NULL;
        int col = 0;
        r = tm_cfg_get_string(c, key, val, path, &text);
        if (r == 0 &&
            tm_cron_parse(text, &s->spec.cron, why, sizeof why, &col) < 0) {
            tm_cfg_fail(c, cron_mark(val, text, col), "%s: %s", path, why);
            r = -1;
        }
        if (r == 0) {
            s->spec.kind = TM_SCHED_CRON;
            s->spec_text = text;
        } else {
            tm_free(text);
        }
        break;
    }
    case SK_TIMEZONE:
        sw->tz_key = key;
        r = tm_cfg_get_string(c, key, val, path, &s->timezone);
        if (r == 0) {
            s->tz = tm_tz_load(s->timezone, why, sizeof why);
            if (s->tz == NULL) {
                tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: %s", path, why);
                r = -1;
            }
        }
        break;
    case SK_BODY:
        r = tm_cfg_get_mapping_json(c, val, path, &s->body_json);
        break;
    case SK_CATCH_UP:
        r = tm_cfg_get_enum(c, key, val, path, catch_up_choices,
                     NELEM(catch_up_choices), &e);
        s->catch_up = (enum tm_catch_up)e;
        break;
    }
    return r < 0 ? -1 : 0;
}

/* parse_schedule fills s from the mapping v under the name key k: the
 * keys each alone, then how they go together. */
static int parse_schedule(struct ctx *c, struct tm_cfg_schedule *s,
                          const yaml_node_t *k, const yaml_node_t *v)
{
    char where[CFG_PATH_LEN], why[512];
    tm_cfg_join_path(where, "schedules", s->name);
    struct schedule_walk sw = { s, NULL, NULL };
    if (tm_cfg_is_null(v)) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing value; expected a mapping "
                 "with task and cron or every", where);
        return -1;
    }
    if (tm_cfg_walk_section(c, k, v, where, &tm_cfg_sec_schedule,
                     cb_schedule_key, &sw) < 0)
        return -1;
    if (s->task == NULL) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing required key 'task'", where);
        return -1;
    }
    if (sw.spec_key == NULL) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing 'cron' or 'every' (one of "
                 "them is required)", where);
        return -1;
    }
    if (s->spec.kind == TM_SCHED_EVERY && sw.tz_key != NULL) {
        tm_cfg_fail(c, tm_cfg_mark_of(sw.tz_key), "%s.timezone: applies to cron "
                 "only; every slots are aligned to the Unix epoch (UTC)",
                 where);
        return -1;
    }
    if (s->spec.kind == TM_SCHED_CRON && s->tz == NULL) {
        s->timezone = tm_strdup("UTC");
        s->tz = tm_tz_load(s->timezone, why, sizeof why);
        assert(s->tz != NULL); /* UTC is built in */
    }
    s->spec.tz = s->tz;
    if (s->body_json == NULL)
        s->body_json = tm_strdup("{}");
    return 0;
}

int tm_cfg_parse_schedules(struct ctx *c, const yaml_node_t *k,
                           const yaml_node_t *v)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    int rc = tm_cfg_want_mapping(c, k, v, "schedules", true);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    size_t n = (size_t)(v->data.mapping.pairs.top -
                        v->data.mapping.pairs.start);
    cfg->schedules = tm_calloc(n ? n : 1, sizeof *cfg->schedules);
    /* only schedules that parsed are kept: tm_cfg_check_whole sees good ones */
    for (size_t i = 0; i < n && !(bad && tm_cfg_stop(c)); i++) {
        const yaml_node_pair_t *p = &v->data.mapping.pairs.start[i];
        const yaml_node_t *key = tm_cfg_node_at(c, p->key);
        char shown[CFG_CLIP + 8];
        if (key->type != YAML_SCALAR_NODE) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "schedules: expected a schedule "
                     "name, got %s", tm_cfg_node_kind(key));
            bad = 1;
            continue;
        }
        const char *name = tm_cfg_scalar_raw(key);
        if (!tm_cfg_valid_task_name(name) ||
            strlen(name) != key->data.scalar.length) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "schedules: invalid schedule name "
                     "'%s'; use letters, digits, '_', '.' and '-'",
                     tm_cfg_clip(name, shown, sizeof shown));
            bad = 1;
            continue;
        }
        if (tm_cfg_find_schedule(cfg, name) != NULL) {
            tm_cfg_fail(c, tm_cfg_mark_of(key), "duplicate key '%s' in schedules",
                     name);
            bad = 1;
            continue;
        }
        struct tm_cfg_schedule *s = &cfg->schedules[cfg->nschedules];
        s->name = tm_strdup(name);
        s->at = tm_cfg_mark_of(key);
        s->catch_up = TM_CATCH_UP_SKIP;
        if (parse_schedule(c, s, key, tm_cfg_node_at(c, p->value)) < 0) {
            tm_cfg_schedule_clear(s);
            bad = 1;
            continue;
        }
        cfg->nschedules++;
    }
    return bad ? -1 : 0;
}

/* tm_cfg_check_schedules checks what needs the tasks: each schedule's
 * task. (That a schedule's key shares its task's Redis Cluster slot is
 * the Redis adapter's check.) */
int tm_cfg_check_schedules(struct ctx *c)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    for (size_t i = 0; i < cfg->nschedules && !(bad && tm_cfg_stop(c)); i++) {
        const struct tm_cfg_schedule *s = &cfg->schedules[i];
        char shown[CFG_CLIP + 8];
        const struct tm_cfg_task *t = tm_cfg_find_task(cfg, s->task);
        if (t != NULL)
            continue;
        struct sbuf list = {0};
        for (size_t j = 0; j < cfg->ntasks; j++) {
            if (j > 0)
                tm_cfg_sb_adds(&list, ", ");
            tm_cfg_sb_adds(&list, cfg->tasks[j].name);
        }
        tm_cfg_fail(c, s->task_at, "schedules.%s.task: unknown task '%s'; "
                 "expected a task of this file: %s", s->name,
                 tm_cfg_clip(s->task, shown, sizeof shown),
                 list.p != NULL ? list.p : "(none)");
        tm_free(list.p);
        bad = 1;
    }
    return bad ? -1 : 0;
}

const struct tm_cfg_schedule *tm_cfg_find_schedule(const struct tm_cfg *cfg,
                                                   const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->nschedules; i++) {
        if (strcmp(cfg->schedules[i].name, name) == 0)
            return &cfg->schedules[i];
    }
    return NULL;
}
