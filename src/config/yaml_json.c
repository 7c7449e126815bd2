/* config/yaml_json.c - YAML mappings turned into JSON (a task's config:, a schedule's body:). */
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

/* ---------------------------------------------------------------- JSON */

static int match_int(const char *s, int *base)
{
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'o') && p[2] != '\0') {
        *base = p[1] == 'x' ? 16 : 8;
        for (p += 2; *p; p++) {
            int v = tm_cfg_hexval((unsigned char)*p);
            if (v < 0 || v >= *base)
                return 0;
        }
        return 1;
    }
    *base = 10;
    if (*p == '-' || *p == '+')
        p++;
    if (!tm_cfg_is_digit(*p))
        return 0;
    while (tm_cfg_is_digit(*p))
        p++;
    return *p == '\0';
}

/* match_float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int match_float(const char *s)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    int digits = 0;
    while (tm_cfg_is_digit(*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (tm_cfg_is_digit(*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!tm_cfg_is_digit(*p))
            return 0;
        while (tm_cfg_is_digit(*p))
            p++;
    }
    return *p == '\0';
}

/* plain_to_json resolves a plain scalar the way YAML's core schema does:
 * null, true/false, integers, floats, otherwise a string. Integers are
 * kept as exact text rather than going through a double. */
static cJSON *plain_to_json(const char *raw, const char *v)
{
    char num[48];
    int base;
    if (*raw == '\0' || tm_cfg_is_null_word(v))
        return cJSON_CreateNull();
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 ||
        strcmp(v, "TRUE") == 0)
        return cJSON_CreateTrue();
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 ||
        strcmp(v, "FALSE") == 0)
        return cJSON_CreateFalse();
    if (match_int(v, &base)) {
        if (base == 10) {
            /* JSON integers have no size limit: keep every digit, drop a
             * '+' and leading zeros. */
            const char *p = v;
            int neg = *p == '-';
            if (*p == '-' || *p == '+')
                p++;
            while (p[0] == '0' && p[1] != '\0')
                p++;
            char *text = tm_asprintf("%s%s", neg && *p != '0' ? "-" : "",
                                     p);
            cJSON *j = cJSON_CreateRaw(text);
            tm_free(text);
            return j;
        }
        errno = 0;
        unsigned long long x = strtoull(v + 2, NULL, base);
        if (errno != 0)
            return cJSON_CreateString(v);
        tm_snprintf(num, sizeof num, "%llu", x);
        return cJSON_CreateRaw(num);
    }
    if (match_float(v)) {
        double d = strtod(v, NULL);
        if (isfinite(d))
            return cJSON_CreateNumber(d);
    }
    return cJSON_CreateString(v);
}

static cJSON *yaml_to_json(struct ctx *c, const yaml_node_t *n,
                           const char *path, int depth)
{
    if (depth > CFG_MAX_DEPTH) {
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: nested more than %d levels deep",
                 path, CFG_MAX_DEPTH);
        return NULL;
    }
    if (++c->json_nodes > CFG_MAX_JSON_NODES) {
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: more than %d values (a repeated "
                 "alias?)", path, CFG_MAX_JSON_NODES);
        return NULL;
    }
    char sub[CFG_PATH_LEN];
    cJSON *j = NULL;
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        char *v = tm_cfg_scalar_text(c, n, path);
        if (v == NULL)
            return NULL;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            j = plain_to_json(tm_cfg_scalar_raw(n), v);
        else
            j = cJSON_CreateString(v);
        tm_free(v);
        break;
    }
    case YAML_SEQUENCE_NODE: {
        j = cJSON_CreateArray();
        int i = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             j != NULL && it < n->data.sequence.items.top; it++, i++) {
            tm_snprintf(sub, sizeof sub, "%s[%d]", path, i);
            cJSON *item = yaml_to_json(c, tm_cfg_node_at(c, *it), sub, depth + 1);
            if (item == NULL)
                goto fail;
            cJSON_AddItemToArray(j, item);
        }
        break;
    }
    case YAML_MAPPING_NODE:
        j = cJSON_CreateObject();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
             j != NULL && p < n->data.mapping.pairs.top; p++) {
            const yaml_node_t *k = tm_cfg_node_at(c, p->key);
            if (k->type != YAML_SCALAR_NODE) {
                tm_cfg_fail(c, tm_cfg_mark_of(k), "%s: expected a key name, got %s",
                         path, tm_cfg_node_kind(k));
                goto fail;
            }
            const char *name = tm_cfg_scalar_raw(k);
            if (cJSON_GetObjectItemCaseSensitive(j, name) != NULL) {
                tm_cfg_fail(c, tm_cfg_mark_of(k), "duplicate key '%s' in %s", name,
                         path);
                goto fail;
            }
            tm_snprintf(sub, sizeof sub, "%s.%s", path, name);
            cJSON *item = yaml_to_json(c, tm_cfg_node_at(c, p->value), sub,
                                       depth + 1);
            if (item == NULL)
                goto fail;
            cJSON_AddItemToObject(j, name, item);
        }
        break;
    default:
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: unexpected empty node", path);
        return NULL;
    }
    if (j == NULL)
        tm_cfg_fail(c, tm_cfg_mark_of(n), "%s: out of memory", path);
    return j;

fail:
    cJSON_Delete(j);
    return NULL;
}

/* tm_cfg_get_mapping_json turns the mapping val (or null: nothing changes) into
 * compact JSON text in *out, replacing what was there (a task's config:, a
 * schedule's body:). Returns 0, or -1 with the error reported. */
int tm_cfg_get_mapping_json(struct ctx *c, const yaml_node_t *val,
                            const char *path, char **out)
{
    if (tm_cfg_is_null(val))
        return 0;
    if (val->type != YAML_MAPPING_NODE) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected a mapping, got %s", path,
                 tm_cfg_node_kind(val));
        return -1;
    }
    cJSON *j = yaml_to_json(c, val, path, 0);
    if (j == NULL)
        return -1;
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (text == NULL) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: out of memory", path);
        return -1;
    }
    tm_free(*out);
    *out = tm_strdup(text);
    cJSON_free(text);
    return 0;
}
