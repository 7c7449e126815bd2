/* test_host_json.c - the JSON helpers plugins reach through taskmill.h. */
#include <check.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "task/task.h"
#include "task/host_json.h"
#include "util/json.h"
#include "taskmill.h"
#include "util/util.h"

#include "unit_main.h"

/* The wrappers are called as a plugin calls them, with the daemon's
 * table. */
static const struct tm_host *H;

static void setup(void)
{
    H = tm_exec_host();
}

START_TEST(table_has_the_helpers)
{
    ck_assert(TM_HOST_HAS(H, json_find));
    ck_assert(TM_HOST_HAS(H, json_result));
    /* a table from an ABI 1.0 daemon: the wrappers refuse, never call */
    struct tm_host old;
    memcpy(&old, H, sizeof old);
    old.struct_size = offsetof(struct tm_host, json_find);
    int64_t v = 7;
    ck_assert_int_eq(tm_json_get_int(&old, "{\"a\":1}", "a", &v),
                     TM_JSON_UNSUPPORTED);
    ck_assert_int_eq(v, 7);
    ck_assert_ptr_null(tm_json_new(&old));
    ck_assert_ptr_null(tm_json_new_object(&old));
    ck_assert_int_eq(tm_json_add_int(NULL, "a", 1), -1);
    ck_assert_ptr_null(tm_json_text(NULL, NULL));
}
END_TEST

START_TEST(get_int)
{
    const char *body = "{\"a\": 2, \"b\" : -3 , \"big\": 9223372036854775807,"
                       "\"min\": -9223372036854775808,"
                       "\"over\": 9223372036854775808, \"f\": 1.5,"
                       "\"e\": 1e3, \"s\": \"4\", \"n\": null}";
    int64_t v = 0;
    ck_assert_int_eq(tm_json_get_int(H, body, "a", &v), TM_JSON_OK);
    ck_assert_int_eq(v, 2);
    ck_assert_int_eq(tm_json_get_int(H, body, "b", &v), TM_JSON_OK);
    ck_assert_int_eq(v, -3);
    ck_assert_int_eq(tm_json_get_int(H, body, "big", &v), TM_JSON_OK);
    ck_assert(v == INT64_MAX);
    ck_assert_int_eq(tm_json_get_int(H, body, "min", &v), TM_JSON_OK);
    ck_assert(v == INT64_MIN);
    v = 42;
    ck_assert_int_eq(tm_json_get_int(H, body, "over", &v), TM_JSON_RANGE);
    ck_assert_int_eq(tm_json_get_int(H, body, "f", &v),
                     TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_int(H, body, "e", &v),
                     TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_int(H, body, "s", &v),
                     TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_int(H, body, "n", &v),
                     TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_int(H, body, "nope", &v), TM_JSON_ABSENT);
    ck_assert_int_eq(v, 42); /* untouched on failure */
    ck_assert_int_eq(tm_json_get_int_range(H, body, "a", 0, 1, &v),
                     TM_JSON_RANGE);
    ck_assert_int_eq(tm_json_get_int_range(H, body, "a", 0, 2, &v),
                     TM_JSON_OK);
    ck_assert_int_eq(v, 2);
}
END_TEST

START_TEST(keys_are_top_level_and_unescaped)
{
    /* "a" inside a nested object or inside a string is not a member */
    const char *body = "{\"x\": {\"a\": 1}, \"y\": \"\\\"a\\\": 2\", "
                       "\"\\u0061b\": 3, \"a\\/b\": 4, \"\\u00e9\": 5}";
    int64_t v = 0;
    ck_assert_int_eq(tm_json_get_int(H, body, "a", &v), TM_JSON_ABSENT);
    ck_assert_int_eq(tm_json_get_int(H, body, "ab", &v), TM_JSON_OK);
    ck_assert_int_eq(v, 3);
    ck_assert_int_eq(tm_json_get_int(H, body, "a/b", &v), TM_JSON_OK);
    ck_assert_int_eq(v, 4);
    ck_assert_int_eq(tm_json_get_int(H, body, "\xc3\xa9", &v), TM_JSON_OK);
    ck_assert_int_eq(v, 5);
    /* a key named twice is refused, whichever spelling */
    ck_assert_int_eq(tm_json_get_int(H, "{\"a\":1,\"\\u0061\":2}", "a", &v),
                     TM_JSON_BAD_TEXT);
    ck_assert_int_eq(tm_json_get_int(H, "{}", "a", &v), TM_JSON_ABSENT);
}
END_TEST

