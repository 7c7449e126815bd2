/* test_trace.c - W3C traceparent parsing and writing (util/trace.h): the
 * valid forms, each malformed one ignored, new ids, root sampling. */
#include <check.h>
#include <string.h>

#include "util/trace.h"

#include "unit_main.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int parse(const char *s, struct tm_trace_ctx *c)
{
    return tm_traceparent_parse(s, strlen(s), c);
}

START_TEST(valid_round_trip)
{
    struct tm_trace_ctx c;
    char buf[TM_TRACEPARENT_SIZE];
    ck_assert_int_eq(parse(TP, &c), 0);
    ck_assert_uint_eq(c.trace_id[0], 0x4b);
    ck_assert_uint_eq(c.trace_id[15], 0x36);
    ck_assert_uint_eq(c.span_id[0], 0x00);
    ck_assert_uint_eq(c.span_id[7], 0xb7);
    ck_assert_uint_eq(c.flags, TM_TRACE_SAMPLED);
    tm_traceparent_format(&c, buf);
    ck_assert_str_eq(buf, TP);
    ck_assert_uint_eq(strlen(buf), TM_TRACEPARENT_LEN);
    /* not sampled, other flag bits kept */
    ck_assert_int_eq(
        parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &c),
        0);
    ck_assert_uint_eq(c.flags, 0);
    ck_assert_int_eq(
        parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", &c),
        0);
    ck_assert_uint_eq(c.flags, 0x09);
    /* not NUL-terminated: len is what counts */
    char raw[TM_TRACEPARENT_LEN + 4];
    memcpy(raw, TP "xyz", sizeof raw);
    ck_assert_int_eq(tm_traceparent_parse(raw, TM_TRACEPARENT_LEN, &c), 0);
}
END_TEST

/* a later version: its four first fields are read; more after a '-' */
START_TEST(future_version)
{
    struct tm_trace_ctx c;
    ck_assert_int_eq(
        parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &c),
        0);
    ck_assert_int_eq(
        parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz",
              &c), 0);
    ck_assert_uint_eq(c.flags, 1);
    ck_assert_int_eq(
        parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01xyz",
              &c), -1);
}
END_TEST

START_TEST(invalid_ignored)
{
    static const char *const bad[] = {
        "",
        /* version ff is forbidden */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        /* all-zero ids */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        /* wrong lengths */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47366-0f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        /* upper-case hex */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        /* separators and non-hex */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    };
    struct tm_trace_ctx c;
    memset(&c, 0x5a, sizeof c);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(parse(bad[i], &c) == -1, "accepted '%s'", bad[i]);
        ck_assert_uint_eq(c.flags, 0x5a); /* untouched */
    }
    ck_assert_int_eq(tm_traceparent_parse(NULL, 0, &c), -1);
}
END_TEST

START_TEST(tracestate)
{
    ck_assert(tm_tracestate_valid("congo=t61rcWkgMzE", 17));
    ck_assert(tm_tracestate_valid("a=1,b=2", 7));
    ck_assert(!tm_tracestate_valid("", 0));
    ck_assert(!tm_tracestate_valid("a=1\nb=2", 7));
    static char big[TM_TRACESTATE_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    ck_assert(tm_tracestate_valid(big, TM_TRACESTATE_MAX));
    ck_assert(!tm_tracestate_valid(big, TM_TRACESTATE_MAX + 1));
}
END_TEST

START_TEST(new_ids)
{
    struct tm_trace_ctx a, b;
    char buf[TM_TRACEPARENT_SIZE];
    struct tm_trace_ctx back;
    tm_trace_new_trace(&a);
    tm_trace_new_trace(&b);
    ck_assert(memcmp(a.trace_id, b.trace_id, 16) != 0);
    a.flags = TM_TRACE_SAMPLED;
    tm_traceparent_format(&a, buf);
    ck_assert_int_eq(parse(buf, &back), 0);
    ck_assert(memcmp(&a, &back, sizeof a) == 0);
    uint8_t trace[16];
    memcpy(trace, a.trace_id, 16);
    uint8_t span[8];
    memcpy(span, a.span_id, 8);
    tm_trace_new_span(&a);
    ck_assert(memcmp(a.trace_id, trace, 16) == 0);
    ck_assert(memcmp(a.span_id, span, 8) != 0);
}
END_TEST

START_TEST(sample_root)
{
    int in = 0;
    for (int i = 0; i < 1000; i++) {
        ck_assert(tm_trace_sample_root(1.0));
        ck_assert(!tm_trace_sample_root(0.0));
        in += tm_trace_sample_root(0.5);
    }
    /* 1000 draws at 0.5: far outside 300..700 is a broken generator */
    ck_assert_int_gt(in, 300);
    ck_assert_int_lt(in, 700);
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("traceparent");
    tcase_add_test(tc, valid_round_trip);
    tcase_add_test(tc, future_version);
    tcase_add_test(tc, invalid_ignored);
    tcase_add_test(tc, tracestate);
    tcase_add_test(tc, new_ids);
    tcase_add_test(tc, sample_root);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(trace_suite)
