/* test_util.c - unit tests of util.c's clocks and timed waits. */
#include <check.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

#include "unit_main.h"

/*
 * A clock step, seen from the code under test: this definition of
 * clock_gettime(3) replaces the C library's for the whole test program
 * and adds realtime_skew_s to CLOCK_REALTIME. A skew of +1 h looks, to a
 * caller that computes a CLOCK_REALTIME deadline, exactly like the wall
 * clock being set back by an hour just after it read the time: its wait
 * would last an hour more. Monotonic clocks are untouched.
 */
static atomic_long realtime_skew_s;

int clock_gettime(clockid_t clk, struct timespec *ts)
{
    long rc = syscall(SYS_clock_gettime, clk, ts);
    if (rc == 0 && clk == CLOCK_REALTIME)
        ts->tv_sec += (time_t)atomic_load(&realtime_skew_s);
    return (int)rc;
}

/* ---- tm_cond_wait_ns ---- */

struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t wait_ns;
    atomic_int done;
};

static void *wait_once(void *arg)
{
    struct waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    tm_cond_wait_ns(&w->cv, &w->mu, w->wait_ns);
    pthread_mutex_unlock(&w->mu);
    atomic_store(&w->done, 1);
    return NULL;
}

/* waited_ms runs one 200 ms tm_cond_wait_ns on a condition made by init
 * (nobody signals it) in a thread and returns how long it took, or -1
 * when it had not returned after 10 s. */
static int64_t waited_ms(void (*init)(pthread_cond_t *))
{
    static struct waiter w; /* outlives a stuck thread */
    pthread_mutex_init(&w.mu, NULL);
    init(&w.cv);
    w.wait_ns = 200 * 1000000LL;
    atomic_store(&w.done, 0);
    int64_t t0 = tm_now_ms();
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_once, &w), 0);
    while (!atomic_load(&w.done) && tm_now_ms() - t0 < 10000)
        tm_sleep_ms(10);
    if (!atomic_load(&w.done)) {
        pthread_detach(th);
        return -1;
    }
    pthread_join(th, NULL);
    return tm_now_ms() - t0;
}

static void init_default(pthread_cond_t *cv)
{
    pthread_cond_init(cv, NULL);
}

static void init_tm(pthread_cond_t *cv)
{
    tm_cond_init(cv);
}

START_TEST(test_cond_wait_ignores_clock_steps)
{
    /* the wall clock goes back an hour: a 200 ms wait stays 200 ms,
     * whichever way the condition was initialised */
    atomic_store(&realtime_skew_s, 3600);
    int64_t a = waited_ms(init_tm);
    int64_t b = waited_ms(init_default);
    atomic_store(&realtime_skew_s, 0);
    ck_assert_msg(a >= 0 && b >= 0,
                  "a 200 ms wait was stretched by a clock step (%lld, "
                  "%lld ms)", (long long)a, (long long)b);
    ck_assert_int_ge(a, 195);
    ck_assert_int_ge(b, 195);
}
END_TEST

START_TEST(test_cond_wait_times_out)
{
    int64_t a = waited_ms(init_tm);
    ck_assert_int_ge(a, 195);
    ck_assert_int_lt(a, 10000);
}
END_TEST

START_TEST(test_cond_init_is_monotonic)
{
    pthread_cond_t cv;
    tm_cond_init(&cv);
    /* a condition variable made by tm_cond_init measures timed waits on
     * CLOCK_MONOTONIC: an absolute monotonic deadline 100 ms ahead is
     * reached in about 100 ms */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int64_t t0 = tm_now_ms();
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (rc == 0)
        rc = pthread_cond_timedwait(&cv, &mu, &ts);
    pthread_mutex_unlock(&mu);
    int64_t took = tm_now_ms() - t0;
    pthread_cond_destroy(&cv);
    ck_assert_int_ge(took, 95);
    ck_assert_int_lt(took, 5000);
}
END_TEST

/* A version 4 UUID: 8-4-4-4-12 lowercase hex, version nibble 4, variant
 * 10xx; two in a row differ; a short buffer gets a truncated string. */
START_TEST(test_uuid4)
{
    char a[37], b[37], small[9];
    tm_uuid4(a, sizeof a);
    tm_uuid4(b, sizeof b);
    ck_assert_uint_eq(strlen(a), 36);
    for (size_t i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            ck_assert_int_eq(a[i], '-');
        else
            ck_assert_msg(strchr("0123456789abcdef", a[i]) != NULL, "%s", a);
    }
    ck_assert_int_eq(a[14], '4');
    ck_assert_msg(strchr("89ab", a[19]) != NULL, "%s", a);
    ck_assert_str_ne(a, b);
    tm_uuid4(small, sizeof small);
    ck_assert_uint_eq(strlen(small), 8);
}
END_TEST

START_TEST(test_sleep_ms)
{
    atomic_store(&realtime_skew_s, 3600);
    int64_t t0 = tm_now_ms();
    tm_sleep_ms(100);
    int64_t took = tm_now_ms() - t0;
    atomic_store(&realtime_skew_s, 0);
    ck_assert_int_ge(took, 100);
    ck_assert_int_lt(took, 5000);
    tm_sleep_ms(0);
    tm_sleep_ms(-5);
}
END_TEST

START_TEST(test_backoff)
{
    /* first failure: the least; then doubling; never past the most */
    ck_assert_int_eq(tm_backoff_next(0, 200, 5000), 200);
    ck_assert_int_eq(tm_backoff_next(200, 200, 5000), 400);
    ck_assert_int_eq(tm_backoff_next(2500, 200, 5000), 5000);
    ck_assert_int_eq(tm_backoff_next(2501, 200, 5000), 5000);
    ck_assert_int_eq(tm_backoff_next(5000, 200, 5000), 5000);
    ck_assert_int_eq(tm_backoff_next(INT64_MAX / 2 + 1, 1, INT64_MAX),
                     INT64_MAX);
    for (int i = 0; i < 1000; i++) {
        int64_t j = tm_backoff_jitter(1000);
        ck_assert_int_ge(j, 1000);
        ck_assert_int_le(j, 1500);
    }
    ck_assert_int_eq(tm_backoff_jitter(0), 0);
}
END_TEST

static Suite *util_suite(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("clocks");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cond_wait_ignores_clock_steps);
    tcase_add_test(tc, test_cond_wait_times_out);
    tcase_add_test(tc, test_cond_init_is_monotonic);
    tcase_add_test(tc, test_sleep_ms);
    tcase_add_test(tc, test_uuid4);
    tcase_add_test(tc, test_backoff);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(util_suite)