START_TEST(bad_text_is_refused)
{
    static const char *const bad[] = {
        "", "[1]", "\"a\"", "{", "{\"a\":1", "{\"a\":1,}", "{\"a\" 1}",
        "{\"a\":01}", "{\"a\":1} x", "{\"a\":\"x\ny\"}", "{a:1}",
        "{\"a\":[1,}",
    };
    int64_t v;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tm_json_get_int(H, bad[i], "a", &v) ==
                          TM_JSON_BAD_TEXT,
                      "accepted: %s", bad[i]);
    ck_assert_int_eq(tm_json_get_int(H, NULL, "a", &v), TM_JSON_BAD_TEXT);
    ck_assert_int_eq(tm_json_get_int(H, "{}", NULL, &v), TM_JSON_BAD_TEXT);
    /* the length bounds the text: no read past it */
    const char *val;
    size_t n;
    ck_assert_int_eq(H->json_find("{\"a\":1}", 5, "a", &val, &n),
                     TM_JSON_BAD_TEXT);
}
END_TEST

START_TEST(get_string)
{
    const char *body = "{\"s\": \"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\","
                       "\"lone\": \"\\ud800x\", \"nul\": \"a\\u0000b\","
                       "\"i\": 1}";
    char buf[64];
    ck_assert_int_eq(tm_json_get_string(H, body, "s", buf, sizeof buf),
                     TM_JSON_OK);
    ck_assert_str_eq(buf, "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
    /* exactly the size needed, and one byte short */
    size_t need = strlen(buf) + 1;
    ck_assert_int_eq(tm_json_get_string(H, body, "s", buf, need),
                     TM_JSON_OK);
    ck_assert_int_eq(tm_json_get_string(H, body, "s", buf, need - 1),
                     TM_JSON_RANGE);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tm_json_get_string(H, body, "lone", buf, sizeof buf),
                     TM_JSON_OK);
    ck_assert_str_eq(buf, "\xef\xbf\xbdx");
    ck_assert_int_eq(tm_json_get_string(H, body, "nul", buf, sizeof buf),
                     TM_JSON_RANGE);
    ck_assert_int_eq(tm_json_get_string(H, body, "i", buf, sizeof buf),
                     TM_JSON_WRONG_TYPE);

    char *dup = NULL;
    ck_assert_int_eq(tm_json_get_strdup(H, body, "s", &dup), TM_JSON_OK);
    ck_assert_str_eq(dup, "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
    free(dup);
    dup = NULL;
    ck_assert_int_eq(tm_json_get_strdup(H, body, "nul", &dup),
                     TM_JSON_RANGE);
    ck_assert_ptr_null(dup);
    ck_assert_int_eq(tm_json_get_strdup(H, body, "x", &dup),
                     TM_JSON_ABSENT);
}
END_TEST

START_TEST(get_number_bool_null_raw)
{
    const char *body = "{\"d\": -2.5e-3, \"i\": 10, \"huge\": 1e999,"
                       "\"t\": true, \"f\": false, \"n\": null,"
                       "\"o\": {\"k\": [1, \"x\"]} }";
    double d = 0;
    ck_assert_int_eq(tm_json_get_number(H, body, "d", &d), TM_JSON_OK);
    ck_assert(d == -2.5e-3);
    ck_assert_int_eq(tm_json_get_number(H, body, "i", &d), TM_JSON_OK);
    ck_assert(d == 10.0);
    ck_assert_int_eq(tm_json_get_number(H, body, "huge", &d),
                     TM_JSON_RANGE);
    ck_assert_int_eq(tm_json_get_number(H, body, "t", &d),
                     TM_JSON_WRONG_TYPE);
    int b = -1;
    ck_assert_int_eq(tm_json_get_bool(H, body, "t", &b), TM_JSON_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(tm_json_get_bool(H, body, "f", &b), TM_JSON_OK);
    ck_assert_int_eq(b, 0);
    ck_assert_int_eq(tm_json_get_bool(H, body, "n", &b),
                     TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_null(H, body, "n"), TM_JSON_OK);
    ck_assert_int_eq(tm_json_get_null(H, body, "f"), TM_JSON_WRONG_TYPE);
    ck_assert_int_eq(tm_json_get_null(H, body, "x"), TM_JSON_ABSENT);
    const char *raw;
    size_t n;
    ck_assert_int_eq(tm_json_get_raw(H, body, "o", &raw, &n), TM_JSON_OK);
    ck_assert_int_eq((int)n, (int)strlen("{\"k\": [1, \"x\"]}"));
    ck_assert(memcmp(raw, "{\"k\": [1, \"x\"]}", n) == 0);
    /* a number whose text is longer than the stack copy */
    char big[300] = "{\"x\": 0.";
    memset(big + strlen(big), '5', 200);
    strcpy(big + strlen(big), "}");
    ck_assert_int_eq(tm_json_get_number(H, big, "x", &d), TM_JSON_OK);
    ck_assert(fabs(d - 0.5555555555) < 1e-9);
}
END_TEST

/* text_of finishes jb and returns a copy of its text (or NULL). */
static char *text_of(struct tm_json *jb)
{
    size_t n = 0;
    const char *t = tm_json_text(jb, &n);
    char *copy = t != NULL ? strdup(t) : NULL;
    if (t != NULL)
        ck_assert_uint_eq(n, strlen(t));
    tm_json_free(jb);
    return copy;
}

START_TEST(build_escapes_and_nests)
{
    struct tm_json *jb = tm_json_new_object(H);
    ck_assert_ptr_nonnull(jb);
    ck_assert_int_eq(tm_json_add_string(jb, "greeting", "hello, a\"b"), 0);
    tm_json_add_string(jb, "ctl", "t\tn\nr\rx\x01\\/");
    tm_json_add_string(jb, "k\"ey", "\xc3\xa9");
    tm_json_add_int(jb, "min", INT64_MIN);
    tm_json_add_double(jb, "d", 0.1);
    tm_json_add_double(jb, "big", 1e300);
    tm_json_add_bool(jb, "t", 1);
    tm_json_add_null(jb, "n");
    tm_json_begin_array(jb, "arr");
    tm_json_add_int(jb, NULL, 1);
    tm_json_begin_object(jb, NULL);
    tm_json_add_raw(jb, "raw", " [1, {\"x\": null}] ");
    tm_json_end(jb);
    tm_json_begin_array(jb, NULL);
    tm_json_end(jb);
    tm_json_end(jb);
    tm_json_begin_object(jb, "open"); /* left open: closed at the end */
    tm_json_add_stringn(jb, "part", "abcdef", 3);
    char *t = text_of(jb);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t, "{\"greeting\":\"hello, a\\\"b\","
                        "\"ctl\":\"t\\tn\\nr\\rx\\u0001\\\\/\","
                        "\"k\\\"ey\":\"\xc3\xa9\","
                        "\"min\":-9223372036854775808,"
                        "\"d\":0.1,\"big\":1e+300,\"t\":true,\"n\":null,"
                        "\"arr\":[1,{\"raw\": [1, {\"x\": null}] },[]],"
                        "\"open\":{\"part\":\"abc\"}}");
    ck_assert_int_eq(tm_json_check(t, strlen(t)), TM_JSON_OBJECT);
    /* read back what was written */
    char s[32];
    ck_assert_int_eq(tm_json_get_string(H, t, "greeting", s, sizeof s),
                     TM_JSON_OK);
    ck_assert_str_eq(s, "hello, a\"b");
    double d;
    ck_assert_int_eq(tm_json_get_number(H, t, "d", &d), TM_JSON_OK);
    ck_assert(d == 0.1);
    free(t);

    /* a top-level array, a top-level scalar */
    jb = tm_json_new(H);
    tm_json_begin_array(jb, NULL);
    tm_json_add_string(jb, NULL, "x");
    t = text_of(jb);
    ck_assert_str_eq(t, "[\"x\"]");
    free(t);
    jb = tm_json_new(H);
    tm_json_add_int(jb, NULL, 5);
    t = text_of(jb);
    ck_assert_str_eq(t, "5");
    free(t);
}
END_TEST

START_TEST(numbers_ignore_the_locale)
{
    /* a plugin may switch LC_NUMERIC to one with a decimal comma; build
     * one with localedef when the system has none installed */
    char dir[] = "/tmp/tm-locale-XXXXXX";
    char cmd[256];
    int made = 0;
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") == NULL) {
        ck_assert_ptr_nonnull(mkdtemp(dir));
        made = 1;
        snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 "
                 "%s/de_DE.UTF-8 >/dev/null 2>&1", dir);
        if (system(cmd) == 0)
            setenv("LOCPATH", dir, 1);
    }
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") == NULL) {
        fprintf(stderr, "# numbers_ignore_the_locale: no de_DE locale and "
                "no localedef: not checked\n");
        if (made) {
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            ck_assert_int_eq(system(cmd), 0);
        }
        return;
    }
    ck_assert_str_eq(localeconv()->decimal_point, ",");
    struct tm_json *jb = tm_json_new_object(H);
    tm_json_add_double(jb, "d", 2.5);
    char *t = text_of(jb);
    ck_assert_str_eq(t, "{\"d\":2.5}");
    double d = 0;
    ck_assert_int_eq(tm_json_get_number(H, t, "d", &d), TM_JSON_OK);
    ck_assert(d == 2.5);
    free(t);
    setlocale(LC_NUMERIC, "C");
    if (made) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}
