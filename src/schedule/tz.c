/* tz.c - a small reader of the tz database's TZif files (RFC 8536).
 *
 * glibc can only evaluate a zone through the process-wide TZ variable
 * (setenv + tzset + localtime_r), which races with every other thread
 * that formats a time and cannot hold two zones at once. The schedule
 * code needs several zones side by side, per call, from any thread, so it
 * reads the files itself: the version 2+ 64-bit section (transitions and
 * their local time types) and the POSIX TZ footer that gives the rule
 * for instants after the last transition. Leap-second ("right/") zones
 * are refused: their clocks are not Unix time. */
#include "schedule/tz.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "schedule/civil.h"
#include "util/util.h"

/* TZ_MAX_FILE bounds a zone file; the largest in tzdata is under 4 KiB. */
#define TZ_MAX_FILE (1u << 20)
/* TZ_MAX_NAME bounds a zone name ("America/Argentina/ComodRivadavia"). */
#define TZ_MAX_NAME 255
/* TZ_MAX_OFF: RFC 8536 limits offsets to -89999..93599 seconds. */
#define TZ_MIN_OFF (-89999)
#define TZ_MAX_OFF 93599
/* TZ_MAX_RULE_TIME: a rule's time of day, up to 167 hours (RFC 8536
 * section 3.3.1 extends POSIX's 24 to 167, either sign). */
#define TZ_MAX_RULE_TIME (167 * 3600 + 59 * 60 + 59)
#define TZ_HEADER 44

/* struct tz_date is one date of a POSIX TZ rule: Jn (julian, 1..365,
 * February 29 never counted), n (zero-based day of the year, 0..365) or
 * Mm.w.d (day d, 0 = Sunday, of week w, 5 = last, of month m). */
struct tz_date {
    enum { TZD_JULIAN1, TZD_DAY0, TZD_MONTH } kind;
    int n;      /* JULIAN1, DAY0 */
    int m, w, d; /* MONTH */
    int32_t time; /* seconds after local midnight, default 02:00 */
};

/* struct tz_rule is the footer: standard offset, and with has_dst the
 * DST offset and the dates it starts and ends each year. */
struct tz_rule {
    int32_t std_off;
    int32_t dst_off;
    bool has_dst;
    struct tz_date start, end;
};

struct tm_tz {
    char *name;
    size_t ntrans;
    int64_t *trans;     /* strictly increasing transition instants */
    int32_t *trans_off; /* the offset from trans[i] on */
    int32_t first_off;  /* before the first transition: type 0 */
    bool has_rule;      /* footer present: governs from the last
                           transition on (all time without transitions) */
    struct tz_rule rule;
    int32_t min_off, max_off;
};

/* ---------------------------------------------------------- POSIX TZ */

