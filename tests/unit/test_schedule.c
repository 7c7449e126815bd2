/* test_schedule.c - unit tests for the schedule core (src/schedule/):
 * cron specs, the TZif reader, the slot calculator and the clock. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* setenv, timegm */
#endif

#include "schedule/civil.h"
#include "schedule/clock.h"
#include "schedule/cron.h"
#include "schedule/slots.h"
#include "schedule/tz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <check.h>

#include "util/util.h"

#include "unit_main.h"

/* ------------------------------------------------------------ helpers */

/* REQUIRE is ck_assert_msg for hot loops: check's assertions report
 * their location through a pipe on every call, even when they pass. */
#define REQUIRE(cond, ...)                                                  \
    do {                                                                    \
        if (!(cond))                                                        \
            ck_abort_msg(__VA_ARGS__);                                      \
    } while (0)

/* utc returns the epoch milliseconds of a UTC date and time. */
static int64_t utc(int y, int mo, int d, int h, int mi)
{
    return (tm_days_from_civil(y, mo, d) * TM_DAY_S + h * 3600 + mi * 60) *
           1000;
}

/* show formats an instant for failure messages (one of 4 rotating
 * buffers, so a message can show several). */
static const char *show(int64_t ms)
{
    static char buf[4][40];
    static int k;
    k = (k + 1) % 4;
    tm_rfc3339(ms, buf[k], sizeof buf[k]);
    return buf[k];
}

static struct tm_tz *zone(const char *name)
{
    char err[256];
    struct tm_tz *z = tm_tz_load(name, err, sizeof err);
    ck_assert_msg(z != NULL, "%s: %s", name, err);
    return z;
}

static struct tm_sched_spec cron_spec(const char *text, const struct tm_tz *z)
{
    struct tm_sched_spec s = { .kind = TM_SCHED_CRON, .tz = z };
    char err[256];
    int col;
    ck_assert_msg(tm_cron_parse(text, &s.cron, err, sizeof err, &col) == 0,
                  "'%s': %s", text, err);
    return s;
}

/* expect_slots walks tm_sched_next from `from` and checks the slots
 * against want[0..n), then walks tm_sched_prev back down over them. */
static void expect_slots(const struct tm_sched_spec *s, const char *what,
                         int64_t from, const int64_t *want, size_t n)
{
    int64_t t = from, got;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(tm_sched_next(s, t, &got) == 0, "%s: no slot after %s",
                      what, show(t));
        ck_assert_msg(got == want[i], "%s: slot %zu after %s is %s, "
                      "expected %s", what, i, show(t), show(got),
                      show(want[i]));
        t = got;
    }
    for (size_t i = n; i-- > 0;) {
        ck_assert_int_eq(tm_sched_prev(s, want[i], &got), 0);
        ck_assert_msg(got == want[i], "%s: prev(%s) = %s", what,
                      show(want[i]), show(got));
        if (i > 0) {
            ck_assert_int_eq(tm_sched_prev(s, want[i] - 1, &got), 0);
            ck_assert_msg(got == want[i - 1], "%s: prev(%s - 1ms) = %s, "
                          "expected %s", what, show(want[i]), show(got),
                          show(want[i - 1]));
        }
    }
}

/* ---------------------------------------------------------------- cron */

struct cron_ok {
    const char *spec;
    uint64_t minutes;
    uint32_t hours, doms;
    uint16_t months;
    uint8_t dows;
    int dom_star, dow_star;
};

#define ALL_MIN ((UINT64_C(1) << 60) - 1)
#define ALL_HOUR ((UINT32_C(1) << 24) - 1)
#define ALL_DOM (((UINT32_C(1) << 31) - 1) << 1)
#define ALL_MON (((1u << 12) - 1) << 1)
#define ALL_DOW 0x7f
#define B(n) (UINT64_C(1) << (n))

static const struct cron_ok cron_oks[] = {
    { "* * * * *", ALL_MIN, ALL_HOUR, ALL_DOM, ALL_MON, ALL_DOW, 1, 1 },
    { "0 3 * * *", B(0), B(3), ALL_DOM, ALL_MON, ALL_DOW, 1, 1 },
    { "  5,10 1-3 15 jan-MAR mon-fri ", B(5) | B(10), B(1) | B(2) | B(3),
      B(15), B(1) | B(2) | B(3), 0x3e, 0, 0 },
    { "*/15 */6 */10 */4 */3", B(0) | B(15) | B(30) | B(45),
      B(0) | B(6) | B(12) | B(18), B(1) | B(11) | B(21) | B(31),
      B(1) | B(5) | B(9), B(0) | B(3) | B(6), 1, 1 },
    { "10-20/5 0 1 1 7", B(10) | B(15) | B(20), B(0), B(1), B(1), B(0), 0,
      0 },
    { "0 0 * * 5-7", B(0), B(0), ALL_DOM, ALL_MON, B(5) | B(6) | B(0), 1,
      0 },
    { "0 0 * * 0,7", B(0), B(0), ALL_DOM, ALL_MON, B(0), 1, 0 },
    { "0 0 * * fri-sun", B(0), B(0), ALL_DOM, ALL_MON, B(5) | B(6) | B(0),
      1, 0 },
    { "59 23 31 dec SAT", B(59), B(23), B(31), B(12), B(6), 0, 0 },
    { "0\t12\t*\tfeb,Aug\tsun", B(0), B(12), ALL_DOM, B(2) | B(8), B(0), 1,
      0 },
    { "0 0 29 2 *", B(0), B(0), B(29), B(2), ALL_DOW, 0, 1 },
    { "0 0 1-31/30 * *", B(0), B(0), B(1) | B(31), ALL_MON, ALL_DOW, 0, 1 },
};

