/* test_amqp_delay.c - the RabbitMQ delay levels and the x-not-before
 * header (src/amqp/delay.c, src/amqp/delivery.c). */
#include "amqp/amqp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "unit_main.h"

/* The largest level not above what is left, 125 ms at least, 125 ms x
 * 2^24 at most; each hop leaves less than half. */
START_TEST(levels_halve_what_is_left)
{
    ck_assert_int_eq(tm_amqp_delay_level(0), 125);
    ck_assert_int_eq(tm_amqp_delay_level(124), 125);
    ck_assert_int_eq(tm_amqp_delay_level(125), 125);
    ck_assert_int_eq(tm_amqp_delay_level(249), 125);
    ck_assert_int_eq(tm_amqp_delay_level(250), 250);
    ck_assert_int_eq(tm_amqp_delay_level(3000), 2000);
    ck_assert_int_eq(tm_amqp_delay_level(3600000), 2048000);
    ck_assert_int_eq(tm_amqp_delay_level(30LL * 86400000), 2097152000LL);
    /* 30 days in hops: never more than the level, never early, few */
    for (int64_t start = 1000; start <= 30LL * 86400000; start = start * 7 + 3) {
        int64_t left = start;
        int hops = 0;
        while (left >= 125) {
            int64_t l = tm_amqp_delay_level(left);
            ck_assert_int_le(l, left);
            left -= l;
            hops++;
        }
        ck_assert_int_le(hops, 30);
    }
}
END_TEST

static amqp_table_t one(amqp_table_entry_t *e, const char *key)
{
    e->key = sym_amqp_cstring_bytes(key);
    amqp_table_t t = {.num_entries = 1, .entries = e};
    return t;
}

/* x-not-before: integers of any width, floats, digit strings; anything
 * else is no due time. */
START_TEST(not_before_reads_numbers_and_digits)
{
    amqp_table_entry_t e;
    int64_t due = 0;
    memset(&e, 0, sizeof e);
    amqp_table_t t = one(&e, "x-not-before");
    e.value.kind = AMQP_FIELD_KIND_I64;
    e.value.value.i64 = 1796094000000LL;
    ck_assert_int_eq(tm_amqp_not_before(&t, &due), 0);
    ck_assert_int_eq(due, 1796094000000LL);
    e.value.kind = AMQP_FIELD_KIND_F64;
    e.value.value.f64 = 1796094000000.5;
    ck_assert_int_eq(tm_amqp_not_before(&t, &due), 0);
    ck_assert_int_eq(due, 1796094000001LL); /* rounded up: never early */
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = sym_amqp_cstring_bytes("1796094000000");
    ck_assert_int_eq(tm_amqp_not_before(&t, &due), 0);
    ck_assert_int_eq(due, 1796094000000LL);
    e.value.value.bytes = sym_amqp_cstring_bytes("tomorrow");
    ck_assert_int_eq(tm_amqp_not_before(&t, &due), -1);
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    ck_assert_int_eq(tm_amqp_not_before(&t, &due), -1);
    amqp_table_t other = one(&e, "x-something");
    e.value.kind = AMQP_FIELD_KIND_I64;
    ck_assert_int_eq(tm_amqp_not_before(&other, &due), -1);
}
END_TEST

static Suite *delay_suite(void)
{
    Suite *s = suite_create("amqp_delay");
    TCase *tc = tcase_create("delay");
    tcase_add_test(tc, levels_halve_what_is_left);
    tcase_add_test(tc, not_before_reads_numbers_and_digits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* rabbitmq-c through the daemon's loader, as a configuration opens it */
    char err[512];
    if (tm_rmq_dl_open(err, sizeof err) < 0) {
        fprintf(stderr, "test_amqp_delay: %s\n", err);
        return EXIT_FAILURE;
    }
    return tm_unit_run(delay_suite());
}