static bool is_alpha(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_digit(int ch)
{
    return ch >= '0' && ch <= '9';
}

/* tz_name skips an abbreviation: three or more letters, or <...> with
 * letters, digits, '+' and '-'. Returns the end, or NULL. */
static const char *tz_name(const char *p)
{
    const char *s = p;
    if (*p == '<') {
        for (p++; is_alpha(*p) || is_digit(*p) || *p == '+' || *p == '-';
             p++)
            ;
        if (*p != '>' || p - s < 4)
            return NULL;
        return p + 1;
    }
    while (is_alpha(*p))
        p++;
    return p - s >= 3 ? p : NULL;
}

/* tz_num reads up to max decimal digits, the value at most limit. */
static const char *tz_num(const char *p, int limit, int *out)
{
    int v = 0, n = 0;
    while (is_digit(*p)) {
        v = v * 10 + (*p++ - '0');
        if (++n > 3 || v > limit)
            return NULL;
    }
    if (n == 0)
        return NULL;
    *out = v;
    return p;
}

/* tz_hms reads [+-]hh[:mm[:ss]] as seconds (hours up to max_h). */
static const char *tz_hms(const char *p, int max_h, int32_t *out)
{
    int sign = 1, h = 0, m = 0, s = 0;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    p = tz_num(p, max_h, &h);
    if (p != NULL && *p == ':') {
        p = tz_num(p + 1, 59, &m);
        if (p != NULL && *p == ':')
            p = tz_num(p + 1, 59, &s);
    }
    if (p == NULL)
        return NULL;
    *out = sign * (h * 3600 + m * 60 + s);
    return p;
}

static const char *tz_date(const char *p, struct tz_date *d)
{
    memset(d, 0, sizeof *d);
    d->time = 2 * 3600;
    if (*p == 'J') {
        d->kind = TZD_JULIAN1;
        p = tz_num(p + 1, 365, &d->n);
        if (p == NULL || d->n < 1)
            return NULL;
    } else if (*p == 'M') {
        d->kind = TZD_MONTH;
        p = tz_num(p + 1, 12, &d->m);
        if (p == NULL || d->m < 1 || *p != '.')
            return NULL;
        p = tz_num(p + 1, 5, &d->w);
        if (p == NULL || d->w < 1 || *p != '.')
            return NULL;
        p = tz_num(p + 1, 6, &d->d);
        if (p == NULL)
            return NULL;
    } else {
        d->kind = TZD_DAY0;
        p = tz_num(p, 365, &d->n);
        if (p == NULL)
            return NULL;
    }
    if (*p == '/')
        p = tz_hms(p + 1, 167, &d->time);
    return p;
}

/* tz_rule_parse parses a POSIX TZ string such as "CET-1CEST,M3.5.0,
 * M10.5.0/3". Offsets in it count west of Greenwich: they are negated. */
static int tz_rule_parse(const char *s, struct tz_rule *r)
{
    int32_t off;
    const char *p = tz_name(s);
    memset(r, 0, sizeof *r);
    if (p == NULL || (p = tz_hms(p, 24, &off)) == NULL)
        return -1;
    r->std_off = -off;
    if (*p == '\0')
        return 0;
    if ((p = tz_name(p)) == NULL)
        return -1;
    r->has_dst = true;
    r->dst_off = r->std_off + 3600;
    if (*p != ',' && *p != '\0') {
        if ((p = tz_hms(p, 24, &off)) == NULL)
            return -1;
        r->dst_off = -off;
    }
    /* POSIX leaves the default dates to the implementation; every TZif
     * footer with DST spells them out */
    if (*p != ',' || (p = tz_date(p + 1, &r->start)) == NULL ||
        *p != ',' || (p = tz_date(p + 1, &r->end)) == NULL || *p != '\0')
        return -1;
    return 0;
}

/* tz_date_day returns the day number of rule date d in year y. */
static int64_t tz_date_day(const struct tz_date *d, int64_t y)
{
    int64_t jan1 = tm_days_from_civil(y, 1, 1);
    switch (d->kind) {
    case TZD_JULIAN1:
        return jan1 + d->n - 1 + (tm_is_leap(y) && d->n >= 60 ? 1 : 0);
    case TZD_DAY0:
        return jan1 + d->n;
    case TZD_MONTH:
    default: {
        int64_t first = tm_days_from_civil(y, d->m, 1);
        int64_t day = first + (d->d - tm_weekday(first) + 7) % 7 +
                      (int64_t)(d->w - 1) * 7;
        while (day >= first + tm_month_days(y, d->m))
            day -= 7;
        return day;
    }
    }
}

/* rule_bounds gives the instants DST starts and ends in year y: the start
 * is stated in standard time, the end in DST. */
static void rule_bounds(const struct tz_rule *r, int64_t y, int64_t *start,
                        int64_t *end)
{
    *start = tz_date_day(&r->start, y) * TM_DAY_S + r->start.time -
             r->std_off;
    *end = tz_date_day(&r->end, y) * TM_DAY_S + r->end.time - r->dst_off;
}

static int64_t year_of(int64_t u)
{
    int64_t y;
    int m, d;
    tm_civil_from_days(tm_floor_div(u, TM_DAY_S), &y, &m, &d);
    return y;
}

static int32_t rule_offset(const struct tz_rule *r, int64_t u)
{
    if (!r->has_dst)
        return r->std_off;
    int64_t s, e;
    rule_bounds(r, year_of(u + r->std_off), &s, &e);
    bool dst = s < e ? (u >= s && u < e) : !(u >= e && u < s);
    return dst ? r->dst_off : r->std_off;
}

static int64_t rule_next_change(const struct tz_rule *r, int64_t u)
{
    if (!r->has_dst)
        return INT64_MAX;
    int64_t best = INT64_MAX, y = year_of(u);
    for (int64_t yy = y - 1; yy <= y + 2; yy++) {
        int64_t s, e;
        rule_bounds(r, yy, &s, &e);
        if (s > u && s < best)
            best = s;
        if (e > u && e < best)
            best = e;
    }
    return best;
}

/* --------------------------------------------------------------- TZif */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* struct tzif_counts is a TZif header's six counts. */
struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chr;
};

