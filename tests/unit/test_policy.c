/* test_policy.c - outcomes, settlement policy, retry delays, batches. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "task/task.h"
#include "util/util.h"

#include "unit_main.h"

static struct tm_cfg_task task_cfg(void)
{
    struct tm_cfg_task t;
    memset(&t, 0, sizeof t);
    t.name = (char *)"t";
    t.on_error = TM_ON_ERROR_REQUEUE;
    t.max_retries = 2;
    t.backoff_ms = 1000;
    t.max_backoff_ms = 300000;
    return t;
}

static enum tm_settle settle_of(enum tm_outcome o, unsigned attempt,
                                const struct tm_cfg_task *t)
{
    struct tm_msg m;
    memset(&m, 0, sizeof m);
    m.outcome = o;
    m.attempt = attempt;
    tm_policy_settle(&m, t);
    return m.settle;
}

START_TEST(success_acks)
{
    struct tm_cfg_task t = task_cfg();
    ck_assert_int_eq(settle_of(TM_OUT_SUCCESS, 1, &t), TM_SETTLE_ACK);
    ck_assert_int_eq(settle_of(TM_OUT_SUCCESS, 9, &t), TM_SETTLE_ACK);
}
END_TEST

START_TEST(reject_and_invalid_dead_letter_at_once)
{
    struct tm_cfg_task t = task_cfg();
    t.max_retries = -1;
    ck_assert_int_eq(settle_of(TM_OUT_REJECTED, 1, &t), TM_SETTLE_DEAD);
    ck_assert_int_eq(settle_of(TM_OUT_INVALID, 1, &t), TM_SETTLE_DEAD);
}
END_TEST

START_TEST(errors_retry_until_max_retries)
{
    struct tm_cfg_task t = task_cfg(); /* max_retries 2: 3 attempts */
    enum tm_outcome fails[] = {TM_OUT_ERROR, TM_OUT_TIMEOUT, TM_OUT_CRASHED};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(settle_of(fails[i], 1, &t), TM_SETTLE_RETRY);
        ck_assert_int_eq(settle_of(fails[i], 2, &t), TM_SETTLE_RETRY);
        ck_assert_int_eq(settle_of(fails[i], 3, &t), TM_SETTLE_DEAD);
    }
}
END_TEST

START_TEST(unlimited_and_zero_retries)
{
    struct tm_cfg_task t = task_cfg();
    t.max_retries = -1;
    ck_assert_int_eq(settle_of(TM_OUT_ERROR, 1000, &t), TM_SETTLE_RETRY);
    t.max_retries = 0;
    ck_assert_int_eq(settle_of(TM_OUT_ERROR, 1, &t), TM_SETTLE_DEAD);
}
END_TEST

/* a delivery runs while the one before it could be retried: with
 * max_retries 2, deliveries 1 to 3 run and 4 (redelivered after its
 * consumer died) does not; without a limit every one runs */
START_TEST(redelivery_past_max_retries_does_not_run)
{
    struct tm_cfg_task t = task_cfg();
    ck_assert_int_eq(tm_policy_may_retry(&t, 2), 1);
    ck_assert_int_eq(tm_policy_may_retry(&t, 3), 0);
    ck_assert_int_eq(tm_policy_may_run(&t, 0), 1);
    ck_assert_int_eq(tm_policy_may_run(&t, 1), 1);
    ck_assert_int_eq(tm_policy_may_run(&t, 3), 1);
    ck_assert_int_eq(tm_policy_may_run(&t, 4), 0);
    t.max_retries = 0;
    ck_assert_int_eq(tm_policy_may_run(&t, 1), 1);
    ck_assert_int_eq(tm_policy_may_run(&t, 2), 0);
    t.max_retries = -1;
    ck_assert_int_eq(tm_policy_may_retry(&t, 4000000000u), 1);
    ck_assert_int_eq(tm_policy_may_run(&t, 4000000000u), 1);
}
END_TEST

START_TEST(on_error_reject_dead_letters)
{
    struct tm_cfg_task t = task_cfg();
    t.on_error = TM_ON_ERROR_REJECT;
    ck_assert_int_eq(settle_of(TM_OUT_ERROR, 1, &t), TM_SETTLE_DEAD);
    ck_assert_int_eq(settle_of(TM_OUT_TIMEOUT, 1, &t), TM_SETTLE_DEAD);
}
END_TEST

START_TEST(abandoned_is_left_alone)
{
    struct tm_cfg_task t = task_cfg();
    ck_assert_int_eq(settle_of(TM_OUT_NONE, 1, &t), TM_SETTLE_NONE);
}
END_TEST

START_TEST(retry_delay_doubles_and_caps)
{
    struct tm_cfg_task t = task_cfg();
    t.backoff_ms = 1000;
    t.max_backoff_ms = 5000;
    ck_assert_int_eq(tm_retry_delay_ms(&t, 1, 0), 1000);
    ck_assert_int_eq(tm_retry_delay_ms(&t, 2, 0), 2000);
    ck_assert_int_eq(tm_retry_delay_ms(&t, 3, 0), 4000);
    ck_assert_int_eq(tm_retry_delay_ms(&t, 4, 0), 5000);
    ck_assert_int_eq(tm_retry_delay_ms(&t, 4000000, 0), 5000);
    /* jitter: at most 20% on top, never below the base */
    ck_assert_int_eq(tm_retry_delay_ms(&t, 1, 0.5), 1100);
    ck_assert_int_le(tm_retry_delay_ms(&t, 1, 0.9999999), 1200);
    ck_assert_int_ge(tm_retry_delay_ms(&t, 1, -1), 1000);
}
END_TEST

