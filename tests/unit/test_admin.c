/* test_admin.c - the admin layer's pure parts: when a message is due,
 * what a body must be, the syntax of dead-letter ids. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "admin/admin.h"

#include "unit_main.h"

/* 2026-12-01T03:00:00Z */
#define NOW_MS 1796094000000LL

START_TEST(due_neither_is_now)
{
    struct tm_admin_err e;
    int64_t due = -1;
    ck_assert_int_eq(tm_admin_due(TM_BROKER_REDIS, NULL, NULL, NOW_MS, 1,
                                  &due, &e), 0);
    ck_assert_int_eq(due, 0);
}
END_TEST

/* struct due_case is one tm_admin_due call and what it must give: due
 * as an offset from NOW_MS (accepted), or the code (refused). */
struct due_case {
    enum tm_broker_kind kind;
    const char *delay, *at;
    int bound;
    enum tm_admin_code code;
    int64_t ahead_ms;
};

static const struct due_case due_cases[] = {
    {TM_BROKER_REDIS, "30s", NULL, 1, TM_ADMIN_OK, 30000},
    {TM_BROKER_AMQP, "250ms", NULL, 1, TM_ADMIN_OK, 250},
    /* a delay of 0 is due now, as a time: the front end decides */
    {TM_BROKER_REDIS, "0s", NULL, 1, TM_ADMIN_OK, 0},
    {TM_BROKER_REDIS, NULL, "2026-12-01T04:00:00Z", 1, TM_ADMIN_OK, 3600000},
    {TM_BROKER_REDIS, NULL, "1796094000250", 1, TM_ADMIN_OK, 250},
    /* a time past is kept as given */
    {TM_BROKER_REDIS, NULL, "2026-12-01T02:00:00Z", 1, TM_ADMIN_OK,
     -3600000},
    /* both: refused before their syntax is read */
    {TM_BROKER_REDIS, "x", "y", 1, TM_ADMIN_E_DUE_BOTH, 0},
    {TM_BROKER_REDIS, "soon", NULL, 1, TM_ADMIN_E_DELAY_SYNTAX, 0},
    /* a time without a zone would depend on the machine's */
    {TM_BROKER_REDIS, NULL, "2026-12-01T03:00:00", 1, TM_ADMIN_E_AT_SYNTAX,
     0},
    /* the bound: 30 days, no more */
    {TM_BROKER_AMQP, "720h", NULL, 1, TM_ADMIN_OK, TM_ADMIN_DELAY_MAX_MS},
    {TM_BROKER_AMQP, "721h", NULL, 1, TM_ADMIN_E_TOO_FAR, 0},
    {TM_BROKER_REDIS, NULL, "2027-01-01T03:00:00Z", 1, TM_ADMIN_E_TOO_FAR, 0},
    /* unbounded (the CLI on Redis): any time ahead */
    {TM_BROKER_REDIS, NULL, "2027-01-01T03:00:00Z", 0, TM_ADMIN_OK,
     31LL * 86400 * 1000},
};

START_TEST(due_cases_hold)
{
    for (size_t i = 0; i < sizeof due_cases / sizeof *due_cases; i++) {
        const struct due_case *c = &due_cases[i];
        struct tm_admin_err e = {.code = TM_ADMIN_OK};
        int64_t due = -1;
        int rc = tm_admin_due(c->kind, c->delay, c->at, NOW_MS, c->bound,
                              &due, &e);
        ck_assert_msg(rc == (c->code == TM_ADMIN_OK ? 0 : -1),
                      "case %zu: rc %d", i, rc);
        if (c->code == TM_ADMIN_OK) {
            ck_assert_msg(due == NOW_MS + c->ahead_ms, "case %zu: due %lld",
                          i, (long long)due);
            continue;
        }
        ck_assert_msg(e.code == c->code, "case %zu: code %d", i, e.code);
        /* a refusal of a syntax quotes the text, one of the bound names
         * it */
        const char *quoted = c->code == TM_ADMIN_E_DELAY_SYNTAX ? c->delay
                             : c->code == TM_ADMIN_E_AT_SYNTAX  ? c->at
                             : c->code == TM_ADMIN_E_TOO_FAR    ? "30 days"
                                                                : "";
        ck_assert_msg(strstr(e.msg, quoted) != NULL, "case %zu: %s", i,
                      e.msg);
    }
}
END_TEST

START_TEST(both_brokers_delay_and_answer)
{
    ck_assert_int_eq(tm_admin_can_delay(TM_BROKER_REDIS), 1);
    ck_assert_int_eq(tm_admin_can_delay(TM_BROKER_AMQP), 1);
    ck_assert_int_eq(tm_admin_can_request(TM_BROKER_REDIS), 1);
    ck_assert_int_eq(tm_admin_can_request(TM_BROKER_AMQP), 1);
}
END_TEST

/* body_code checks s (len bytes) and returns the code, with *at. */
static enum tm_admin_code body_code(const char *s, size_t len, size_t *at)
{
    struct tm_admin_err e;
    if (tm_admin_body_check(s, len, &e) == 0)
        return TM_ADMIN_OK;
    *at = e.at;
    return e.code;
}

