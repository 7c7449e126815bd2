/* test_config_when.c - the times of `emit --delay` and `emit --at`
 * (src/config/when.c). */
#include "config/config.h"

#include <stdlib.h>

#include <check.h>

#include "unit_main.h"

/* RFC 3339 with Z, offsets, fractions; epoch ms as digits. */
START_TEST(at_accepts_rfc3339_and_epoch_ms)
{
    int64_t ms;
    ck_assert_int_eq(tm_parse_at("2026-12-01T03:00:00Z", &ms), 0);
    ck_assert_int_eq(ms, 1796094000000LL);
    ck_assert_int_eq(tm_parse_at("2026-12-01T04:00:00+01:00", &ms), 0);
    ck_assert_int_eq(ms, 1796094000000LL);
    ck_assert_int_eq(tm_parse_at("2026-11-30T21:30:00-05:30", &ms), 0);
    ck_assert_int_eq(ms, 1796094000000LL);
    ck_assert_int_eq(tm_parse_at("2026-12-01t03:00:00.5z", &ms), 0);
    ck_assert_int_eq(ms, 1796094000500LL);
    ck_assert_int_eq(tm_parse_at("2026-12-01 03:00:00.123456Z", &ms),
                     0);
    ck_assert_int_eq(ms, 1796094000123LL);
    ck_assert_int_eq(tm_parse_at("2024-02-29T00:00:00Z", &ms), 0);
    ck_assert_int_eq(ms, 1709164800000LL);
    ck_assert_int_eq(tm_parse_at("1796094000000", &ms), 0);
    ck_assert_int_eq(ms, 1796094000000LL);
}
END_TEST

/* No zone, bad dates, leap seconds, junk, a cut-off text: refused. */
START_TEST(at_refuses_what_is_not_a_time)
{
    static const char *const bad[] = {
        "", "2026-12-01T03:00:00", "2026-12-01", "2026-13-01T00:00:00Z",
        "2025-02-29T00:00:00Z", "2026-12-01T24:00:00Z",
        "2026-12-31T23:59:60Z", "2026-12-01T03:00:00+1:00",
        "2026-12-01T03:00:00Zx", "2026-12-01T03:00:00.Z", "-5", "12s",
        "2026-12-01T03:00", "2026-", "2026-12-01T03:00:00+24:00",
    };
    int64_t ms;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tm_parse_at(bad[i], &ms) == -1, "accepted '%s'",
                      bad[i]);
}
END_TEST

START_TEST(delay_takes_config_durations)
{
    int64_t ms;
    ck_assert_int_eq(tm_parse_delay("3s", &ms), 0);
    ck_assert_int_eq(ms, 3000);
    ck_assert_int_eq(tm_parse_delay("250ms", &ms), 0);
    ck_assert_int_eq(ms, 250);
    ck_assert_int_eq(tm_parse_delay("1h", &ms), 0);
    ck_assert_int_eq(ms, 3600000);
    ck_assert_int_eq(tm_parse_delay("soon", &ms), -1);
    ck_assert_int_eq(tm_parse_delay("", &ms), -1);
}
END_TEST

static Suite *cli_when_suite(void)
{
    Suite *s = suite_create("cli_when");
    TCase *tc = tcase_create("when");
    tcase_add_test(tc, at_accepts_rfc3339_and_epoch_ms);
    tcase_add_test(tc, at_refuses_what_is_not_a_time);
    tcase_add_test(tc, delay_takes_config_durations);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(cli_when_suite)
