/* test_flow.c - rate_limit's token bucket. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "task/flow.h"
#include "util/log.h"

#include "unit_main.h"

static struct tm_cfg_task rate(uint32_t count, int64_t period_ms)
{
    struct tm_cfg_task t;
    memset(&t, 0, sizeof t);
    t.name = (char *)"t";
    t.rate_count = count;
    t.rate_period_ms = period_ms;
    return t;
}

/* The burst is a tenth of a second's worth, at least one token. */
START_TEST(burst_is_a_tenth_of_a_second)
{
    struct tm_cfg_task t = rate(50, 1000);
    ck_assert_uint_eq(tm_flow_burst(&t), 5);
    t = rate(10, 60000);
    ck_assert_uint_eq(tm_flow_burst(&t), 1);
    t = rate(1000000, 1000);
    ck_assert_uint_eq(tm_flow_burst(&t), 100000);
    t = rate(7200, 3600000);
    ck_assert_uint_eq(tm_flow_burst(&t), 1);
}
END_TEST

/* A new bucket is full; an empty one says when its next token comes. */
START_TEST(takes_what_it_has_then_waits)
{
    struct tm_cfg_task t = rate(50, 1000);
    struct tm_bucket b;
    memset(&b, 0, sizeof b);
    int64_t wait = -1;
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 1000, 10, &wait), 5);
    ck_assert_int_eq(wait, 0);
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 1000, 10, &wait), 0);
    ck_assert_int_eq(wait, 20);
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 1010, 10, &wait), 0);
    ck_assert_int_eq(wait, 10);
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 1020, 10, &wait), 1);
    /* wanting nothing takes nothing and waits for nothing */
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 1020, 0, &wait), 0);
    ck_assert_int_eq(wait, 0);
    /* time going back adds nothing */
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 500, 10, &wait), 0);
    ck_assert_int_ge(wait, 1);
}
END_TEST

/* Unused tokens go back, never above the burst. */
START_TEST(gives_back_up_to_the_burst)
{
    struct tm_cfg_task t = rate(50, 1000);
    struct tm_bucket b;
    memset(&b, 0, sizeof b);
    int64_t wait;
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 0, 5, &wait), 5);
    tm_bucket_give(&b, &t, 3);
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 0, 10, &wait), 3);
    tm_bucket_give(&b, &t, 100);
    ck_assert_uint_eq(tm_bucket_take(&b, &t, 0, 10, &wait), 5);
}
END_TEST

/* Taken as fast as it gives, over any window of W ms a bucket gives at
 * most rate * W + burst tokens. */
START_TEST(rate_over_a_window)
{
    struct tm_cfg_task t = rate(50, 1000);
    struct tm_bucket b;
    memset(&b, 0, sizeof b);
    static size_t at[20000];
    size_t total = 0;
    int64_t wait;
    for (int64_t ms = 0; ms < 20000; ms++) {
        at[ms] = tm_bucket_take(&b, &t, ms, 3, &wait);
        total += at[ms];
    }
    ck_assert_uint_le(total, 50 * 20 + 5);
    ck_assert_uint_ge(total, 50 * 20 - 1);
    for (int64_t from = 0; from + 5000 <= 20000; from += 250) {
        size_t n = 0;
        for (int64_t ms = from; ms < from + 5000; ms++)
            n += at[ms];
        ck_assert_uint_le(n, 250 + 5);
    }
}
END_TEST

static Suite *flow_suite(void)
{
    Suite *s = suite_create("flow");
    TCase *tc = tcase_create("bucket");
    tcase_add_test(tc, burst_is_a_tenth_of_a_second);
    tcase_add_test(tc, takes_what_it_has_then_waits);
    tcase_add_test(tc, gives_back_up_to_the_burst);
    tcase_add_test(tc, rate_over_a_window);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tm_log_setup(TM_LOG_ERR, TM_LOG_TEXT);
    return tm_unit_run(flow_suite());
}