START_TEST(policy_delay_within_jitter)
{
    struct tm_cfg_task t = task_cfg();
    t.max_retries = -1;
    for (unsigned a = 1; a < 12; a++) {
        struct tm_msg m;
        memset(&m, 0, sizeof m);
        m.outcome = TM_OUT_ERROR;
        m.attempt = a;
        tm_policy_settle(&m, &t);
        int64_t base = tm_retry_delay_ms(&t, a, 0);
        ck_assert_int_ge(m.retry_delay_ms, base);
        ck_assert_int_le(m.retry_delay_ms, base + base / 5);
    }
}
END_TEST

START_TEST(outcome_labels)
{
    ck_assert_str_eq(tm_outcome_label(TM_OUT_SUCCESS), "success");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_ERROR), "error");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_REJECTED), "rejected");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_TIMEOUT), "timeout");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_CRASHED), "crashed");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_INVALID), "invalid");
    ck_assert_str_eq(tm_outcome_label(TM_OUT_COUNT), "none");
}
END_TEST

static int released;

static void cb_release(struct tm_batch *b)
{
    released++;
    tm_free(b);
}

START_TEST(batch_released_with_last_message)
{
    struct tm_batch *b = tm_batch_new(3);
    b->release = cb_release;
    released = 0;
    tm_msg_set_error(&b->msgs[0], "boom %d", 1);
    ck_assert_str_eq(b->msgs[0].error, "boom 1");
    tm_msg_release(&b->msgs[1]);
    tm_msg_release(&b->msgs[0]);
    ck_assert_int_eq(released, 0);
    tm_msg_release(&b->msgs[2]);
    ck_assert_int_eq(released, 1);
}
END_TEST

START_TEST(utf8_validation)
{
    ck_assert_int_eq(tm_utf8_valid("plain", 5), 1);
    ck_assert_int_eq(tm_utf8_valid("\xc3\xa9t\xc3\xa9", 6), 1);
    ck_assert_int_eq(tm_utf8_valid("\xf0\x9f\x98\x80", 4), 1);
    ck_assert_int_eq(tm_utf8_valid("\xc0\xaf", 2), 0);         /* overlong */
    ck_assert_int_eq(tm_utf8_valid("\xed\xa0\x80", 3), 0);     /* surrogate */
    ck_assert_int_eq(tm_utf8_valid("\xf4\x90\x80\x80", 4), 0); /* > U+10FFFF */
    ck_assert_int_eq(tm_utf8_valid("\xc3", 1), 0);             /* truncated */
    ck_assert_int_eq(tm_utf8_valid("\xff", 1), 0);
    ck_assert_int_eq(tm_utf8_valid("\xe2\x82", 2), 0);
    /* at every offset of longer texts, across the 64-, 16- and
     * eight-byte steps of the ASCII runs */
    static const size_t lens[] = {48, 64, 79, 200};
    char buf[256];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        for (size_t k = 0; k + 1 < n; k++) {
            memset(buf, 'a', sizeof buf);
            buf[k] = (char)0xff;
            ck_assert_msg(tm_utf8_valid(buf, n) == 0, "0xff at %zu", k);
            buf[k] = (char)0x80; /* a continuation byte alone */
            ck_assert_msg(tm_utf8_valid(buf, n) == 0, "0x80 at %zu", k);
            memcpy(buf + k, "\xc3\xa9", 2);
            ck_assert_msg(tm_utf8_valid(buf, n) == 1, "e-acute at %zu", k);
            memset(buf, 'a', sizeof buf);
            buf[k] = (char)0xc3; /* truncated at the end of the text */
            ck_assert_msg(tm_utf8_valid(buf, k + 1) == 0, "cut at %zu", k);
            buf[n] = (char)0xff; /* past the end: not looked at */
            ck_assert_msg(tm_utf8_valid(buf + k + 1, n - k - 1) == 1,
                          "tail from %zu", k + 1);
        }
    }
}
END_TEST

static Suite *policy_suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, success_acks);
    tcase_add_test(tc, reject_and_invalid_dead_letter_at_once);
    tcase_add_test(tc, errors_retry_until_max_retries);
    tcase_add_test(tc, unlimited_and_zero_retries);
    tcase_add_test(tc, redelivery_past_max_retries_does_not_run);
    tcase_add_test(tc, on_error_reject_dead_letters);
    tcase_add_test(tc, abandoned_is_left_alone);
    tcase_add_test(tc, retry_delay_doubles_and_caps);
    tcase_add_test(tc, policy_delay_within_jitter);
    tcase_add_test(tc, outcome_labels);
    tcase_add_test(tc, batch_released_with_last_message);
    tcase_add_test(tc, utf8_validation);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(policy_suite)
