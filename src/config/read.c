/* config/read.c - reading YAML nodes: error lines, scalars, typed values, sections. */
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

void tm_cfg_errors_init(struct tm_cfg_errors *e, const char *path,
                        size_t max_errors, char *err, size_t errlen)
{
    *e = (struct tm_cfg_errors){ .path = path, .err = err, .errlen = errlen,
                                 .max_errors = max_errors > 0 ? max_errors
                                                              : 1 };
    if (err != NULL && errlen > 0)
        err[0] = '\0';
}

/* verror records one line "FILE:LINE:COL: message" (see struct
 * tm_cfg_errors) after the earlier ones. */
static void verror(struct tm_cfg_errors *e, struct tm_mark at,
                   const char *fmt, va_list ap)
{
    e->failed = true;
    if (e->nerrors >= e->max_errors)
        return;
    e->nerrors++;
    if (e->err == NULL || e->errlen == 0)
        return;
    assert(e->errused < e->errlen && e->err[e->errused] == '\0');
    char *line = e->err + e->errused;
    size_t room = e->errlen - e->errused;
    size_t n = 0;
    if (e->nerrors > 1 && room > 1) {
        line[n++] = '\n';
        line[n] = '\0';
    }
    const size_t sep = n; /* the separator is the one control kept */
    if (at.line > 0)
        n += tm_snprintf(line + n, room - n, "%s:%d:%d: ", e->path,
                         at.line, at.col);
    else
        n += tm_snprintf(line + n, room - n, "%s: ", e->path);
    if (n + 1 < room)
        vsnprintf(line + n, room - n, fmt, ap);
    for (char *p = line + sep; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
    e->errused += strlen(line);
}

void tm_cfg_error(struct tm_cfg_errors *e, struct tm_mark at,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(e, at, fmt, ap);
    va_end(ap);
}

bool tm_cfg_errors_full(const struct tm_cfg_errors *e)
{
    return e->nerrors >= e->max_errors;
}

/* tm_cfg_fail reports an error of the file being read (tm_cfg_error). */
void tm_cfg_fail(struct ctx *c, struct tm_mark at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(&c->errs, at, fmt, ap);
    va_end(ap);
}

/* tm_cfg_stop tells that no further error would be recorded: parsing ends. */
bool tm_cfg_stop(const struct ctx *c)
{
    return tm_cfg_errors_full(&c->errs);
}

struct tm_mark tm_cfg_mark_of(const yaml_node_t *n)
{
    struct tm_mark m = { (int)n->start_mark.line + 1,
                         (int)n->start_mark.column + 1 };
    return m;
}

yaml_node_t *tm_cfg_node_at(struct ctx *c, int id)
{
    return yaml_document_get_node(c->doc, id);
}

const char *tm_cfg_node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

const char *tm_cfg_scalar_raw(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

int tm_cfg_is_null_word(const char *s)
{
    return strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* tm_cfg_is_null tells a YAML null: an empty plain value, "~" or "null". */
int tm_cfg_is_null(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE &&
           n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (n->data.scalar.length == 0 || tm_cfg_is_null_word(tm_cfg_scalar_raw(n)));
}

/* tm_cfg_scalar_text returns the scalar's value with ${VAR} expanded (the caller
 * frees), or NULL after reporting an error at the value. */
char *tm_cfg_scalar_text(struct ctx *c, const yaml_node_t *n,
                         const char *path)
{
    char why[256];
    if (strlen(tm_cfg_scalar_raw(n)) != n->data.scalar.length) {
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: contains a NUL character", path);
        return NULL;
    }
    char *s = tm_expand_env(tm_cfg_scalar_raw(n), why, sizeof why);
    if (s == NULL)
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: %s", path, why);
    return s;
}

/* tm_cfg_get_scalar reports a missing value at the key and a non-scalar at the
 * value; else returns the expanded text (the caller frees). */
char *tm_cfg_get_scalar(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path)
{
    if (tm_cfg_is_null(v)) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing value", path);
        return NULL;
    }
    if (v->type != YAML_SCALAR_NODE) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected a scalar value, got %s",
                 path, tm_cfg_node_kind(v));
        return NULL;
    }
    return tm_cfg_scalar_text(c, v, path);
}