START_TEST(test_cron_parse_ok)
{
    const struct cron_ok *w = &cron_oks[_i];
    struct tm_cron c;
    char err[256];
    int col = -1;
    ck_assert_msg(tm_cron_parse(w->spec, &c, err, sizeof err, &col) == 0,
                  "'%s': %s", w->spec, err);
    ck_assert_msg(c.minutes == w->minutes, "'%s': minutes %llx", w->spec,
                  (unsigned long long)c.minutes);
    ck_assert_msg(c.hours == w->hours, "'%s': hours %x", w->spec, c.hours);
    ck_assert_msg(c.doms == w->doms, "'%s': doms %x", w->spec, c.doms);
    ck_assert_msg(c.months == w->months, "'%s': months %x", w->spec,
                  c.months);
    ck_assert_msg(c.dows == w->dows, "'%s': dows %x", w->spec, c.dows);
    ck_assert_int_eq(c.dom_star, w->dom_star);
    ck_assert_int_eq(c.dow_star, w->dow_star);
}
END_TEST

struct cron_bad {
    const char *spec;
    int col;
    const char *msg;
};

static const struct cron_bad cron_bads[] = {
    { "", 1, "0 fields, expected five" },
    { "* * * *", 8, "4 fields, expected five" },
    { "* * * * * *", 11, "more than five fields at column 11" },
    { "60 * * * *", 1, "field 1 (minute) at column 1: expected 0-59, got "
      "'60'" },
    { "0 24 * * *", 3, "field 2 (hour) at column 3: expected 0-23, got "
      "'24'" },
    { "0 0 0 * *", 5, "field 3 (day-of-month) at column 5: expected 1-31" },
    { "0 0 32 * *", 5, "field 3 (day-of-month)" },
    { "0 0 * 13 *", 7, "field 4 (month) at column 7: expected 1-12" },
    { "0 0 * * 8", 9, "field 5 (day-of-week) at column 9: expected 0-7" },
    { "0 0 * foo *", 7, "expected a number or a month name (jan-dec), got "
      "'foo'" },
    { "0 0 * * sunday", 9, "expected a number or a day name (sun-sat), "
      "got 'sunday'" },
    { "0 0 * * jan", 9, "day name (sun-sat), got 'jan'" },
    { "0 mon * * *", 3, "field 2 (hour) at column 3: expected a number, "
      "got 'mon'" },
    { "5-1 * * * *", 1, "range goes backwards" },
    { "0 0 * * 6-0", 9, "range goes backwards" },
    { "*/0 * * * *", 3, "expected a step from 1 to 59, got '0'" },
    { "0 */24 * * *", 5, "expected a step from 1 to 23, got '24'" },
    { "*/ * * * *", 3, "expected a step number after '/'" },
    { "5/10 * * * *", 1, "a step needs '*' or a range before it" },
    { "1,,2 * * * *", 3, "unexpected character ','" },
    { "1, * * * *", 3, "expected a value after ','" },
    { "0 0 1-x * *", 7, "field 3 (day-of-month) at column 7: expected a "
      "number, got 'x'" },
    { "0 0 1 * mon-", 13, "field 5 (day-of-week) at column 13: expected a "
      "value" },
    { "0 0 * * 1#2", 10, "unexpected character '#'" },
    { "0 0 30 2 *", 5, "field 3 (day-of-month) at column 5: no month of "
      "the spec has such a day: it never fires" },
    { "0 0 31 apr,jun,sep,nov *", 5, "never fires" },
    { "0  0 30,31 feb *", 6, "never fires" },
    { "@hourly", 1, "unexpected character '@'" },
};

START_TEST(test_cron_parse_bad)
{
    const struct cron_bad *w = &cron_bads[_i];
    struct tm_cron c;
    char err[256];
    int col = -1;
    ck_assert_msg(tm_cron_parse(w->spec, &c, err, sizeof err, &col) < 0,
                  "'%s' parsed", w->spec);
    if (getenv("TM_TEST_SHOW_ERRORS") != NULL)
        fprintf(stderr, "'%s': col %d: %s\n", w->spec, col, err);
    ck_assert_msg(strstr(err, w->msg) != NULL, "'%s': '%s' lacks '%s'",
                  w->spec, err, w->msg);
    ck_assert_msg(col == w->col, "'%s': column %d, expected %d (%s)",
                  w->spec, col, w->col, err);
}
END_TEST

