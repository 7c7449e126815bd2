/* test_http.c - the HTTP server's connection table. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_private.h"
#include "util.h"

/* ---- connection table ---- */

START_TEST(conns_shed_the_longest_waiting_first)
{
    struct tm_http_conns t;
    tm_http_conns_init(&t);
    ck_assert_ptr_null(tm_http_conns_victim(&t));
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), -1);
    struct tm_http_conn *a = tm_http_conns_add(&t, 10, 100);
    struct tm_http_conn *b = tm_http_conns_add(&t, 11, 200);
    struct tm_http_conn *c = tm_http_conns_add(&t, 12, 300);
    ck_assert_uint_eq(t.nlive, 3);
    /* a is being answered: b has waited longest */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_BUSY, 400);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), b);
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), 5200);
    ck_assert_ptr_null(tm_http_conns_expired(&t, 5199, 5000));
    ck_assert_ptr_eq(tm_http_conns_expired(&t, 5200, 5000), b);
    tm_http_conns_shed(&t, b);
    ck_assert_uint_eq(t.nlive, 2);
    ck_assert_int_eq(b->state, TM_HTTP_CONN_SHED);
    /* a shed connection stays shed when its request completes */
    tm_http_conns_set(&t, b, TM_HTTP_CONN_WAITING, 500);
    ck_assert_int_eq(b->state, TM_HTTP_CONN_SHED);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), c);
    /* a's answer is sent: it waits again, after c */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_WAITING, 600);
    tm_http_conns_shed(&t, c);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), a);
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), 5600);
    /* with nothing waiting, the oldest busy one goes */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_BUSY, 700);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), a);
    ck_assert_ptr_null(tm_http_conns_expired(&t, 100000, 5000));
    tm_http_conns_remove(&t, a);
    tm_http_conns_remove(&t, b);
    tm_http_conns_remove(&t, c);
    ck_assert_uint_eq(t.nlive, 0);
    ck_assert_ptr_null(tm_http_conns_victim(&t));
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, conns_shed_the_longest_waiting_first);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(http_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
