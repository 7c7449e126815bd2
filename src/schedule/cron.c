/* cron.c - five-field cron specifications: parse, match, next and
 * previous matching minute of wall-clock time. */
#include "schedule/cron.h"

#include <string.h>
#include <strings.h>

#include "schedule/civil.h"
#include "util/util.h"

/* CRON_SCAN_DAYS bounds a search: the Gregorian calendar repeats every
 * 400 years (146097 days), so a spec that matches no day in that span
 * plus a year never matches. */
#define CRON_SCAN_DAYS (146097 + 366)
/* CRON_MAX_NUM bounds a number in a field: larger is an error anyway. */
#define CRON_MAX_NUM 9999

struct field {
    const char *name;
    int min, max;              /* values as written */
    const char *const *names;  /* three-letter names for min.., or NULL */
};

static const char *const month_names[] = {
    "jan", "feb", "mar", "apr", "may", "jun",
    "jul", "aug", "sep", "oct", "nov", "dec", NULL
};

static const char *const day_names[] = {
    "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL
};

static const struct field fields[5] = {
    { "minute", 0, 59, NULL },
    { "hour", 0, 23, NULL },
    { "day-of-month", 1, 31, NULL },
    { "month", 1, 12, month_names },
    { "day-of-week", 0, 7, day_names },
};

/* struct parse is the state of one tm_cron_parse call. */
struct parse {
    const char *spec;
    char *err;
    size_t errlen;
    int *col;
};

static int perr(struct parse *ps, const char *at, int fi, const char *what,
                const char *tok, size_t toklen)
{
    *ps->col = (int)(at - ps->spec) + 1;
    if (tok != NULL)
        tm_snprintf(ps->err, ps->errlen, "field %d (%s) at column %d: %s "
                    "'%.*s'", fi + 1, fields[fi].name, *ps->col, what,
                    (int)(toklen > 20 ? 20 : toklen), tok);
    else
        tm_snprintf(ps->err, ps->errlen, "field %d (%s) at column %d: %s",
                    fi + 1, fields[fi].name, *ps->col, what);
    return -1;
}

static bool is_digit(int ch)
{
    return ch >= '0' && ch <= '9';
}

