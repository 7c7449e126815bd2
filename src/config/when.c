/* when.c - the times `emit --delay` and `emit --at` take. */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"

/* digits reads exactly n decimal digits at *p into *out, moving *p past
 * them; -1 when they are not there. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return -1;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

/* lit takes the character c at *p, moving *p past it; -1 (*p unmoved)
 * when another one (or the end) is there. */
static int lit(const char **p, char c)
{
    if (**p != c)
        return -1;
    (*p)++;
    return 0;
}

/* epoch_ms reads a bare count of epoch milliseconds (digits only). */
static int epoch_ms(const char *s, int64_t *ms)
{
    for (const char *p = s; *p != '\0'; p++)
        if (!isdigit((unsigned char)*p))
            return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0)
        return -1;
    *ms = v;
    return 0;
}

/*
 * rfc3339 reads YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM): RFC
 * 3339, the ISO 8601 form with a zone. 't', 'z' and a space for 'T' are
 * accepted as RFC 3339 allows; the fraction is cut to milliseconds; a
 * leap second (:60) is refused. A time without a zone is refused: it
 * would depend on the zone of the machine that runs the command.
 */
static int rfc3339(const char *s, int64_t *ms)
{
    const char *p = s;
    int y, mo, d, h, mi, se, frac = 0;
    if (digits(&p, 4, &y) || lit(&p, '-') || digits(&p, 2, &mo) ||
        lit(&p, '-') || digits(&p, 2, &d))
        return -1;
    if (*p != 'T' && *p != 't' && *p != ' ')
        return -1;
    p++;
    if (digits(&p, 2, &h) || lit(&p, ':') || digits(&p, 2, &mi) ||
        lit(&p, ':') || digits(&p, 2, &se))
        return -1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        int n = 0;
        for (; isdigit((unsigned char)*p); n++, p++)
            if (n < 3)
                frac = frac * 10 + (*p - '0');
        /* fewer than three digits: scale up (".5" is 500 ms) */
        for (; n < 3; n++)
            frac *= 10;
    }
    int off_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1, oh, om;
        p++;
        if (digits(&p, 2, &oh) || lit(&p, ':') || digits(&p, 2, &om) ||
            oh > 23 || om > 59)
            return -1;
        off_min = sign * (oh * 60 + om);
    } else {
        return -1;
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 ||
        d > tm_month_days(y, mo) || h > 23 || mi > 59 || se > 59)
        return -1;
    int64_t days = tm_days_from_civil(y, mo, d);
    int64_t secs = days * TM_DAY_S + h * 3600 + mi * 60 + se -
                   (int64_t)off_min * 60;
    *ms = secs * 1000 + frac;
    return 0;
}

int tm_parse_at(const char *s, int64_t *ms)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (epoch_ms(s, ms) == 0)
        return 0;
    return rfc3339(s, ms);
}

int tm_parse_delay(const char *s, int64_t *ms)
{
    if (s == NULL || *s == '\0' || tm_parse_duration(s, ms) != 0 || *ms < 0)
        return -1;
    return 0;
}