/* Vixie cron's day rule: both day fields restricted means either. */
START_TEST(test_cron_day_rule)
{
    struct tm_sched_spec s;
    /* 2026-11-13 is a Friday; the 1st of December a Tuesday */
    s = cron_spec("0 0 13 * fri", NULL);
    ck_assert(tm_cron_match_day(&s.cron, 11, 13, 5));
    ck_assert(tm_cron_match_day(&s.cron, 11, 14, 5));  /* any Friday */
    ck_assert(tm_cron_match_day(&s.cron, 12, 13, 0));  /* any 13th */
    ck_assert(!tm_cron_match_day(&s.cron, 12, 14, 1));
    /* a field beginning with '*' makes the two fields one condition */
    s = cron_spec("0 0 */2 * fri", NULL);
    ck_assert(tm_cron_match_day(&s.cron, 11, 13, 5));
    ck_assert(!tm_cron_match_day(&s.cron, 11, 14, 5));
    ck_assert(!tm_cron_match_day(&s.cron, 11, 15, 0));
    s = cron_spec("0 0 13 * *", NULL);
    ck_assert(tm_cron_match_day(&s.cron, 11, 13, 3));
    ck_assert(!tm_cron_match_day(&s.cron, 11, 14, 5));
    s = cron_spec("0 0 * 11 mon", NULL);
    ck_assert(tm_cron_match_day(&s.cron, 11, 16, 1));
    ck_assert(!tm_cron_match_day(&s.cron, 11, 17, 2));
    ck_assert(!tm_cron_match_day(&s.cron, 12, 7, 1));
    /* both restricted: a day of week rescues an impossible date */
    s = cron_spec("0 0 30 2 mon", NULL);
    ck_assert(tm_cron_match_day(&s.cron, 2, 2, 1));
}
END_TEST

/* ---------------------------------------------------------------- UTC */

struct utc_case {
    const char *spec;
    int64_t from, next, prev; /* next after from; prev at or before */
};

START_TEST(test_utc_next_prev)
{
    struct tm_tz *z = zone("UTC");
    const struct utc_case cases[] = {
        /* month and year ends */
        { "0 0 1 * *", utc(2026, 1, 31, 23, 59), utc(2026, 2, 1, 0, 0),
          utc(2026, 1, 1, 0, 0) },
        { "0 0 1 1 *", utc(2026, 12, 31, 23, 59) + 59999,
          utc(2027, 1, 1, 0, 0), utc(2026, 1, 1, 0, 0) },
        { "59 23 31 * *", utc(2026, 4, 1, 0, 0), utc(2026, 5, 31, 23, 59),
          utc(2026, 3, 31, 23, 59) },
        { "0 12 28-31 2 *",
          utc(2026, 2, 28, 12, 1), utc(2027, 2, 28, 12, 0),
          utc(2026, 2, 28, 12, 0) },
        /* leap years: 2028 and 2400 are, 2100 is not */
        { "0 0 29 2 *", utc(2026, 3, 1, 0, 0), utc(2028, 2, 29, 0, 0),
          utc(2024, 2, 29, 0, 0) },
        { "0 0 29 2 *", utc(2096, 3, 1, 0, 0), utc(2104, 2, 29, 0, 0),
          utc(2096, 2, 29, 0, 0) },
        { "0 0 29 2 *", utc(2399, 3, 1, 0, 0), utc(2400, 2, 29, 0, 0),
          utc(2396, 2, 29, 0, 0) },
        { "0 0 * * *", utc(2028, 2, 28, 0, 0), utc(2028, 2, 29, 0, 0),
          utc(2028, 2, 28, 0, 0) },
        /* exactly on a slot: next is strictly after, prev is the slot */
        { "*/15 * * * *", utc(2026, 6, 1, 10, 15), utc(2026, 6, 1, 10, 30),
          utc(2026, 6, 1, 10, 15) },
        { "*/15 * * * *", utc(2026, 6, 1, 10, 15) - 1,
          utc(2026, 6, 1, 10, 15), utc(2026, 6, 1, 10, 0) },
        /* Friday the 13th with '*' in day-of-month is only Fridays */
        { "0 9 * * fri", utc(2026, 11, 13, 9, 0), utc(2026, 11, 20, 9, 0),
          utc(2026, 11, 13, 9, 0) },
        /* either the 13th or a Friday (Vixie) */
        { "0 9 13 * fri", utc(2026, 11, 13, 9, 0), utc(2026, 11, 20, 9, 0),
          utc(2026, 11, 13, 9, 0) },
        { "0 9 13 * fri", utc(2026, 12, 11, 9, 0), utc(2026, 12, 13, 9, 0),
          utc(2026, 12, 11, 9, 0) },
        /* before the epoch */
        { "0 0 1 1 *", utc(1969, 6, 1, 0, 0), utc(1970, 1, 1, 0, 0),
          utc(1969, 1, 1, 0, 0) },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tm_sched_spec s = cron_spec(cases[i].spec, z);
        int64_t got;
        ck_assert_int_eq(tm_sched_next(&s, cases[i].from, &got), 0);
        ck_assert_msg(got == cases[i].next, "'%s' next after %s: %s, "
                      "expected %s", cases[i].spec, show(cases[i].from),
                      show(got), show(cases[i].next));
        ck_assert_int_eq(tm_sched_prev(&s, cases[i].from, &got), 0);
        ck_assert_msg(got == cases[i].prev, "'%s' prev at %s: %s, "
                      "expected %s", cases[i].spec, show(cases[i].from),
                      show(got), show(cases[i].prev));
    }
    tm_tz_free(z);
}
END_TEST