static bool is_letter(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* value reads a number or a name of field fi at *p, advancing *p. */
static int value(struct parse *ps, int fi, const char **p, int *out)
{
    const struct field *f = &fields[fi];
    const char *s = *p;
    char msg[96];
    if (is_digit(*s)) {
        int v = 0;
        while (is_digit(*s)) {
            if (v <= CRON_MAX_NUM)
                v = v * 10 + (*s - '0');
            s++;
        }
        if (v < f->min || v > f->max) {
            tm_snprintf(msg, sizeof msg, "expected %d-%d, got", f->min,
                        f->max);
            return perr(ps, *p, fi, msg, *p, (size_t)(s - *p));
        }
        *out = v;
        *p = s;
        return 0;
    }
    if (is_letter(*s)) {
        while (is_letter(*s))
            s++;
        for (int i = 0; f->names != NULL && f->names[i] != NULL; i++) {
            if (s - *p == 3 && strncasecmp(*p, f->names[i], 3) == 0) {
                *out = f->min + i;
                *p = s;
                return 0;
            }
        }
        if (f->names == NULL)
            return perr(ps, *p, fi, "expected a number, got", *p,
                        (size_t)(s - *p));
        return perr(ps, *p, fi, fi == 3 ? "expected a number or a month "
                    "name (jan-dec), got" : "expected a number or a day "
                    "name (sun-sat), got", *p, (size_t)(s - *p));
    }
    return perr(ps, *p, fi, *s == '\0' || *s == ' ' || *s == '\t' ?
                "expected a value" : "unexpected character", *s ? *p : NULL,
                1);
}

/* field_parse compiles field fi, the text [p, end), into *bits. */
static int field_parse(struct parse *ps, int fi, const char *p,
                       const char *end, uint64_t *bits)
{
    const struct field *f = &fields[fi];
    *bits = 0;
    for (;;) {
        const char *item = p;
        int lo, hi, step = 1;
        if (*p == '*') {
            lo = f->min;
            hi = fi == 4 ? 6 : f->max;
            p++;
        } else {
            if (value(ps, fi, &p, &lo) < 0)
                return -1;
            hi = lo;
            if (*p == '-') {
                const char *at = ++p;
                if (value(ps, fi, &p, &hi) < 0)
                    return -1;
                /* "mon-sun": the name sun ends a range as 7 */
                if (fi == 4 && hi == 0 && is_letter(*at))
                    hi = 7;
                if (hi < lo)
                    return perr(ps, item, fi, "range goes backwards (write "
                                "it as two ranges, or a list):", item,
                                (size_t)(p - item));
            }
        }
        if (*p == '/') {
            const char *at = ++p;
            if (lo == hi && *item != '*')
                return perr(ps, item, fi, "a step needs '*' or a range "
                            "before it:", item, (size_t)(p - item));
            int s = 0;
            while (is_digit(*p)) {
                if (s <= CRON_MAX_NUM)
                    s = s * 10 + (*p - '0');
                p++;
            }
            if (p == at)
                return perr(ps, at, fi, "expected a step number after '/'",
                            NULL, 0);
            if (s < 1 || s > f->max) {
                char msg[64];
                tm_snprintf(msg, sizeof msg, "expected a step from 1 to %d,"
                            " got", f->max);
                return perr(ps, at, fi, msg, at, (size_t)(p - at));
            }
            step = s;
        }
        for (int v = lo; v <= hi; v += step)
            *bits |= UINT64_C(1) << (fi == 4 && v == 7 ? 0 : v);
        if (p == end)
            return 0;
        if (*p != ',')
            return perr(ps, p, fi, "unexpected character", p, 1);
        p++;
        if (p == end)
            return perr(ps, p, fi, "expected a value after ','", NULL, 0);
    }
}

/* fires_ever tells whether some date matches: only a restricted
 * day-of-month with an unrestricted day-of-week can exclude every day
 * (day 30 in February); with both restricted any day of the week
 * matches, with '*' in day-of-month day 1 exists in every month. */
static bool fires_ever(const struct tm_cron *c)
{
    for (int m = 1; m <= 12; m++) {
        if (!(c->months & (1u << m)))
            continue;
        int last = m == 2 ? 29 : tm_month_days(2001, m);
        for (int d = 1; d <= last; d++) {
            if (c->doms & (UINT32_C(1) << d))
                return true;
        }
    }
    return !c->dom_star && !c->dow_star;
}

int tm_cron_parse(const char *spec, struct tm_cron *out, char *err,
                  size_t errlen, int *col)
{
    struct parse ps = { spec, err, errlen, col };
    struct tm_cron c;
    const char *p = spec;
    const char *dom_at = spec;
    int nf = 0;
    memset(&c, 0, sizeof c);
    *col = 0;
    while (*p == ' ' || *p == '\t')
        p++;
    while (*p != '\0') {
        const char *end = p + strcspn(p, " \t");
        uint64_t bits;
        if (nf == 5) {
            *col = (int)(p - spec) + 1;
            tm_snprintf(err, errlen, "more than five fields at column %d; "
                        "expected minute hour day-of-month month "
                        "day-of-week", *col);
            return -1;
        }
        if (field_parse(&ps, nf, p, end, &bits) < 0)
            return -1;
        switch (nf) {
        case 0:
            c.minutes = bits;
            break;
        case 1:
            c.hours = (uint32_t)bits;
            break;
        case 2:
            c.doms = (uint32_t)bits;
            c.dom_star = *p == '*';
            dom_at = p;
            break;
        case 3:
            c.months = (uint16_t)bits;
            break;
        default:
            c.dows = (uint8_t)bits;
            c.dow_star = *p == '*';
            break;
        }
        nf++;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
    }
    if (nf < 5) {
        *col = (int)(p - spec) + 1;
        tm_snprintf(err, errlen, "%d field%s, expected five: minute hour "
                    "day-of-month month day-of-week", nf, nf == 1 ? "" : "s");
        return -1;
    }
    if (!fires_ever(&c)) {
        *col = (int)(dom_at - spec) + 1;
        tm_snprintf(err, errlen, "field 3 (day-of-month) at column %d: no "
                    "month of the spec has such a day: it never fires",
                    *col);
        return -1;
    }
    *out = c;
    return 0;
}

bool tm_cron_match_day(const struct tm_cron *c, int month, int dom, int wday)
{
    if (!(c->months & (1u << month)))
        return false;
    bool d = (c->doms & (UINT32_C(1) << dom)) != 0;
    bool w = (c->dows & (1u << wday)) != 0;
    return c->dom_star || c->dow_star ? d && w : d || w;
}

static bool match_days(const struct tm_cron *c, int64_t days)
{
    int64_t y;
    int m, d;
    tm_civil_from_days(days, &y, &m, &d);
    return tm_cron_match_day(c, m, d, tm_weekday(days));
}

/* first_bit returns the least set bit at or above from, or -1. */
static int first_bit(uint64_t bits, int from)
{
    if (from > 63)
        return -1;
    bits &= ~UINT64_C(0) << from;
    return bits ? __builtin_ctzll(bits) : -1;
}

/* last_bit returns the greatest set bit at or below from, or -1. */
static int last_bit(uint64_t bits, int from)
{
    if (from < 0)
        return -1;
    if (from < 63)
        bits &= (UINT64_C(1) << (from + 1)) - 1;
    return bits ? 63 - __builtin_clzll(bits) : -1;
}

int tm_cron_next(const struct tm_cron *c, int64_t w, int64_t *out)
{
    int64_t day = tm_floor_div(w + 59, 60) * 60;
    int64_t days = tm_floor_div(day, TM_DAY_S);
    int sod = (int)(day - days * TM_DAY_S);
    int h0 = sod / 3600, m0 = sod % 3600 / 60;
    for (int64_t i = 0; i < CRON_SCAN_DAYS; i++, days++, h0 = m0 = 0) {
        if (!match_days(c, days))
            continue;
        for (int h = first_bit(c->hours, h0); h >= 0;
             h = first_bit(c->hours, h + 1)) {
            int m = first_bit(c->minutes, h == h0 ? m0 : 0);
            if (m >= 0) {
                *out = days * TM_DAY_S + h * 3600 + m * 60;
                return 0;
            }
        }
    }
    return -1;
}

int tm_cron_prev(const struct tm_cron *c, int64_t w, int64_t *out)
{
    int64_t day = tm_floor_div(w, 60) * 60;
    int64_t days = tm_floor_div(day, TM_DAY_S);
    int sod = (int)(day - days * TM_DAY_S);
    int h0 = sod / 3600, m0 = sod % 3600 / 60;
    for (int64_t i = 0; i < CRON_SCAN_DAYS; i++, days--, h0 = 23, m0 = 59) {
        if (!match_days(c, days))
            continue;
        for (int h = last_bit(c->hours, h0); h >= 0;
             h = last_bit(c->hours, h - 1)) {
            int m = last_bit(c->minutes, h == h0 ? m0 : 59);
            if (m >= 0) {
                *out = days * TM_DAY_S + h * 3600 + m * 60;
                return 0;
            }
        }
    }
    return -1;
}