START_TEST(bodies)
{
    size_t at = 99;
    ck_assert_int_eq(body_code("{\"a\":1}", 7, &at), TM_ADMIN_OK);
    ck_assert_int_eq(body_code(NULL, 0, &at), TM_ADMIN_E_BODY_EMPTY);
    ck_assert_int_eq(body_code("", 0, &at), TM_ADMIN_E_BODY_EMPTY);
    ck_assert_uint_eq(at, 0);
    ck_assert_int_eq(body_code("{\"a\":\0}", 7, &at), TM_ADMIN_E_BODY_NUL);
    ck_assert_uint_eq(at, 5);
    ck_assert_int_eq(body_code("{\"a\":\"\xff\"}", 9, &at),
                     TM_ADMIN_E_BODY_UTF8);
    ck_assert_int_eq(body_code("[1]", 3, &at), TM_ADMIN_E_BODY_OTHER);
    ck_assert_int_eq(body_code("{\"a\":x}", 7, &at), TM_ADMIN_E_BODY_JSON);
    ck_assert_uint_eq(at, 5);
    /* ends too early: at is the length */
    ck_assert_int_eq(body_code("{\"a\":", 5, &at), TM_ADMIN_E_BODY_JSON);
    ck_assert_uint_eq(at, 5);
    /* a NUL is found before the JSON is read */
    ck_assert_int_eq(body_code("x\0", 2, &at), TM_ADMIN_E_BODY_NUL);
    ck_assert_uint_eq(at, 1);
}
END_TEST

START_TEST(dead_letter_ids)
{
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_REDIS, "1-0", 128), 1);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_REDIS,
                                        "18446744073709551615-"
                                        "18446744073709551615", 128), 1);
    static const char *const bad_redis[] = {
        "", "1", "1-", "-1", "a-1", "1-a", "1-0-0", "1 -0",
        "123456789012345678901-0", "0-123456789012345678901",
    };
    for (size_t i = 0; i < sizeof bad_redis / sizeof *bad_redis; i++)
        ck_assert_msg(!tm_admin_dlq_id_ok(TM_BROKER_REDIS, bad_redis[i], 128),
                      "accepted: '%s'", bad_redis[i]);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "amq.gen-x~1", 128),
                     1);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "a b", 128), 0);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "a\x7f", 128), 0);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "", 128), 0);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "abcd", 4), 1);
    ck_assert_int_eq(tm_admin_dlq_id_ok(TM_BROKER_AMQP, "abcde", 4), 0);
}
END_TEST

START_TEST(dead_letter_filters)
{
    struct tm_dlq_filter f;
    struct tm_admin_err e;
    ck_assert_int_eq(tm_admin_dlq_filter(NULL, NULL, NULL, &f, &e), 0);
    ck_assert_int_eq(tm_dlq_filter_set(&f), 0);
    ck_assert_int_eq(tm_dlq_filter_match(&f, NULL, NULL, 0, 0), 1);
    ck_assert_int_eq(tm_admin_dlq_filter("", NULL, NULL, &f, &e), 0);
    ck_assert_int_eq(tm_dlq_filter_set(&f), 0);
    ck_assert_int_eq(tm_admin_dlq_filter("Err", "2026-12-01T00:00:00Z",
                                         "1796083200500", &f, &e), 0);
    ck_assert_int_eq(tm_dlq_filter_set(&f), 1);
    ck_assert(f.since == 1796083200000LL && f.until == 1796083200500LL);
    /* text in the error or the body, case-sensitive; both ends inclusive */
    ck_assert_int_eq(tm_dlq_filter_match(&f, "an Err", "{}", 2, f.since), 1);
    ck_assert_int_eq(tm_dlq_filter_match(&f, "x", "{\"Err\":1}", 9, f.until),
                     1);
    ck_assert_int_eq(tm_dlq_filter_match(&f, "an err", "{}", 2, f.since), 0);
    ck_assert_int_eq(tm_dlq_filter_match(&f, "Err", "{}", 2, f.since - 1), 0);
    ck_assert_int_eq(tm_dlq_filter_match(&f, "Err", "{}", 2, f.until + 1), 0);
    /* the body is matched on its length, not up to a NUL */
    ck_assert_int_eq(tm_dlq_filter_match(&f, NULL, "{\0Err}", 6, f.since), 1);
    ck_assert_int_eq(tm_dlq_filter_match(&f, NULL, "{\"Err\"}", 3, f.since),
                     0);
    ck_assert_int_eq(tm_admin_dlq_filter(NULL, "yesterday", NULL, &f, &e), -1);
    ck_assert_int_eq(e.code, TM_ADMIN_E_FILTER);
    ck_assert_int_eq(tm_admin_dlq_filter(NULL, NULL, "12:00", &f, &e), -1);
    ck_assert_int_eq(e.code, TM_ADMIN_E_FILTER);
    char big[TM_ADMIN_DLQ_TEXT_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(tm_admin_dlq_filter(big, NULL, NULL, &f, &e), -1);
    ck_assert_int_eq(e.code, TM_ADMIN_E_FILTER);
    big[TM_ADMIN_DLQ_TEXT_MAX] = '\0';
    ck_assert_int_eq(tm_admin_dlq_filter(big, NULL, NULL, &f, &e), 0);
}
END_TEST

START_TEST(errors_are_sentences)
{
    struct tm_admin_err e;
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tm_admin_error(&e, TM_ADMIN_E_BROKER, "%s", big);
    ck_assert_int_eq(e.code, TM_ADMIN_E_BROKER);
    ck_assert_uint_eq(e.at, 0);
    ck_assert_uint_eq(strlen(e.msg), sizeof e.msg - 1);
}
END_TEST

static Suite *admin_suite(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, due_neither_is_now);
    tcase_add_test(tc, due_cases_hold);
    tcase_add_test(tc, both_brokers_delay_and_answer);
    tcase_add_test(tc, bodies);
    tcase_add_test(tc, dead_letter_ids);
    tcase_add_test(tc, dead_letter_filters);
    tcase_add_test(tc, errors_are_sentences);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(admin_suite)
