/* test_history.c - the in-memory history ring (task/history.c): buckets
 * per minute and per hour, wrap-around, ranges, what a flush sent, and two
 * writers at once. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "task/history.h"
#include "util/util.h"

#include "unit_main.h"

#define MIN 60000LL
/* a minute well after the epoch, at the start of an hour */
#define T0 (29000000LL * MIN)

static const unsigned one_success[TM_HK_N] = {1, 0, 0, 0};

static struct tm_hist *fresh(struct tm_hist_store *s)
{
    tm_hist_store_init(s);
    return tm_hist_get(s, "t");
}

START_TEST(buckets_by_minute_and_hour)
{
    struct tm_hist_store s;
    struct tm_hist *h = fresh(&s);
    ck_assert_ptr_eq(tm_hist_get(&s, "t"), h);
    ck_assert_ptr_null(tm_hist_find(&s, "other"));
    /* an idle history has no ring, and reads as zeros */
    ck_assert_ptr_null(atomic_load(&h->ring));
    uint64_t out[3][TM_HK_N];
    memset(out, 0, sizeof out);
    tm_hist_read(h, 0, T0 / MIN, 3, out);
    ck_assert_uint_eq(out[0][0], 0);
    /* 2 successes in the first minute (at its start and its end), a
     * failure, a retry and a dead letter in the third */
    tm_hist_note(h, T0, one_success);
    tm_hist_note(h, T0 + MIN - 1, one_success);
    unsigned mixed[TM_HK_N] = {0, 1, 1, 1};
    tm_hist_note(h, T0 + 2 * MIN + 5, mixed);
    memset(out, 0, sizeof out);
    tm_hist_read(h, 0, T0 / MIN, 3, out);
    ck_assert_uint_eq(out[0][TM_HK_SUCCESS], 2);
    ck_assert_uint_eq(out[1][TM_HK_SUCCESS], 0);
    ck_assert_uint_eq(out[2][TM_HK_FAILED], 1);
    ck_assert_uint_eq(out[2][TM_HK_DEAD], 1);
    ck_assert_uint_eq(out[2][TM_HK_RETRIED], 1);
    /* the hour holds the sum */
    uint64_t hour[1][TM_HK_N] = {{0}};
    tm_hist_read(h, 1, T0 / MIN / 60, 1, hour);
    ck_assert_uint_eq(hour[0][TM_HK_SUCCESS], 2);
    ck_assert_uint_eq(hour[0][TM_HK_FAILED], 1);
    /* a read adds to what out holds */
    tm_hist_read(h, 1, T0 / MIN / 60, 1, hour);
    ck_assert_uint_eq(hour[0][TM_HK_SUCCESS], 4);
    tm_hist_store_free(&s);
}
END_TEST

START_TEST(ring_wraps_after_a_day_and_a_week)
{
    struct tm_hist_store s;
    struct tm_hist *h = fresh(&s);
    tm_hist_note(h, T0, one_success);
    /* a day later the same slot holds the new minute only */
    int64_t day = TM_HIST_MINUTES * MIN;
    tm_hist_note(h, T0 + day, one_success);
    tm_hist_note(h, T0 + day, one_success);
    uint64_t out[1][TM_HK_N] = {{0}};
    tm_hist_read(h, 0, T0 / MIN, 1, out);
    ck_assert_uint_eq(out[0][0], 0);
    tm_hist_read(h, 0, (T0 + day) / MIN, 1, out);
    ck_assert_uint_eq(out[0][0], 2);
    /* the hours keep a week: the first hour's count is still there */
    uint64_t hours[25][TM_HK_N];
    memset(hours, 0, sizeof hours);
    tm_hist_read(h, 1, T0 / MIN / 60, 25, hours);
    ck_assert_uint_eq(hours[0][0], 1);
    ck_assert_uint_eq(hours[24][0], 2);
    /* a week later the first hour's slot is taken over */
    int64_t week = TM_HIST_HOURS * 60 * MIN;
    tm_hist_note(h, T0 + week, one_success);
    memset(hours, 0, sizeof hours);
    tm_hist_read(h, 1, T0 / MIN / 60, 1, hours);
    ck_assert_uint_eq(hours[0][0], 0);
    /* a report older than what its slot holds is dropped */
    tm_hist_note(h, T0, one_success);
    memset(hours, 0, sizeof hours);
    tm_hist_read(h, 1, (T0 + week) / MIN / 60, 1, hours);
    ck_assert_uint_eq(hours[0][0], 1);
    tm_hist_store_free(&s);
}
END_TEST

