/* test_json.c - strict JSON validation (RFC 8259). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/util.h"

#include "unit_main.h"

static enum tm_json_check chk(const char *s)
{
    return tm_json_check(s, strlen(s));
}

START_TEST(objects_and_values)
{
    ck_assert_int_eq(chk("{}"), TM_JSON_OBJECT);
    ck_assert_int_eq(chk(" {\"a\": 1, \"b\": [true, false, null]} \n"),
                     TM_JSON_OBJECT);
    ck_assert_int_eq(chk("{\"a\":{\"b\":{\"c\":[1,-2.5e+3,0.25,0,-0]}}}"),
                     TM_JSON_OBJECT);
    ck_assert_int_eq(chk("{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"}"),
                     TM_JSON_OBJECT);
    ck_assert_int_eq(chk("{\"k\":\"caf\xc3\xa9\"}"), TM_JSON_OBJECT);
    ck_assert_int_eq(chk("[1,2]"), TM_JSON_OTHER);
    ck_assert_int_eq(chk("\"text\""), TM_JSON_OTHER);
    ck_assert_int_eq(chk("42"), TM_JSON_OTHER);
    ck_assert_int_eq(chk("null"), TM_JSON_OTHER);
    ck_assert_int_eq(chk("[]"), TM_JSON_OTHER);
}
END_TEST

START_TEST(refuses_what_rfc8259_refuses)
{
    static const char *const bad[] = {
        "", " ", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]",
        "{a:1}", "{'a':1}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}",
        "{\"a\":+1}", "{\"a\":1e}", "{\"a\":-}", "{\"a\":\"x\ny\"}",
        "{\"a\":\"x\ty\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"unterminated}", "{} {}", "{}x", "{\"a\":tru}",
        "{\"a\":nul}", "{\"a\":True}", "{\"a\":NaN}", "{\"a\":Infinity}",
        "/* c */ {}", "{\"a\":1 \"b\":2}", "[1 2]", "{\"a\"::1}", ",",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(chk(bad[i]) == TM_JSON_INVALID, "accepted: %s",
                      bad[i]);
}
END_TEST

START_TEST(length_bounds_the_text)
{
    /* a NUL inside is not white space: the text ends at len */
    ck_assert_int_eq(tm_json_check("{}\0garbage", 10), TM_JSON_INVALID);
    ck_assert_int_eq(tm_json_check("{}garbage", 2), TM_JSON_OBJECT);
    ck_assert_int_eq(tm_json_check("{\"a\":1}", 5), TM_JSON_INVALID);
}
END_TEST

START_TEST(depth_is_bounded)
{
    size_t n = TM_JSON_MAX_DEPTH + 10;
    char *s = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        s[i] = '[';
        s[n + i] = ']';
    }
    s[2 * n] = '\0';
    ck_assert_int_eq(chk(s), TM_JSON_INVALID);
    /* right at the limit it is fine */
    size_t k = TM_JSON_MAX_DEPTH;
    memset(s, '[', k);
    memset(s + k, ']', k);
    s[2 * k] = '\0';
    ck_assert_int_eq(chk(s), TM_JSON_OTHER);
    free(s);
}
END_TEST

/* off returns where tm_json_check_at says s goes wrong. */
static size_t off(const char *s)
{
    size_t at = 12345;
    ck_assert_int_eq(tm_json_check_at(s, strlen(s), &at), TM_JSON_INVALID);
    return at;
}

START_TEST(reports_the_offending_byte)
{
    ck_assert_uint_eq(off("{\"a\":1,}"), 7);          /* the '}' */
    ck_assert_uint_eq(off("{\"a\": tru}"), 9);        /* the '}' */
    ck_assert_uint_eq(off("{\"a\":\"x\ny\"}"), 7);   /* the newline */
    ck_assert_uint_eq(off("{\"a\":\"\\x\"}"), 7);    /* the 'x' */
    ck_assert_uint_eq(off("{\"a\":\"\\u12\"}"), 10); /* the '"' */
    ck_assert_uint_eq(off("{\"a\":1} x"), 8);         /* the 'x' */
    ck_assert_uint_eq(off("{\"a\":1"), 6);            /* ended early */
    ck_assert_uint_eq(off("{\"a\":\"open"), 10);      /* ended early */
    ck_assert_uint_eq(off(""), 0);
    size_t at = 7;
    ck_assert_int_eq(tm_json_check_at("{}", 2, &at), TM_JSON_OBJECT);
    ck_assert_uint_eq(at, 0);
    ck_assert_int_eq(tm_json_check_at("{x", 2, NULL), TM_JSON_INVALID);
}
END_TEST

