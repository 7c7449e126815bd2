/* config/telemetry.c - the telemetry: section, where traces are exported
 * (docs/observability.md). Every key is restart-only: the exporter is made
 * once, at start. */
#include "config/config_private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Headers in telemetry.headers at most. */
#define CFG_MAX_OTEL_HEADERS 32

/* valid_endpoint accepts an http:// or https:// URL with a host, no
 * query, fragment, space or control character. */
static int valid_endpoint(const char *s)
{
    const char *rest;
    if (strncmp(s, "http://", 7) == 0)
        rest = s + 7;
    else if (strncmp(s, "https://", 8) == 0)
        rest = s + 8;
    else
        return 0;
    if (*rest == '\0' || *rest == '/')
        return 0;
    for (const char *p = rest; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= ' ' || ch == 0x7f || ch == '?' || ch == '#')
            return 0;
    }
    return 1;
}

/* valid_header_name accepts an HTTP field name: 1 to 128 token
 * characters (RFC 9110 tchar). */
static int valid_header_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || strchr("!#$%&'*+-.^_`|~", ch)))
            return 0;
    }
    return 1;
}

/* valid_header_value accepts visible characters, spaces and tabs. */
static int valid_header_value(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < ' ' && *p != '\t') || *p == 0x7f)
            return 0;
    return strlen(s) <= 4096;
}

/* clear_headers frees telemetry.headers (a key given twice replaces) */
static void clear_headers(struct tm_cfg *cfg)
{
    for (size_t i = 0; i < cfg->otel_nheaders; i++) {
        tm_free(cfg->otel_headers[i].name);
        tm_free(cfg->otel_headers[i].value);
    }
    tm_free(cfg->otel_headers);
    cfg->otel_headers = NULL;
    cfg->otel_nheaders = 0;
}

void tm_cfg_clear_telemetry(struct tm_cfg *cfg)
{
    tm_free(cfg->otel_endpoint);
    cfg->otel_endpoint = NULL;
    clear_headers(cfg);
    tm_free(cfg->otel_service_name);
    cfg->otel_service_name = NULL;
}

/* parse_headers reads telemetry.headers: a mapping of header names to
 * string values, sent with every export. */
static int parse_headers(struct ctx *c, const yaml_node_t *key,
                         const yaml_node_t *val, const char *path)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8], ipath[CFG_PATH_LEN];
    int rc = tm_cfg_want_mapping(c, key, val, path, true);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    size_t count = (size_t)(val->data.mapping.pairs.top -
                            val->data.mapping.pairs.start);
    if (count > CFG_MAX_OTEL_HEADERS) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: %zu headers; at most %d",
                    path, count, CFG_MAX_OTEL_HEADERS);
        return -1;
    }
    clear_headers(cfg);
    cfg->otel_headers = tm_calloc(count ? count : 1,
                                  sizeof *cfg->otel_headers);
    rc = 0;
    for (yaml_node_pair_t *p = val->data.mapping.pairs.start;
         p < val->data.mapping.pairs.top; p++) {
        const yaml_node_t *hk = tm_cfg_node_at(c, p->key);
        const yaml_node_t *hv = tm_cfg_node_at(c, p->value);
        char *name = tm_cfg_get_scalar(c, hk, hk, path);
        if (name == NULL) {
            rc = -1;
            continue;
        }
        if (!valid_header_name(name)) {
            tm_cfg_fail(c, tm_cfg_mark_of(hk), "%s: '%s' is not a header "
                        "name (letters, digits and !#$%%&'*+-.^_`|~)", path,
                        tm_cfg_clip(name, shown, sizeof shown));
            tm_free(name);
            rc = -1;
            continue;
        }
        tm_cfg_join_path(ipath, path, name);
        char *value = NULL;
        if (tm_cfg_get_string(c, hk, hv, ipath, &value) < 0) {
            tm_free(name);
            rc = -1;
            continue;
        }
        if (!valid_header_value(value)) {
            tm_cfg_fail(c, tm_cfg_mark_of(hv), "%s: a control character "
                        "or more than 4096 bytes; a header value is one "
                        "line", ipath);
            tm_free(name);
            tm_free(value);
            rc = -1;
            continue;
        }
        cfg->otel_headers[cfg->otel_nheaders].name = name;
        cfg->otel_headers[cfg->otel_nheaders].value = value;
        cfg->otel_nheaders++;
    }
    return rc;
}

/* parse_ratio reads telemetry.sample_ratio: a number from 0 to 1. */
static int parse_ratio(struct ctx *c, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path)
{
    char shown[CFG_CLIP + 8];
    char *s = tm_cfg_get_scalar(c, key, val, path);
    if (s == NULL)
        return -1;
    char *end = NULL;
    double d = *s != '\0' ? strtod(s, &end) : NAN;
    if (end == NULL || *end != '\0' || !isfinite(d) || d < 0 || d > 1) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected a number from 0 "
                    "to 1 (the share of new traces recorded), got '%s'", path,
                    tm_cfg_clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    c->cfg->otel_sample_ratio = d;
    tm_free(s);
    return 0;
}

/* in the order of tm_cfg_sec_telemetry (keys.c) */
enum telemetry_key { T_OTLP_ENDPOINT, T_HEADERS, T_SERVICE_NAME,
                     T_SAMPLE_RATIO };

static int cb_telemetry_key(struct ctx *c, int i, const yaml_node_t *key,
                            const yaml_node_t *val, const char *path,
                            void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8];
    (void)arg;
    switch ((enum telemetry_key)i) {
    case T_HEADERS:
        return parse_headers(c, key, val, path);
    case T_SAMPLE_RATIO:
        return parse_ratio(c, key, val, path);
    case T_OTLP_ENDPOINT:
    case T_SERVICE_NAME:
        break;
    }
    /* A null or empty value (e.g. ${OTLP_ENDPOINT:-}) means "not set". */
    char *s = NULL;
    if (tm_cfg_get_optional(c, key, val, path, &s) < 0)
        return -1;
    if (s == NULL)
        return 0;
    if (i == T_OTLP_ENDPOINT) {
        if (!valid_endpoint(s)) {
            tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected an http:// "
                        "or https:// URL like http://127.0.0.1:4318 (traces "
                        "go to its /v1/traces), got '%s'", path,
                        tm_cfg_clip(s, shown, sizeof shown));
            tm_free(s);
            return -1;
        }
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/')
            s[--n] = '\0';
        tm_free(cfg->otel_endpoint);
        cfg->otel_endpoint = s;
        return 0;
    }
    if (strlen(s) > 255 || !valid_header_value(s)) {
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: one line of at most 255 "
                    "bytes, got '%s'", path,
                    tm_cfg_clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    tm_free(cfg->otel_service_name);
    cfg->otel_service_name = s;
    return 0;
}

int tm_cfg_parse_telemetry(struct ctx *c, const yaml_node_t *k,
                           const yaml_node_t *v)
{
    return tm_cfg_walk_section(c, k, v, "telemetry", &tm_cfg_sec_telemetry,
                               cb_telemetry_key, NULL);
}