START_TEST(range_of_a_full_day)
{
    struct tm_hist_store s;
    struct tm_hist *h = fresh(&s);
    /* one success each minute for 1500 minutes: the last 1440 are kept */
    for (int64_t m = 0; m < 1500; m++)
        tm_hist_note(h, T0 + m * MIN + 30000, one_success);
    uint64_t (*out)[TM_HK_N] = tm_calloc(1500, sizeof *out);
    tm_hist_read(h, 0, T0 / MIN, 1500, out);
    uint64_t sum = 0;
    for (int i = 0; i < 1500; i++) {
        ck_assert_uint_eq(out[i][0], i < 60 ? 0 : 1);
        sum += out[i][0];
    }
    ck_assert_uint_eq(sum, TM_HIST_MINUTES);
    tm_free(out);
    tm_hist_store_free(&s);
}
END_TEST

START_TEST(unsent_is_what_a_flush_did_not_send)
{
    struct tm_hist_store s;
    struct tm_hist *h = fresh(&s);
    int64_t m = T0 / MIN;
    unsigned d[TM_HK_N], cur[TM_HK_N];
    for (int i = 0; i < 5; i++)
        tm_hist_note(h, T0, one_success);
    tm_hist_unsent(h, m, d, cur);
    ck_assert_uint_eq(d[0], 5);
    ck_assert_uint_eq(cur[0], 5);
    tm_hist_sent(h, m, cur);
    tm_hist_unsent(h, m, d, NULL);
    ck_assert_uint_eq(d[0], 0);
    /* counted after the flush: unsent again */
    tm_hist_note(h, T0 + 1, one_success);
    tm_hist_unsent(h, m, d, cur);
    ck_assert_uint_eq(d[0], 1);
    ck_assert_uint_eq(cur[0], 6);
    /* another minute in the same shadow slot starts from nothing */
    int64_t later = m + TM_HIST_SHADOW;
    tm_hist_note(h, later * MIN, one_success);
    tm_hist_unsent(h, later, d, cur);
    ck_assert_uint_eq(d[0], 1);
    tm_hist_sent(h, later, cur);
    tm_hist_unsent(h, later, d, NULL);
    ck_assert_uint_eq(d[0], 0);
    tm_hist_store_free(&s);
}
END_TEST

static void *writer(void *arg)
{
    struct tm_hist *h = arg;
    /* 20000 notes across 40 minutes, slots changing minute as it goes */
    for (int i = 0; i < 20000; i++)
        tm_hist_note(h, T0 + (int64_t)(i / 500) * MIN, one_success);
    return NULL;
}

START_TEST(two_writers_lose_nothing)
{
    struct tm_hist_store s;
    struct tm_hist *h = fresh(&s);
    pthread_t a, b;
    pthread_create(&a, NULL, writer, h);
    pthread_create(&b, NULL, writer, h);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    uint64_t out[40][TM_HK_N];
    memset(out, 0, sizeof out);
    tm_hist_read(h, 0, T0 / MIN, 40, out);
    for (int i = 0; i < 40; i++)
        ck_assert_uint_eq(out[i][0], 1000);
    tm_hist_store_free(&s);
}
END_TEST

static Suite *history_suite(void)
{
    Suite *s = suite_create("history");
    TCase *tc = tcase_create("ring");
    tcase_add_test(tc, buckets_by_minute_and_hour);
    tcase_add_test(tc, ring_wraps_after_a_day_and_a_week);
    tcase_add_test(tc, range_of_a_full_day);
    tcase_add_test(tc, unsent_is_what_a_flush_did_not_send);
    tcase_add_test(tc, two_writers_lose_nothing);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(history_suite)
