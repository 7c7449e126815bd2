/* test_redis.c - unit tests for the Redis adapter's pure parts
 * (src/redis/). */
#include "redis/redis.h"

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "util.h"

/* The retry set is named after the queue, then the group: a hash tag in
 * the queue comes first, so the set shares the queue's cluster slot. */
START_TEST(retry_key_derives_from_the_queue)
{
    char q1[] = "{orders}", g1[] = "workers";
    char q2[] = "taskmill.add", g2[] = "taskmill";
    struct tm_cfg_task t = {.queue = q1, .group = g1};
    char *k = tm_redis_retry_key(&t);
    ck_assert_str_eq(k, "{orders}.retry.workers");
    tm_free(k);
    t.queue = q2;
    t.group = g2;
    k = tm_redis_retry_key(&t);
    ck_assert_str_eq(k, "taskmill.add.retry.taskmill");
    tm_free(k);
}
END_TEST

/* The claim period is a quarter of claim_idle, within 50 ms .. 5 s. */
START_TEST(claim_period_bounds)
{
    struct tm_cfg_task t = {.claim_idle_ms = 60000};
    ck_assert_int_eq(tm_redis_claim_period(&t), 5000);
    t.claim_idle_ms = 2000;
    ck_assert_int_eq(tm_redis_claim_period(&t), 500);
    t.claim_idle_ms = 100;
    ck_assert_int_eq(tm_redis_claim_period(&t), 50);
}
END_TEST

static Suite *redis_suite(void)
{
    Suite *s = suite_create("redis");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, retry_key_derives_from_the_queue);
    tcase_add_test(tc, claim_period_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(redis_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