int tm_cfg_get_optional(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path, char **out)
{
    *out = NULL;
    if (tm_cfg_is_null(v))
        return 0;
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    if (*s == '\0')
        tm_free(s);
    else
        *out = s;
    return 0;
}

int tm_cfg_get_string(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v, const char *path, char **out)
{
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    if (*s == '\0') {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: must not be empty", path);
        tm_free(s);
        return -1;
    }
    tm_free(*out);
    *out = s;
    return 0;
}

int tm_cfg_get_int(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                   const char *path, int64_t min, int64_t max, int64_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    int64_t x;
    if (tm_cfg_parse_i64(s, &x) < 0 || x < min || x > max) {
        if (max >= INT_MAX)
            tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected an integer >= %" PRId64
                     ", got '%s'", path, min, tm_cfg_clip(s, shown, sizeof shown));
        else
            tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected an integer from %" PRId64
                     " to %" PRId64 ", got '%s'", path, min, max,
                     tm_cfg_clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    tm_free(s);
    *out = x;
    return 0;
}

/* tm_cfg_get_duration reads a duration of at least min_ms milliseconds. */
int tm_cfg_get_duration(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        int64_t min_ms, int64_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    int64_t ms;
    size_t digits = strspn(s, "0123456789.");
    if (tm_parse_duration(s, &ms) < 0 && digits > 0 &&
        (strcmp(s + digits, "ms") == 0 || strcmp(s + digits, "s") == 0 ||
         strcmp(s + digits, "m") == 0 || strcmp(s + digits, "h") == 0) &&
        strchr(s, '.') == strrchr(s, '.') && s[0] != '.' &&
        s[digits - 1] != '.') {
        ms = CFG_MAX_DURATION_MS + 1; /* well-formed, but overflows */
    } else if (tm_parse_duration(s, &ms) < 0) {
        if (strspn(s, "-0123456789.") == strlen(s))
            tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected " DURATION_HINT
                     ", got '%s' (a bare number is ambiguous: add a unit)",
                     path, tm_cfg_clip(s, shown, sizeof shown));
        else
            tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected " DURATION_HINT
                     ", got '%s'", path, tm_cfg_clip(s, shown, sizeof shown));
        goto fail;
    }
    if (ms > CFG_MAX_DURATION_MS) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: duration '%s' is too long", path,
                 tm_cfg_clip(s, shown, sizeof shown));
        goto fail;
    }
    if (ms < min_ms) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: must be greater than 0, got '%s'",
                 path, tm_cfg_clip(s, shown, sizeof shown));
        goto fail;
    }
    tm_free(s);
    *out = ms;
    return 0;
fail:
    tm_free(s);
    return -1;
}

int tm_cfg_get_size(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, size_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    size_t n;
    if (tm_parse_size(s, &n) < 0) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected " SIZE_HINT ", got '%s'",
                 path, tm_cfg_clip(s, shown, sizeof shown));
        goto fail;
    }
    if (n < 1 || n > CFG_MAX_PAYLOAD) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected a size from 1B to 512MiB, "
                 "got '%s'", path, tm_cfg_clip(s, shown, sizeof shown));
        goto fail;
    }
    tm_free(s);
    *out = n;
    return 0;
fail:
    tm_free(s);
    return -1;
}

int tm_cfg_get_bool(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on" };
    static const char *const no[] = { "false", "no", "off" };
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < NELEM(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out = strcasecmp(s, yes[i]) == 0;
            tm_free(s);
            return 0;
        }
    }
    tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected true or false, got '%s'", path,
             tm_cfg_clip(s, shown, sizeof shown));
    tm_free(s);
    return -1;
}