START_TEST(test_range_limits)
{
    struct tm_tz *z = zone("UTC");
    struct tm_sched_spec s = cron_spec("0 0 1 1 *", z);
    int64_t got;
    ck_assert_int_eq(tm_sched_next(&s, utc(9999, 6, 1, 0, 0), &got), -1);
    ck_assert_int_eq(tm_sched_prev(&s, utc(1900, 6, 1, 0, 0), &got), 0);
    ck_assert_int_eq(got, utc(1900, 1, 1, 0, 0));
    ck_assert_int_eq(tm_sched_prev(&s, TM_SCHED_MIN_MS - 1, &got), -1);
    ck_assert_int_eq(tm_sched_next(&s, TM_SCHED_MAX_MS + 1, &got), -1);
    tm_tz_free(z);
}
END_TEST

/* -------------------------------------------------------------- every */

START_TEST(test_every)
{
    struct tm_sched_spec s = { .kind = TM_SCHED_EVERY, .every_ms = 420000 };
    int64_t got;
    ck_assert_int_eq(tm_sched_next(&s, 0, &got), 0);
    ck_assert_int_eq(got, 420000);
    ck_assert_int_eq(tm_sched_next(&s, 419999, &got), 0);
    ck_assert_int_eq(got, 420000);
    ck_assert_int_eq(tm_sched_prev(&s, 420000, &got), 0);
    ck_assert_int_eq(got, 420000);
    ck_assert_int_eq(tm_sched_prev(&s, 839999, &got), 0);
    ck_assert_int_eq(got, 420000);
    ck_assert_int_eq(tm_sched_prev(&s, -1, &got), 0);
    ck_assert_int_eq(got, -420000);
    /* 30 minutes: slots on the UTC half hours, the DST change in Berlin
     * (2026-03-29 01:00Z) notwithstanding */
    s.every_ms = 30 * 60000;
    const int64_t want[] = {
        utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 2, 0),
    };
    expect_slots(&s, "every 30m", utc(2026, 3, 29, 0, 0) + 1, want, 4);
    /* every 1 ms: every instant is a slot */
    s.every_ms = 1;
    ck_assert_int_eq(tm_sched_next(&s, 1234567, &got), 0);
    ck_assert_int_eq(got, 1234568);
    /* k * every for a big k */
    s.every_ms = 86400000;
    ck_assert_int_eq(tm_sched_prev(&s, utc(2026, 3, 29, 13, 7), &got), 0);
    ck_assert_int_eq(got, utc(2026, 3, 29, 0, 0));
}
END_TEST

/* ------------------------------------------------------ Europe/Berlin */

/* 2026-03-29: 02:00 CET (01:00Z) becomes 03:00 CEST. 2026-10-25: 03:00
 * CEST (01:00Z) becomes 02:00 CET: 02:00-02:59 happens twice. */

