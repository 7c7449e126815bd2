/* cron.h - five-field cron specifications: parse and match. */
#ifndef TASKMILL_SCHEDULE_CRON_H
#define TASKMILL_SCHEDULE_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * struct tm_cron is a compiled spec "minute hour day-of-month month
 * day-of-week": one bit per allowed value. Day-of-week 7 is stored as 0
 * (Sunday). dom_star/dow_star record that the field's text began with
 * '*' ("*" or "*\/n"): as in Vixie cron, a day matches when both its
 * day-of-month and day-of-week match if either field begins with '*',
 * and when either of them matches if both are restricted.
 */
struct tm_cron {
    uint64_t minutes;  /* bits 0..59 */
    uint32_t hours;    /* bits 0..23 */
    uint32_t doms;     /* bits 1..31 */
    uint16_t months;   /* bits 1..12 */
    uint8_t dows;      /* bits 0..6, 0 = Sunday */
    bool dom_star;
    bool dow_star;
};

/*
 * tm_cron_parse compiles spec into *out. Returns 0, or -1 with a message
 * naming the field in err and, in *col, the 1-based column of spec where
 * the offending part starts. A spec that matches no date at all (such as
 * "0 0 30 2 *") is refused here: it would never fire.
 */
int tm_cron_parse(const char *spec, struct tm_cron *out, char *err,
                  size_t errlen, int *col);

/* tm_cron_match_day tells whether the date (month 1..12, dom 1..31,
 * wday 0..6 with 0 = Sunday) is a day of the spec. */
bool tm_cron_match_day(const struct tm_cron *c, int month, int dom,
                       int wday);

/*
 * tm_cron_next returns, in *out, the first wall-clock minute at or after
 * w that the spec matches, tm_cron_prev the last one at or before w. Wall
 * clock times are seconds counted as if local time were UTC (civil
 * seconds from 1970-01-01 00:00). Both return 0, or -1 when no minute
 * matches within 400 years (one full Gregorian cycle) of w.
 */
int tm_cron_next(const struct tm_cron *c, int64_t w, int64_t *out);
int tm_cron_prev(const struct tm_cron *c, int64_t w, int64_t *out);

#endif /* TASKMILL_SCHEDULE_CRON_H */