static int tzif_header(const unsigned char *p, size_t len,
                       struct tzif_counts *n, int *version)
{
    if (len < TZ_HEADER || memcmp(p, "TZif", 4) != 0)
        return -1;
    *version = p[4] == 0 ? 1 : p[4] >= '2' && p[4] <= '9' ? p[4] - '0' : -1;
    n->isut = be32(p + 20);
    n->isstd = be32(p + 24);
    n->leap = be32(p + 28);
    n->time = be32(p + 32);
    n->type = be32(p + 36);
    n->chr = be32(p + 40);
    return *version < 0 ? -1 : 0;
}

/* tzif_size gives in *size the size of the data block after a header
 * (time_size 4 in the version 1 block, 8 in the second). Returns 0, or
 * -1 when it exceeds any zone file. */
static int tzif_size(const struct tzif_counts *n, size_t time_size,
                     size_t *size)
{
    uint64_t s = (uint64_t)n->time * (time_size + 1) + (uint64_t)n->type * 6 +
                 n->chr + (uint64_t)n->leap * (time_size + 4) + n->isstd +
                 n->isut;
    *size = (size_t)s;
    return s > TZ_MAX_FILE ? -1 : 0;
}

static void note_off(struct tm_tz *z, int32_t off)
{
    if (off < z->min_off)
        z->min_off = off;
    if (off > z->max_off)
        z->max_off = off;
}

struct tm_tz *tm_tz_parse(const char *name, const unsigned char *data,
                          size_t len, char *err, size_t errlen)
{
    struct tm_tz *z = tm_calloc(1, sizeof *z);
    struct tzif_counts n;
    int version;
    const char *why = "not a TZif file";
    z->name = tm_strdup(name);
    z->min_off = INT32_MAX;
    z->max_off = INT32_MIN;
    if (tzif_header(data, len, &n, &version) < 0)
        goto fail;
    why = "a version 1 TZif file (no 64-bit data); update tzdata";
    if (version < 2)
        goto fail;
    size_t v1, v2;
    why = "truncated TZif file";
    if (tzif_size(&n, 4, &v1) < 0 || len - TZ_HEADER < v1)
        goto fail;
    const unsigned char *p = data + TZ_HEADER + v1;
    size_t left = len - TZ_HEADER - v1;
    if (tzif_header(p, left, &n, &version) < 0)
        goto fail;
    p += TZ_HEADER;
    left -= TZ_HEADER;
    if (tzif_size(&n, 8, &v2) < 0 || v2 > left)
        goto fail;
    why = "leap-second zones (right/...) are not supported";
    if (n.leap > 0)
        goto fail;
    why = "damaged TZif file (no local time type)";
    if (n.type == 0 || n.type > 256)
        goto fail;
    const unsigned char *times = p;
    const unsigned char *idx = times + (size_t)n.time * 8;
    const unsigned char *types = idx + n.time;
    int32_t offs[256];
    why = "damaged TZif file (offset out of range)";
    for (uint32_t i = 0; i < n.type; i++) {
        int32_t off = (int32_t)be32(types + (size_t)i * 6);
        if (off < TZ_MIN_OFF || off > TZ_MAX_OFF)
            goto fail;
        offs[i] = off;
        note_off(z, off);
    }
    z->first_off = offs[0];
    z->ntrans = n.time;
    z->trans = tm_calloc(n.time ? n.time : 1, sizeof *z->trans);
    z->trans_off = tm_calloc(n.time ? n.time : 1, sizeof *z->trans_off);
    for (uint32_t i = 0; i < n.time; i++) {
        z->trans[i] = be64(times + (size_t)i * 8);
        why = "damaged TZif file (transitions out of order)";
        if (i > 0 && z->trans[i] <= z->trans[i - 1])
            goto fail;
        why = "damaged TZif file (bad type index)";
        if (idx[i] >= n.type)
            goto fail;
        z->trans_off[i] = offs[idx[i]];
    }
    /* the footer: "\nTZ\n" right after the data */
    p += v2;
    left -= v2;
    why = "damaged TZif file (no footer)";
    if (left < 2 || p[0] != '\n')
        goto fail;
    const unsigned char *nl = memchr(p + 1, '\n', left - 1);
    if (nl == NULL || nl - p - 1 > 255)
        goto fail;
    if (nl > p + 1) {
        char footer[256];
        memcpy(footer, p + 1, (size_t)(nl - p - 1));
        footer[nl - p - 1] = '\0';
        why = "unsupported POSIX TZ rule in the TZif footer";
        if (tz_rule_parse(footer, &z->rule) < 0)
            goto fail;
        why = "damaged TZif file (footer offset out of range)";
        if (z->rule.std_off < TZ_MIN_OFF || z->rule.std_off > TZ_MAX_OFF ||
            z->rule.dst_off < TZ_MIN_OFF || z->rule.dst_off > TZ_MAX_OFF)
            goto fail;
        z->has_rule = true;
        note_off(z, z->rule.std_off);
        if (z->rule.has_dst)
            note_off(z, z->rule.dst_off);
    }
    return z;

fail:
    tm_snprintf(err, errlen, "%s", why);
    tm_tz_free(z);
    return NULL;
}