START_TEST(test_berlin_spring)
{
    struct tm_tz *z = zone("Europe/Berlin");
    struct tm_sched_spec s;
    const int64_t change = utc(2026, 3, 29, 1, 0);

    s = cron_spec("30 2 * * *", z);
    const int64_t a[] = {
        utc(2026, 3, 28, 1, 30),  /* 02:30 CET */
        change,                   /* 02:30 does not occur: at the change */
        utc(2026, 3, 30, 0, 30),  /* 02:30 CEST */
    };
    expect_slots(&s, "30 2 * * *", utc(2026, 3, 27, 12, 0), a, 3);

    s = cron_spec("0 3 * * *", z);
    const int64_t b[] = {
        utc(2026, 3, 28, 2, 0), change, utc(2026, 3, 30, 1, 0),
    };
    expect_slots(&s, "0 3 * * *", utc(2026, 3, 27, 12, 0), b, 3);

    /* hourly: 02:00 is skipped and fires at the change, together with
     * 03:00, which is the change: one slot, not two */
    s = cron_spec("0 * * * *", z);
    const int64_t c[] = {
        utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 0, 0), change,
        utc(2026, 3, 29, 2, 0), utc(2026, 3, 29, 3, 0),
    };
    expect_slots(&s, "0 * * * *", utc(2026, 3, 28, 22, 30), c, 5);

    /* quarter hours: 02:00, 02:15, 02:30, 02:45 and 03:00 are one slot */
    s = cron_spec("*/15 * * * *", z);
    const int64_t d[] = {
        utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 0, 45), change,
        utc(2026, 3, 29, 1, 15), utc(2026, 3, 29, 1, 30),
    };
    expect_slots(&s, "*/15 * * * *", utc(2026, 3, 29, 0, 15), d, 5);

    int64_t got;
    ck_assert_int_eq(tm_sched_next(&s, change - 1, &got), 0);
    ck_assert_int_eq(got, change);
    ck_assert_int_eq(tm_sched_prev(&s, change + 899999, &got), 0);
    ck_assert_int_eq(got, change);
    tm_tz_free(z);
}
END_TEST

START_TEST(test_berlin_autumn)
{
    struct tm_tz *z = zone("Europe/Berlin");
    struct tm_sched_spec s;

    /* 02:30 occurs at 00:30Z (CEST) and 01:30Z (CET): fires once, first */
    s = cron_spec("30 2 * * *", z);
    const int64_t a[] = {
        utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    };
    expect_slots(&s, "30 2 * * *", utc(2026, 10, 23, 12, 0), a, 3);

    s = cron_spec("0 3 * * *", z);
    const int64_t b[] = {
        utc(2026, 10, 24, 1, 0), utc(2026, 10, 25, 2, 0),
        utc(2026, 10, 26, 2, 0),
    };
    expect_slots(&s, "0 3 * * *", utc(2026, 10, 23, 12, 0), b, 3);

    /* hourly: each wall hour once; 02:00 CET (01:00Z) repeats 02:00 */
    s = cron_spec("0 * * * *", z);
    const int64_t c[] = {
        utc(2026, 10, 24, 23, 0), utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 2, 0), utc(2026, 10, 25, 3, 0),
    };
    expect_slots(&s, "0 * * * *", utc(2026, 10, 24, 22, 30), c, 4);

    s = cron_spec("*/15 * * * *", z);
    const int64_t d[] = {
        utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 0, 45),
        utc(2026, 10, 25, 2, 0), utc(2026, 10, 25, 2, 15),
    };
    expect_slots(&s, "*/15 * * * *", utc(2026, 10, 25, 0, 15), d, 4);

    /* every instant of the repeated hour has the last CEST slot before */
    int64_t got;
    ck_assert_int_eq(tm_sched_prev(&s, utc(2026, 10, 25, 1, 59), &got), 0);
    ck_assert_int_eq(got, utc(2026, 10, 25, 0, 45));
    tm_tz_free(z);
}
END_TEST

/* ------------------------------------------------ reference comparison */

/*
 * ref_slots is the slow, independent reference: glibc's localtime_r (TZ
 * set in this single-threaded test) minute by minute over UTC. A wall
 * minute is new when it lies past every wall minute seen so far; the
 * UTC minute that first reaches (or jumps over) matching new wall
 * minutes fires, once. Writes up to max slots, returns their count.
 */
static size_t ref_slots(const struct tm_cron *c, const char *zone_name,
                        int64_t from_ms, int64_t to_ms, int64_t *out,
                        size_t max)
{
    size_t n = 0;
    setenv("TZ", zone_name, 1);
    tzset();
    int64_t seen = INT64_MIN;
    for (int64_t u = from_ms / 1000; u * 1000 <= to_ms; u += 60) {
        time_t tt = (time_t)u;
        struct tm lt;
        REQUIRE(localtime_r(&tt, &lt) != NULL, "localtime_r(%lld)",
                (long long)u);
        int64_t w = (int64_t)timegm(&lt);  /* the wall time, as UTC */
        if (seen == INT64_MIN)
            seen = w - 60;
        bool fire = false;
        for (int64_t m = seen + 60; m <= w && !fire; m += 60) {
            int64_t y, days = tm_floor_div(m, TM_DAY_S);
            int mo, d, sod = (int)(m - days * TM_DAY_S);
            tm_civil_from_days(days, &y, &mo, &d);
            fire = tm_cron_match_day(c, mo, d, tm_weekday(days)) &&
                   (c->hours & (UINT32_C(1) << (sod / 3600))) &&
                   (c->minutes & (UINT64_C(1) << (sod % 3600 / 60)));
        }
        if (w > seen)
            seen = w;
        if (fire && u * 1000 > from_ms) {
            REQUIRE(n < max, "more than %zu slots", max);
            out[n++] = u * 1000;
        }
    }
    unsetenv("TZ");
    tzset();
    return n;
}

