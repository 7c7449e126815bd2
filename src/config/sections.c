/* config/sections.c - the pool:, http: and log: sections. */
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

/* --------------------------------------------------------------- top */

static const struct choice pool_choices[] = {
    { "thread", TM_POOL_THREAD, 1 },
    { "fork", TM_POOL_FORK, 1 },
};

static const struct choice level_choices[] = {
    { "error", TM_LOG_ERR, 1 },
    { "warning", TM_LOG_WARNING, 1 },
    { "info", TM_LOG_INFO, 1 },
    { "debug", TM_LOG_DEBUG, 1 },
    { "err", TM_LOG_ERR, 0 },
    { "warn", TM_LOG_WARNING, 0 },
};

static const struct choice format_choices[] = {
    { "text", TM_LOG_TEXT, 1 },
    { "json", TM_LOG_JSON, 1 },
};

static int cb_pool_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    int64_t x = 0;
    int e = 0;
    (void)arg;
    if (i == 0) {
        if (tm_cfg_get_enum(c, key, val, path, pool_choices, NELEM(pool_choices),
                     &e) < 0)
            return -1;
        cfg->pool_kind = (enum tm_pool_kind)e;
    } else if (i == 1) {
        if (tm_cfg_get_int(c, key, val, path, 1, 1024, &x) < 0)
            return -1;
        cfg->pool_size = (unsigned)x;
    } else {
        if (tm_cfg_get_int(c, key, val, path, 0, UINT_MAX, &x) < 0)
            return -1;
        cfg->max_tasks_per_child = (unsigned)x;
    }
    return 0;
}

int tm_cfg_parse_pool(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    return tm_cfg_walk_section(c, k, v, "pool", &tm_cfg_sec_pool, cb_pool_key,
                        NULL);
}

/* valid_listen accepts "host:port" and "[v6]:port", port 0..65535. */
static int valid_listen(const char *s)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close == s + 1 || close[1] != ':')
            return 0;
        for (const char *p = s + 1; p < close; p++) {
            if (!tm_cfg_is_ip6_char((unsigned char)*p))
                return 0;
        }
        colon = close + 1;
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || colon == s || strchr(colon + 1, ':') != NULL)
            return 0;
        for (const char *p = s; p < colon; p++) {
            if (!tm_cfg_is_host_char((unsigned char)*p))
                return 0;
        }
    }
    const char *port = colon + 1;
    size_t n = strlen(port);
    int v = 0;
    if (n == 0 || n > 5)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!tm_cfg_is_digit(port[i]))
            return 0;
        v = v * 10 + (port[i] - '0');
    }
    return v <= 65535;
}

/* Names in http.allowed_hosts at most. */
#define CFG_MAX_ALLOWED_HOSTS 64

/* valid_host_name accepts a DNS name as a Host header carries it: labels
 * of 1 to 63 letters, digits and '-' (not first or last), joined by
 * dots, 253 bytes at most, no port. */
static int valid_host_name(const char *s)
{
    size_t n = strlen(s), label = 0;
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i <= n; i++) {
        char ch = s[i];
        if (ch == '.' || ch == '\0') {
            if (label == 0 || s[i - 1] == '-')
                return 0;
            label = 0;
            continue;
        }
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || (ch == '-' && label > 0);
        if (!ok || ++label > 63)
            return 0;
    }
    return 1;
}

/* parse_allowed_hosts reads http.allowed_hosts: a list of host names,
 * kept in lower case (Host is compared without regard to case). */
static int parse_allowed_hosts(struct ctx *c, const yaml_node_t *val,
                               const char *path)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8], ipath[CFG_PATH_LEN];
    if (tm_cfg_is_null(val))
        return 0;
    if (val->type != YAML_SEQUENCE_NODE) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected a list of host "
                    "names, like [taskmill.example.com], got a %s", path,
                    tm_cfg_node_kind(val));
        return -1;
    }
    size_t count = (size_t)(val->data.sequence.items.top -
                            val->data.sequence.items.start);
    if (count > CFG_MAX_ALLOWED_HOSTS) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: %zu names; at most %d",
                    path, count, CFG_MAX_ALLOWED_HOSTS);
        return -1;
    }
    for (size_t i = 0; i < cfg->http_nallowed_hosts; i++)
        tm_free(cfg->http_allowed_hosts[i]);
    tm_free(cfg->http_allowed_hosts);
    cfg->http_allowed_hosts = tm_calloc(count ? count : 1, sizeof(char *));
    cfg->http_nallowed_hosts = 0;
    int rc = 0;
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top; it++) {
        const yaml_node_t *item = tm_cfg_node_at(c, *it);
        tm_snprintf(ipath, sizeof ipath, "%s[%zu]", path,
                    (size_t)(it - val->data.sequence.items.start));
        char *s = NULL;
        if (tm_cfg_get_string(c, item, item, ipath, &s) < 0) {
            rc = -1;
            continue;
        }
        if (!valid_host_name(s)) {
            tm_cfg_fail(c, tm_cfg_mark_of(item), "%s: '%s' is not a host "
                        "name (letters, digits, '-' and dots, no port or "
                        "scheme)", ipath, tm_cfg_clip(s, shown, sizeof shown));
            tm_free(s);
            rc = -1;
            continue;
        }
        for (char *p = s; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        cfg->http_allowed_hosts[cfg->http_nallowed_hosts++] = s;
    }
    return rc;
}

static int cb_http_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8];
    (void)arg;
    if (i == 2)
        return parse_allowed_hosts(c, val, path);
    /* A null or empty value (e.g. ${TOKEN:-}) means "not set". */
    char *s = NULL;
    if (tm_cfg_get_optional(c, key, val, path, &s) < 0)
        return -1;
    if (s == NULL)
        return 0;
    if (i == 0 && !valid_listen(s)) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected host:port like "
                 "127.0.0.1:9999, got '%s'", path,
                 tm_cfg_clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    char **dst = i == 0 ? &cfg->http_listen : &cfg->http_token;
    tm_free(*dst);
    *dst = s;
    return 0;
}

int tm_cfg_parse_http(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    return tm_cfg_walk_section(c, k, v, "http", &tm_cfg_sec_http, cb_http_key,
                        NULL);
}

static int cb_log_key(struct ctx *c, int i, const yaml_node_t *key,
                      const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    int e = 0;
    (void)arg;
    if (i == 0) {
        if (tm_cfg_get_enum(c, key, val, path, level_choices, NELEM(level_choices),
                     &e) < 0)
            return -1;
        cfg->log_level = e;
    } else {
        if (tm_cfg_get_enum(c, key, val, path, format_choices,
                     NELEM(format_choices), &e) < 0)
            return -1;
        cfg->log_format = (enum tm_log_format)e;
    }
    return 0;
}

int tm_cfg_parse_log(struct ctx *c, const yaml_node_t *k,
                     const yaml_node_t *v)
{
    return tm_cfg_walk_section(c, k, v, "log", &tm_cfg_sec_log, cb_log_key,
                        NULL);
}