END_TEST

/* fails_with builds with one misuse and checks that the text is refused
 * and the reason kept. */
static void fails_with(struct tm_json *jb, const char *why_part)
{
    ck_assert_ptr_null(tm_json_text(jb, NULL));
    const char *why = tm_json_error(jb);
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(strstr(why, why_part) != NULL, "reason '%s' lacks '%s'",
                  why, why_part);
    /* sticky: later calls fail too */
    ck_assert_int_eq(tm_json_add_int(jb, NULL, 1), -1);
    tm_json_free(jb);
}

START_TEST(build_refuses_misuse)
{
    struct tm_json *jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_int(jb, NULL, 1), -1);
    fails_with(jb, "without a key");

    jb = tm_json_new(H);
    tm_json_begin_array(jb, NULL);
    ck_assert_int_eq(tm_json_add_int(jb, "k", 1), -1);
    fails_with(jb, "array");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_string(jb, "s", "\xff"), -1);
    fails_with(jb, "UTF-8");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_string(jb, "\xc3", "x"), -1);
    fails_with(jb, "UTF-8");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_raw(jb, "r", "{not json"), -1);
    fails_with(jb, "raw");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_raw(jb, "r", "1 2"), -1);
    fails_with(jb, "raw");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_double(jb, "d", NAN), -1);
    fails_with(jb, "finite");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_double(jb, "d", INFINITY), -1);
    fails_with(jb, "finite");

    jb = tm_json_new_object(H);
    tm_json_end(jb);
    ck_assert_int_eq(tm_json_end(jb), -1);
    fails_with(jb, "not open");

    jb = tm_json_new(H);
    tm_json_add_int(jb, NULL, 1);
    ck_assert_int_eq(tm_json_add_int(jb, NULL, 2), -1);
    fails_with(jb, "second value");

    jb = tm_json_new(H);
    fails_with(jb, "nothing");

    jb = tm_json_new_object(H);
    ck_assert_int_eq(tm_json_add_string(jb, "s", NULL), -1);
    fails_with(jb, "NULL");

    /* nesting is bounded so the text stays within the validator's depth */
    jb = tm_json_new(H);
    int rc = 0;
    for (int i = 0; i <= TM_JSON_MAX_DEPTH && rc == 0; i++)
        rc = tm_json_begin_array(jb, NULL);
    ck_assert_int_eq(rc, -1);
    fails_with(jb, "deep");

    /* adding after the text was taken */
    jb = tm_json_new_object(H);
    ck_assert_ptr_nonnull(tm_json_text(jb, NULL));
    ck_assert_int_eq(tm_json_add_int(jb, "late", 1), -1);
    fails_with(jb, "after");
}
END_TEST