/* compare_ref checks tm_sched_next and tm_sched_prev against the
 * reference over (from, to]. */
static void compare_ref(const char *spec, const char *zone_name,
                        int64_t from, int64_t to)
{
    size_t max = (size_t)((to - from) / 60000) + 2;
    int64_t *ref = tm_calloc(max, sizeof *ref);
    struct tm_tz *z = zone(zone_name);
    struct tm_sched_spec s = cron_spec(spec, z);
    size_t n = ref_slots(&s.cron, zone_name, from, to, ref, max);
    ck_assert_msg(n > 0, "%s in %s: no reference slot", spec, zone_name);
    int64_t t = from, got, prev = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        REQUIRE(tm_sched_next(&s, t, &got) == 0, "no slot after %s",
                show(t));
        REQUIRE(got == ref[i], "'%s' in %s: slot %zu after %s is %s, "
                "the reference says %s", spec, zone_name, i, show(t),
                show(got), show(ref[i]));
        REQUIRE(tm_sched_prev(&s, got, &prev) == 0 && prev == got,
                "'%s' in %s: prev(%s) = %s", spec, zone_name, show(got),
                show(prev));
        if (i > 0) {
            REQUIRE(tm_sched_prev(&s, got - 1, &prev) == 0 &&
                    prev == ref[i - 1], "'%s' in %s: prev(%s - 1ms) "
                    "= %s, expected %s", spec, zone_name, show(got),
                    show(prev), show(ref[i - 1]));
        }
        t = got;
    }
    ck_assert_int_eq(tm_sched_next(&s, t, &got), 0);
    ck_assert_msg(got > to, "'%s' in %s: extra slot %s", spec, zone_name,
                  show(got));
    tm_tz_free(z);
    tm_free(ref);
}

struct ref_case {
    const char *spec;
    const char *zone;
    int y0, m0, d0, y1, m1, d1;
};

static const struct ref_case ref_cases[] = {
    /* whole years, both changes */
    { "*/15 * * * *", "Europe/Berlin", 2026, 1, 1, 2027, 1, 1 },
    { "30 2 * * *", "Europe/Berlin", 2026, 1, 1, 2027, 1, 1 },
    { "0 * * * *", "Europe/Berlin", 2026, 1, 1, 2027, 1, 1 },
    { "0 3 * * *", "Europe/Berlin", 2026, 1, 1, 2027, 1, 1 },
    { "5 2 * 3,10 sun", "Europe/Berlin", 2026, 1, 1, 2027, 1, 1 },
    { "*/20 1-3 * * *", "America/New_York", 2026, 1, 1, 2027, 1, 1 },
    { "30 2 * * *", "America/New_York", 2026, 1, 1, 2027, 1, 1 },
    { "*/15 * * * *", "Australia/Lord_Howe", 2026, 1, 1, 2027, 1, 1 },
    { "45 1,2 * * *", "Australia/Lord_Howe", 2026, 1, 1, 2027, 1, 1 },
    /* every minute around the changes */
    { "* * * * *", "Europe/Berlin", 2026, 3, 28, 2026, 3, 30 },
    { "* * * * *", "Europe/Berlin", 2026, 10, 24, 2026, 10, 26 },
    { "* * * * *", "Australia/Lord_Howe", 2026, 4, 4, 2026, 4, 6 },
    { "* * * * *", "Australia/Lord_Howe", 2026, 10, 3, 2026, 10, 5 },
    /* the far future: only the TZif footer's rule applies */
    { "*/15 * * * *", "Europe/Berlin", 2100, 1, 1, 2101, 1, 1 },
    { "30 2 * * *", "America/New_York", 2100, 1, 1, 2101, 1, 1 },
    /* a zone without DST, and one that dropped it */
    { "0 9 * * mon-fri", "Asia/Tokyo", 2026, 1, 1, 2027, 1, 1 },
    { "*/30 * * * *", "Europe/Moscow", 2011, 3, 20, 2011, 4, 1 },
    { "*/30 * * * *", "Europe/Moscow", 2014, 10, 20, 2014, 11, 1 },
};

START_TEST(test_reference)
{
    const struct ref_case *r = &ref_cases[_i];
    compare_ref(r->spec, r->zone, utc(r->y0, r->m0, r->d0, 0, 0),
                utc(r->y1, r->m1, r->d1, 0, 0));
}
END_TEST

/* Lord Howe moves its clocks by 30 minutes: 2026-10-04 02:00 (+10:30,
 * 15:30Z the day before) becomes 02:30 (+11). */
