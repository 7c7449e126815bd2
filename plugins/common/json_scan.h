/* json_scan.h - the small JSON scanner the example plugins share. */
#ifndef TASKMILL_PLUGINS_JSON_SCAN_H
#define TASKMILL_PLUGINS_JSON_SCAN_H

/*
 * Included by the example plugins' sources only (never installed): the
 * daemon's plugin ABI is taskmill.h alone, so each plugin carries these
 * few functions as file-local copies. A plugin uses those it needs.
 */

#include <stdint.h>
#include <string.h>

#define TM_JSON_SCAN_FN static __attribute__((unused))

/*
 * A plugin builds against taskmill.h alone, so this file carries a tiny
 * JSON scanner of its own instead of linking a JSON library. It only finds
 * a top-level key of an object and reads an integer value; the daemon has
 * already checked that the body is a valid JSON object.
 */

/* JSON_MAX_DEPTH bounds nesting while skipping values, so a hostile body
 * cannot exhaust the stack. */
#define JSON_MAX_DEPTH 64

TM_JSON_SCAN_FN const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* json_skip_string skips the string starting at the '"' at p. Returns the
 * character after the closing quote, or NULL when malformed. */
TM_JSON_SCAN_FN const char *json_skip_string(const char *p)
{
    p++;
    while (*p != '"') {
        if (*p == '\0' || (unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == '\0')
                return NULL;
        }
        p++;
    }
    return p + 1;
}

/* json_skip_value skips one value at p (after whitespace). Returns the
 * character after it, or NULL when malformed. */
TM_JSON_SCAN_FN const char *json_skip_value(const char *p, int depth)
{
    p = json_ws(p);
    if (*p == '"')
        return json_skip_string(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH)
            return NULL;
        p = json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"')
                    return NULL;
                p = json_skip_string(p);
                if (p == NULL)
                    return NULL;
                p = json_ws(p);
                if (*p != ':')
                    return NULL;
                p++;
            }
            p = json_skip_value(p, depth + 1);
            if (p == NULL)
                return NULL;
            p = json_ws(p);
            if (*p == ',') {
                p = json_ws(p + 1);
                continue;
            }
            if (*p == close)
                return p + 1;
            return NULL;
        }
    }
    /* A number or a literal: the daemon validated it, skip its bytes. */
    const char *start = p;
    while (*p != '\0' && strchr("+-.0123456789eEtrufalsn", *p) != NULL)
        p++;
    return p > start ? p : NULL;
}

/*
 * json_find looks for key among the top-level members of the object text
 * obj. Returns 1 with *val at the value, 0 when the key is absent, -1 when
 * obj is not an object or names the key twice. Keys are compared as
 * written, so an escaped spelling of the key does not match.
 */
TM_JSON_SCAN_FN int json_find(const char *obj, const char *key, const char **val)
{
    size_t klen = strlen(key);
    int found = 0;
    const char *p = json_ws(obj);

    if (*p != '{')
        return -1;
    p = json_ws(p + 1);
    if (*p == '}')
        return 0;
    for (;;) {
        if (*p != '"')
            return -1;
        const char *k = p + 1;
        p = json_skip_string(p);
        if (p == NULL)
            return -1;
        int match = (size_t)(p - 1 - k) == klen &&
                    memcmp(k, key, klen) == 0;
        p = json_ws(p);
        if (*p != ':')
            return -1;
        p = json_ws(p + 1);
        if (match) {
            if (found)
                return -1;
            found = 1;
            *val = p;
        }
        p = json_skip_value(p, 1);
        if (p == NULL)
            return -1;
        p = json_ws(p);
        if (*p == '}')
            return found;
        if (*p != ',')
            return -1;
        p = json_ws(p + 1);
    }
}

/*
 * json_int reads the JSON integer at p: an optional '-', then 0 or digits
 * without a leading zero, with no fraction or exponent. Returns 0 with
 * *out set, -1 when the value is not an integer, -2 when it does not fit
 * in 64 bits.
 */
TM_JSON_SCAN_FN int json_int(const char *p, int64_t *out)
{
    int neg = 0;
    uint64_t limit = (uint64_t)INT64_MAX;
    uint64_t v = 0;

    if (*p == '-') {
        neg = 1;
        limit = (uint64_t)INT64_MAX + 1u;
        p++;
    }
    if (*p < '0' || *p > '9')
        return -1;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9')
        return -1;
    int range = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (limit - d) / 10)
            range = 1;
        else
            v = v * 10 + d;
    }
    if (*p == '.' || *p == 'e' || *p == 'E')
        return -1;
    p = json_ws(p);
    if (*p != ',' && *p != '}' && *p != ']' && *p != '\0')
        return -1;
    if (range)
        return -2;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

#endif /* TASKMILL_PLUGINS_JSON_SCAN_H */