int tm_cfg_get_enum(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, const struct choice *ch, size_t n,
                    int *out)
{
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, ch[i].name) == 0) {
            *out = ch[i].value;
            tm_free(s);
            return 0;
        }
    }
    struct sbuf list = {0};
    for (size_t i = 0; i < n; i++) {
        if (!ch[i].shown)
            continue;
        if (list.len > 0)
            tm_cfg_sb_adds(&list, ", ");
        tm_cfg_sb_adds(&list, ch[i].name);
    }
    tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: unknown value '%s'; expected one of: %s",
             path, tm_cfg_clip(s, shown, sizeof shown), list.p);
    tm_free(list.p);
    tm_free(s);
    return -1;
}

/* tm_cfg_want_mapping checks that v is a mapping; a null is "absent" (returns 1)
 * when allow_null, else an error. Returns 0 for a mapping, -1 on error. */
int tm_cfg_want_mapping(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        bool allow_null)
{
    if (tm_cfg_is_null(v)) {
        if (allow_null)
            return 1;
        tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: missing value", path);
        return -1;
    }
    if (v->type != YAML_MAPPING_NODE) {
        tm_cfg_fail(c, tm_cfg_mark_of(v), "%s: expected a mapping, got %s", path,
                 tm_cfg_node_kind(v));
        return -1;
    }
    return 0;
}

/*
 * tm_cfg_key_index checks one key of a fixed-key mapping: a scalar, one of
 * sec's keys, not seen before in this mapping (seen is a bit set). where is
 * the mapping's path, NULL at the top level. Returns the key's index, or
 * -1 after reporting an error at the key.
 */
int tm_cfg_key_index(struct ctx *c, const yaml_node_t *k, const char *where,
                     const struct tm_cfg_section *sec, uint32_t *seen)
{
    const struct tm_cfg_keydef *keys = sec->keys;
    size_t n = sec->nkeys;
    char shown[CFG_CLIP + 8];
    const char *in = where ? " in " : "";
    const char *wh = where ? where : "";
    if (k->type != YAML_SCALAR_NODE) {
        tm_cfg_fail(c, tm_cfg_mark_of(k), "expected a key name%s%s, got %s", in, wh,
                 tm_cfg_node_kind(k));
        return -1;
    }
    const char *name = tm_cfg_scalar_raw(k);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(name, keys[i].name) != 0)
            continue;
        if (*seen & (UINT32_C(1) << i)) {
            tm_cfg_fail(c, tm_cfg_mark_of(k), "duplicate key '%s'%s%s", name, in, wh);
            return -1;
        }
        *seen |= UINT32_C(1) << i;
        return (int)i;
    }
    struct sbuf list = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            tm_cfg_sb_adds(&list, ", ");
        tm_cfg_sb_adds(&list, keys[i].name);
    }
    tm_cfg_fail(c, tm_cfg_mark_of(k), "unknown key '%s'%s%s; expected one of: %s",
             tm_cfg_clip(name, shown, sizeof shown), in, wh, list.p);
    tm_free(list.p);
    return -1;
}

/*
 * tm_cfg_walk_section checks that v, under key k, is a mapping (or null) whose
 * keys are among sec's keys, each once, and calls fn for each key in file
 * order, going on after a bad key until tm_cfg_stop(). Returns 0, or -1
 * after one or more errors were reported.
 */
int tm_cfg_walk_section(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *where,
                        const struct tm_cfg_section *sec, section_fn fn,
                        void *arg)
{
    char path[CFG_PATH_LEN];
    /* a section of the table only: a reload compares its keys */
    assert(tm_cfg_section_known(sec));
    int rc = tm_cfg_want_mapping(c, k, v, where, true);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    uint32_t seen = 0;
    int bad = 0;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
         p < v->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = tm_cfg_node_at(c, p->key);
        const yaml_node_t *val = tm_cfg_node_at(c, p->value);
        int i = tm_cfg_key_index(c, key, where, sec, &seen);
        if (i >= 0) {
            tm_cfg_join_path(path, where, sec->keys[i].name);
            if (fn(c, i, key, val, path, arg) == 0)
                continue;
        }
        /* an error was reported: go on with the next key */
        bad = 1;
        if (tm_cfg_stop(c))
            break;
    }
    return bad ? -1 : 0;
}