START_TEST(test_lord_howe)
{
    struct tm_tz *z = zone("Australia/Lord_Howe");
    struct tm_sched_spec s = cron_spec("*/15 * * * *", z);
    const int64_t change = utc(2026, 10, 3, 15, 30);
    const int64_t want[] = {
        utc(2026, 10, 3, 15, 15),  /* 01:45 +10:30 */
        change,                    /* 02:00, 02:15 skipped; 02:30 */
        utc(2026, 10, 3, 15, 45),  /* 02:45 +11 */
    };
    expect_slots(&s, "Lord Howe spring", utc(2026, 10, 3, 15, 0), want, 3);
    ck_assert_int_eq(tm_tz_offset(z, change / 1000 - 1), 37800);
    ck_assert_int_eq(tm_tz_offset(z, change / 1000), 39600);
    tm_tz_free(z);
}
END_TEST

/* -------------------------------------------------------------- zones */

START_TEST(test_tz_offsets)
{
    struct tm_tz *z = zone("Europe/Berlin");
    ck_assert_str_eq(tm_tz_name(z), "Europe/Berlin");
    ck_assert_int_eq(tm_tz_offset(z, utc(2026, 3, 29, 1, 0) / 1000 - 1),
                     3600);
    ck_assert_int_eq(tm_tz_offset(z, utc(2026, 3, 29, 1, 0) / 1000), 7200);
    ck_assert_int_eq(tm_tz_next_change(z, utc(2026, 1, 1, 0, 0) / 1000),
                     utc(2026, 3, 29, 1, 0) / 1000);
    /* 2100 (the footer): DST from March 28 to October 31 */
    ck_assert_int_eq(tm_tz_offset(z, utc(2100, 3, 28, 1, 0) / 1000 - 1),
                     3600);
    ck_assert_int_eq(tm_tz_offset(z, utc(2100, 3, 28, 1, 0) / 1000), 7200);
    ck_assert_int_eq(tm_tz_next_change(z, utc(2100, 3, 28, 1, 0) / 1000),
                     utc(2100, 10, 31, 1, 0) / 1000);
    ck_assert_int_eq(tm_tz_offset(z, utc(2100, 10, 31, 1, 0) / 1000), 3600);
    /* 1900: before the first transition, local mean time */
    ck_assert_int_eq(tm_tz_offset(z, utc(1880, 1, 1, 0, 0) / 1000), 3208);
    tm_tz_free(z);

    z = zone("UTC");
    ck_assert_int_eq(tm_tz_offset(z, 0), 0);
    ck_assert(tm_tz_next_change(z, 0) == INT64_MAX);
    tm_tz_free(z);

    /* southern hemisphere far ahead: DST across the new year */
    z = zone("Australia/Lord_Howe");
    ck_assert_int_eq(tm_tz_offset(z, utc(2100, 1, 15, 0, 0) / 1000), 39600);
    ck_assert_int_eq(tm_tz_offset(z, utc(2100, 7, 15, 0, 0) / 1000), 37800);
    tm_tz_free(z);
}
END_TEST

