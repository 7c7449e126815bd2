/* test_log.c - the log gate (struct tm_log_gate): bursts per window, the
 * count of lines held back, reset. */
#include <check.h>

#include "util/log.h"

#include "unit_main.h"

/* burst lines pass per window; the rest are counted, and the first line
 * of the next window gets their number, once */
START_TEST(gate_burst_per_window)
{
    struct tm_log_gate g = TM_LOG_GATE(3, 1000);
    unsigned long held = 99;
    int64_t t = 5000;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(tm_log_gate_pass(&g, t + i, &held), 1);
        ck_assert_uint_eq(held, 0);
    }
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(tm_log_gate_pass(&g, t + 500 + i, &held), 0);
    /* the window is 1000 ms from its first line: 999 ms later still in */
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 999, &held), 0);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 1000, &held), 1);
    ck_assert_uint_eq(held, 6);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 1001, &held), 1);
    ck_assert_uint_eq(held, 0);
    /* a quiet spell: the next line opens a window of its own */
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 1002, NULL), 1);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 1003, NULL), 0);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 90000, &held), 1);
    ck_assert_uint_eq(held, 1);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 90001, &held), 1);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 90002, &held), 1);
    ck_assert_int_eq(tm_log_gate_pass(&g, t + 90003, &held), 0);
}
END_TEST

/* one line per window, the first ever at any time (0 included) */
START_TEST(gate_one_per_window)
{
    struct tm_log_gate g;
    unsigned long held = 99;
    tm_log_gate_init(&g, 1, 10000);
    ck_assert_int_eq(tm_log_gate_pass(&g, 0, &held), 1);
    ck_assert_uint_eq(held, 0);
    for (int i = 1; i <= 4; i++)
        ck_assert_int_eq(tm_log_gate_pass(&g, i * 2000, &held), 0);
    ck_assert_int_eq(tm_log_gate_pass(&g, 10000, &held), 1);
    ck_assert_uint_eq(held, 4);
}
END_TEST

/* reset lets the next line pass at once and keeps the count for it */
START_TEST(gate_reset)
{
    struct tm_log_gate g = TM_LOG_GATE(1, 600000);
    unsigned long held = 99;
    ck_assert_int_eq(tm_log_gate_pass(&g, 100, &held), 1);
    ck_assert_int_eq(tm_log_gate_pass(&g, 200, &held), 0);
    ck_assert_int_eq(tm_log_gate_pass(&g, 300, &held), 0);
    tm_log_gate_reset(&g);
    ck_assert_int_eq(tm_log_gate_pass(&g, 400, &held), 1);
    ck_assert_uint_eq(held, 2);
    /* the window opened at the line after the reset */
    ck_assert_int_eq(tm_log_gate_pass(&g, 600399, &held), 0);
    ck_assert_int_eq(tm_log_gate_pass(&g, 600400, &held), 1);
    ck_assert_uint_eq(held, 1);
}
END_TEST

START_TEST(repeat_new_reason_only)
{
    struct tm_log_repeat r = { 0 };
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, "refused"),
                     TM_LOG_WARNING);
    /* the same reason again: debug only */
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, "refused"),
                     TM_LOG_DEBUG);
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_ERR, "refused"),
                     TM_LOG_DEBUG);
    /* another reason is news; back to the first one is news too */
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, "timed out"),
                     TM_LOG_WARNING);
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, "refused"),
                     TM_LOG_WARNING);
    /* once the condition ended, the same reason is news again */
    tm_log_repeat_reset(&r);
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, "refused"),
                     TM_LOG_WARNING);
    ck_assert_int_eq(tm_log_repeat_level(&r, TM_LOG_WARNING, ""),
                     TM_LOG_WARNING);
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("gate");
    tcase_add_test(tc, gate_burst_per_window);
    tcase_add_test(tc, gate_one_per_window);
    tcase_add_test(tc, gate_reset);
    tcase_add_test(tc, repeat_new_reason_only);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(log_suite)