/* valid_name refuses names that could leave the zone directory. */
static bool valid_name(const char *s)
{
    size_t len = strlen(s);
    if (len == 0 || len > TZ_MAX_NAME || s[0] == '/' || s[0] == '.')
        return false;
    for (const char *p = s; *p; p++) {
        if (!(is_alpha(*p) || is_digit(*p) || *p == '_' || *p == '-' ||
              *p == '+' || *p == '/' || *p == '.'))
            return false;
        if (p[0] == '/' && p[1] == '.')
            return false;
    }
    return true;
}

static int read_all(const char *path, unsigned char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char *buf = NULL;
    size_t used = 0;
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0)
        goto fail;
    if (!S_ISREG(st.st_mode)) {
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        goto fail;
    }
    if (st.st_size > (off_t)TZ_MAX_FILE) {
        errno = EFBIG;
        goto fail;
    }
    buf = tm_malloc((size_t)st.st_size + 1);
    while (used < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + used, (size_t)st.st_size - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        used += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = used;
    return 0;

fail: {
        int e = errno;
        close(fd);
        tm_free(buf);
        errno = e;
        return -1;
    }
}

struct tm_tz *tm_tz_load(const char *name, char *err, size_t errlen)
{
    char path[TZ_MAX_NAME + 512], why[200], ebuf[TM_STRERRNO_BUF];
    unsigned char *data = NULL;
    size_t len = 0;
    if (strcmp(name, "UTC") == 0) {
        struct tm_tz *z = tm_calloc(1, sizeof *z);
        z->name = tm_strdup(name);
        z->trans = tm_calloc(1, sizeof *z->trans);
        z->trans_off = tm_calloc(1, sizeof *z->trans_off);
        return z;
    }
    if (!valid_name(name)) {
        tm_snprintf(err, errlen, "invalid time zone name '%s'; expected "
                    "a tz database name like Europe/Berlin", name);
        return NULL;
    }
    const char *dir = getenv("TZDIR");
    if (dir == NULL || *dir == '\0')
        dir = TM_TZ_DIR;
    tm_snprintf(path, sizeof path, "%s/%s", dir, name);
    if (read_all(path, &data, &len) < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR || e == EISDIR)
            tm_snprintf(err, errlen, "unknown time zone '%s' (no %s; is "
                        "the tzdata package installed?)", name, path);
        else
            tm_snprintf(err, errlen, "cannot read %s: %s", path,
                        tm_strerror(e, ebuf, sizeof ebuf));
        return NULL;
    }
    struct tm_tz *z = tm_tz_parse(name, data, len, why, sizeof why);
    if (z == NULL)
        tm_snprintf(err, errlen, "time zone '%s': %s (%s)", name, why, path);
    tm_free(data);
    return z;
}

void tm_tz_free(struct tm_tz *z)
{
    if (z == NULL)
        return;
    tm_free(z->name);
    tm_free(z->trans);
    tm_free(z->trans_off);
    tm_free(z);
}

const char *tm_tz_name(const struct tm_tz *z)
{
    return z->name;
}

/* upper returns the number of transitions at or before u. */
static size_t upper(const struct tm_tz *z, int64_t u)
{
    size_t lo = 0, hi = z->ntrans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t tm_tz_offset(const struct tm_tz *z, int64_t u)
{
    size_t k = upper(z, u);
    if (k == z->ntrans && z->has_rule)
        return rule_offset(&z->rule, u);
    if (k == 0)
        return z->first_off;
    return z->trans_off[k - 1];
}

int64_t tm_tz_next_change(const struct tm_tz *z, int64_t u)
{
    size_t k = upper(z, u);
    if (k < z->ntrans)
        return z->trans[k];
    return z->has_rule ? rule_next_change(&z->rule, u) : INT64_MAX;
}

void tm_tz_offset_bounds(const struct tm_tz *z, int32_t *min, int32_t *max)
{
    *min = z->min_off;
    *max = z->max_off;
}