/* read_zone returns the bytes of a zone file (the caller frees). */
static unsigned char *read_zone(const char *name, size_t *len)
{
    char path[512];
    tm_snprintf(path, sizeof path, "%s/%s", TM_TZ_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    unsigned char *buf = tm_malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

START_TEST(test_tz_errors)
{
    char err[256];
    ck_assert_ptr_null(tm_tz_load("Mars/Olympus_Mons", err, sizeof err));
    ck_assert_msg(strstr(err, "unknown time zone 'Mars/Olympus_Mons'") !=
                  NULL, "%s", err);
    ck_assert_ptr_null(tm_tz_load("../../etc/passwd", err, sizeof err));
    ck_assert_msg(strstr(err, "invalid time zone name") != NULL, "%s", err);
    ck_assert_ptr_null(tm_tz_load("Europe/../../etc/passwd", err,
                                  sizeof err));
    ck_assert_msg(strstr(err, "invalid time zone name") != NULL, "%s", err);
    ck_assert_ptr_null(tm_tz_load("Europe", err, sizeof err));
    ck_assert_msg(strstr(err, "unknown time zone 'Europe'") != NULL, "%s",
                  err);
    ck_assert_ptr_null(tm_tz_load("", err, sizeof err));

    size_t len;
    unsigned char *data = read_zone("Europe/Berlin", &len);
    struct tm_tz *z = tm_tz_parse("x", data, len, err, sizeof err);
    ck_assert_ptr_nonnull(z);
    tm_tz_free(z);
    /* every truncation is refused, never read past */
    for (size_t cut = 0; cut < len; cut++) {
        z = tm_tz_parse("x", data, cut, err, sizeof err);
        ck_assert_msg(z == NULL, "parsed %zu of %zu bytes", cut, len);
    }
    /* any single damaged byte is refused or read within bounds, and a
     * zone that still parses answers sane offsets */
    for (size_t i = 0; i < len; i++) {
        unsigned char keep = data[i];
        for (int flip = 1; flip < 256; flip <<= 2) {
            data[i] = (unsigned char)(keep ^ flip);
            z = tm_tz_parse("x", data, len, err, sizeof err);
            if (z != NULL) {
                int32_t lo, hi, off;
                tm_tz_offset_bounds(z, &lo, &hi);
                for (int64_t u = -4000000000LL; u < 8000000000LL;
                     u += 500000000) {
                    off = tm_tz_offset(z, u);
                    REQUIRE(off >= lo && off <= hi, "byte %zu: offset %d",
                            i, (int)off);
                    REQUIRE(tm_tz_next_change(z, u) > u, "byte %zu", i);
                }
            }
            tm_tz_free(z);
        }
        data[i] = keep;
    }
    /* a version 1 file */
    data[4] = 0;
    ck_assert_ptr_null(tm_tz_parse("x", data, len, err, sizeof err));
    ck_assert_msg(strstr(err, "version 1") != NULL, "%s", err);
    data[4] = '2';
    /* a footer that is not a POSIX TZ rule */
    ck_assert(data[len - 1] == '\n');
    data[len - 2] = '!';
    ck_assert_ptr_null(tm_tz_parse("x", data, len, err, sizeof err));
    ck_assert_msg(strstr(err, "POSIX TZ") != NULL, "%s", err);
    memcpy(data, "TZjf", 4);
    ck_assert_ptr_null(tm_tz_parse("x", data, len, err, sizeof err));
    ck_assert_msg(strstr(err, "not a TZif file") != NULL, "%s", err);
    tm_free(data);
}
END_TEST

/* -------------------------------------------------------------- clock */

static int64_t fixed_clock(void)
{
    return 1774746000000LL; /* 2026-03-29T01:00:00Z */
}

START_TEST(test_clock)
{
    int64_t before = tm_wall_ms();
    int64_t now = tm_sched_now_ms();
    ck_assert(now >= before && now <= tm_wall_ms());
    ck_assert_ptr_null(tm_sched_set_clock(fixed_clock));
    ck_assert_int_eq(tm_sched_now_ms(), utc(2026, 3, 29, 1, 0));
    /* a schedule decision driven by the replaced clock */
    struct tm_tz *z = zone("Europe/Berlin");
    struct tm_sched_spec s = cron_spec("30 2 * * *", z);
    int64_t slot;
    ck_assert_int_eq(tm_sched_prev(&s, tm_sched_now_ms(), &slot), 0);
    ck_assert_int_eq(slot, utc(2026, 3, 29, 1, 0));
    tm_tz_free(z);
    ck_assert_ptr_eq(tm_sched_set_clock(NULL), fixed_clock);
    before = tm_wall_ms();
    now = tm_sched_now_ms();
    ck_assert(now >= before && now <= tm_wall_ms());
}
END_TEST

/* -------------------------------------------------------------- civil */

START_TEST(test_civil)
{
    int64_t y;
    int m, d;
    ck_assert_int_eq(tm_days_from_civil(1970, 1, 1), 0);
    ck_assert_int_eq(tm_weekday(0), 4);
    ck_assert_int_eq(tm_weekday(-1), 3);
    ck_assert_int_eq(tm_days_from_civil(2000, 3, 1), 11017);
    for (int64_t days = -800000; days < 800000; days += 997) {
        tm_civil_from_days(days, &y, &m, &d);
        ck_assert_int_eq(tm_days_from_civil(y, m, d), days);
    }
    ck_assert_int_eq(tm_month_days(2100, 2), 28);
    ck_assert_int_eq(tm_month_days(2000, 2), 29);
    ck_assert_int_eq(tm_floor_div(-1, 60), -1);
    ck_assert_int_eq(tm_floor_div(-60, 60), -1);
}
END_TEST

/* --------------------------------------------------------------- main */

static Suite *schedule_suite(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("cron");
    tcase_add_loop_test(tc, test_cron_parse_ok, 0,
                        (int)(sizeof cron_oks / sizeof cron_oks[0]));
    tcase_add_loop_test(tc, test_cron_parse_bad, 0,
                        (int)(sizeof cron_bads / sizeof cron_bads[0]));
    tcase_add_test(tc, test_cron_day_rule);
    tcase_add_test(tc, test_civil);
    suite_add_tcase(s, tc);

    tc = tcase_create("slots");
    tcase_add_test(tc, test_utc_next_prev);
    tcase_add_test(tc, test_range_limits);
    tcase_add_test(tc, test_every);
    tcase_add_test(tc, test_berlin_spring);
    tcase_add_test(tc, test_berlin_autumn);
    tcase_add_test(tc, test_lord_howe);
    tcase_add_test(tc, test_clock);
    suite_add_tcase(s, tc);

    tc = tcase_create("zones");
    tcase_add_test(tc, test_tz_offsets);
    tcase_add_test(tc, test_tz_errors);
    suite_add_tcase(s, tc);

    /* a year of minutes per case: generous for a loaded sanitizer run */
    tc = tcase_create("reference");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_reference, 0,
                        (int)(sizeof ref_cases / sizeof ref_cases[0]));
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(schedule_suite)
