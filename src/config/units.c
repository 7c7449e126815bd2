/* config/units.c - durations and sizes as the config writes them (250ms, 64KiB). */
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

/* -------------------------------------------------------- durations */

int tm_parse_duration(const char *s, int64_t *ms)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    const char *p = s;
    uint64_t whole = 0;
    int ndigits = 0;
    for (; tm_cfg_is_digit(*p); p++, ndigits++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return -1;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (ndigits == 0)
        return -1;
    /* A fraction keeps 9 digits at most; a finer one is truncated. */
    uint64_t frac = 0, scale = 1;
    if (*p == '.') {
        p++;
        int nfrac = 0;
        for (; tm_cfg_is_digit(*p); p++, nfrac++) {
            if (scale < 1000000000u) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
        if (nfrac == 0)
            return -1;
    }
    uint64_t unit;
    if (strcmp(p, "ms") == 0)
        unit = 1;
    else if (strcmp(p, "s") == 0)
        unit = 1000;
    else if (strcmp(p, "m") == 0)
        unit = 60000;
    else if (strcmp(p, "h") == 0)
        unit = 3600000;
    else
        return -1;
    if (whole > (uint64_t)INT64_MAX / unit)
        return -1;
    uint64_t v = whole * unit + frac * unit / scale;
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *ms = (int64_t)v;
    return 0;
}

int tm_parse_size(const char *s, size_t *bytes)
{
    if (s == NULL || !tm_cfg_is_digit(*s))
        return -1;
    const char *p = s;
    size_t n = 0;
    for (; tm_cfg_is_digit(*p); p++) {
        size_t d = (size_t)(*p - '0');
        if (n > (SIZE_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    size_t unit;
    if (*p == '\0' || strcmp(p, "B") == 0)
        unit = 1;
    else if (strcmp(p, "KiB") == 0)
        unit = (size_t)1 << 10;
    else if (strcmp(p, "MiB") == 0)
        unit = (size_t)1 << 20;
    else if (strcmp(p, "GiB") == 0)
        unit = (size_t)1 << 30;
    else
        return -1;
    if (n > SIZE_MAX / unit)
        return -1;
    *bytes = n * unit;
    return 0;
}

/* tm_cfg_fmt_ms writes a duration in its largest exact unit, e.g. "5m". */
const char *tm_cfg_fmt_ms(int64_t ms, char *buf, size_t size)
{
    if (ms != 0 && ms % 3600000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "h", ms / 3600000);
    else if (ms != 0 && ms % 60000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "m", ms / 60000);
    else if (ms != 0 && ms % 1000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "s", ms / 1000);
    else
        tm_snprintf(buf, size, "%" PRId64 "ms", ms);
    return buf;
}

/* tm_cfg_parse_i64 accepts an optional '-' and decimal digits, nothing else. */
int tm_cfg_parse_i64(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (!tm_cfg_is_digit(*p))
        return -1;
    uint64_t v = 0;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; tm_cfg_is_digit(*p); p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (*p != '\0')
        return -1;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}