/* A byte that ends or breaks a string found at every offset of a long
 * one, across the eight-byte steps of the scanner. */
START_TEST(long_strings_are_checked_at_every_byte)
{
    static const struct {
        const char *ins;
        enum tm_json_check want;
    } cases[] = {
        {"\"", TM_JSON_INVALID},   /* the string ends early */
        {"\\q", TM_JSON_INVALID},  /* no such escape */
        {"\\n", TM_JSON_OBJECT},
        {"\x01", TM_JSON_INVALID}, /* a control character */
        {"\x1f", TM_JSON_INVALID},
        {" ", TM_JSON_OBJECT},
        {"\x7f", TM_JSON_OBJECT},
        {"\xc3\xa9", TM_JSON_OBJECT},
    };
    /* strings of 40 to 200 bytes: across the 64-, 16- and eight-byte
     * steps */
    static const size_t lens[] = {40, 63, 64, 65, 130, 200};
    char buf[256];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (size_t k = 0; k <= len; k++) {
                size_t n = 6, il = strlen(cases[c].ins);
                memcpy(buf, "{\"s\":\"", 6);
                memset(buf + n, 'a', k);
                n += k;
                memcpy(buf + n, cases[c].ins, il);
                n += il;
                memset(buf + n, 'b', len - k);
                n += len - k;
                memcpy(buf + n, "\"}", 3);
                ck_assert_msg(chk(buf) == cases[c].want,
                              "case %zu at %zu of %zu: %s", c, k, len, buf);
                if (cases[c].ins[0] < 0x20 && cases[c].ins[0] > 0)
                    ck_assert_uint_eq(off(buf), 6 + k);
            }
        }
    }
}
END_TEST

/* tm_json_check_utf8 says what tm_utf8_valid and tm_json_check say
 * together, for bytes of every kind at every offset of strings across
 * the 64-, 16- and eight-byte steps, and outside strings. */
START_TEST(utf8_check_agrees_with_the_two_checks)
{
    static const char *ins[] = {
        "\"", "\\q", "\\n", "\x01", " ", "\x7f",
        "\xc3\xa9",          /* e acute */
        "\xf0\x9f\x98\x80",  /* an emoji */
        "\xe2\x82\xac",      /* the euro sign */
        "\xff", "\x80",       /* never valid; a continuation alone */
        "\xc3",              /* cut before the next byte */
        "\xc0\xaf",          /* overlong */
        "\xed\xa0\x80",      /* a surrogate */
        "\xf4\x90\x80\x80",  /* past U+10FFFF */
        "\xe2\x82",          /* cut */
    };
    static const size_t lens[] = {0, 7, 40, 63, 64, 65, 130, 200};
    char buf[300];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        for (size_t c = 0; c < sizeof ins / sizeof ins[0]; c++) {
            for (size_t k = 0; k <= len; k++) {
                size_t n = 6, il = strlen(ins[c]);
                memcpy(buf, "{\"s\":\"", 6);
                memset(buf + n, 'a', k);
                n += k;
                memcpy(buf + n, ins[c], il);
                n += il;
                memset(buf + n, 'b', len - k);
                n += len - k;
                memcpy(buf + n, "\"}", 3);
                n += 2;
                enum tm_json_check want = tm_utf8_valid(buf, n)
                                              ? tm_json_check(buf, n)
                                              : TM_JSON_INVALID;
                ck_assert_msg(tm_json_check_utf8(buf, n) == want,
                              "case %zu at %zu of %zu", c, k, len);
            }
        }
    }
    /* outside strings: not JSON, whatever the bytes */
    ck_assert_int_eq(tm_json_check_utf8("{}\xc3\xa9", 4), TM_JSON_INVALID);
    ck_assert_int_eq(tm_json_check_utf8("[1,\xc3\xa9]", 6),
                     TM_JSON_INVALID);
    ck_assert_int_eq(tm_json_check_utf8("\"\xc3\xa9\"", 4), TM_JSON_OTHER);
    ck_assert_int_eq(tm_json_check_utf8("{\"\xc3\xa9\":1}", 8),
                     TM_JSON_OBJECT);
    ck_assert_int_eq(tm_json_check_utf8("{\"\xc3\":1}", 7),
                     TM_JSON_INVALID);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("check");
    tcase_add_test(tc, objects_and_values);
    tcase_add_test(tc, refuses_what_rfc8259_refuses);
    tcase_add_test(tc, length_bounds_the_text);
    tcase_add_test(tc, depth_is_bounded);
    tcase_add_test(tc, reports_the_offending_byte);
    tcase_add_test(tc, long_strings_are_checked_at_every_byte);
    tcase_add_test(tc, utf8_check_agrees_with_the_two_checks);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(json_suite)