START_TEST(take_hands_over_the_buffer)
{
    struct tm_json *jb = tm_json_new_object(H);
    tm_json_add_int(jb, "sum", 5);
    char *text = NULL;
    size_t len = 0;
    ck_assert_ptr_null(tm_hjson_take(jb, &text, &len));
    ck_assert_str_eq(text, "{\"sum\":5}");
    ck_assert_uint_eq(len, 9);
    tm_free(text);

    jb = tm_json_new_object(H);
    tm_json_add_double(jb, "d", NAN);
    const char *why = tm_hjson_take(jb, &text, &len);
    ck_assert_ptr_nonnull(why);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(tm_hjson_take(NULL, &text, &len));
}
END_TEST

START_TEST(size_is_bounded)
{
    size_t n = TM_HJSON_MAX / 4;
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n] = '\0';
    struct tm_json *jb = tm_json_new(H);
    tm_json_begin_array(jb, NULL);
    int rc = 0;
    for (int i = 0; i < 5 && rc == 0; i++)
        rc = tm_json_add_string(jb, NULL, s);
    ck_assert_int_eq(rc, -1);
    fails_with(jb, "16 MiB");
    free(s);
}
END_TEST

static Suite *host_json_suite(void)
{
    Suite *s = suite_create("host_json");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, table_has_the_helpers);
    tcase_add_test(tc, get_int);
    tcase_add_test(tc, keys_are_top_level_and_unescaped);
    tcase_add_test(tc, bad_text_is_refused);
    tcase_add_test(tc, get_string);
    tcase_add_test(tc, get_number_bool_null_raw);
    tcase_add_test(tc, build_escapes_and_nests);
    tcase_add_test(tc, numbers_ignore_the_locale);
    tcase_add_test(tc, build_refuses_misuse);
    tcase_add_test(tc, take_hands_over_the_buffer);
    tcase_add_test(tc, size_is_bounded);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(host_json_suite)
