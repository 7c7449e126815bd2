/* test_host_lua_json.c - the Lua host's JSON bridge, both ways, table by
 * table: JSON text -> Lua value -> JSON text through the daemon's builder
 * (plugins/lua/json_lua.c is compiled into this test). */
#include <check.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

#include "task/host_json.h"
#include "util/log.h"
#include "config/config.h"
#include "lua_host.h"

#include "unit_main.h"

static const struct tm_host host = {
    .struct_size = sizeof(struct tm_host),
    TM_HOST_JSON_MEMBERS,
};

/* round_trip decodes in, encodes the value and returns the text (static
 * buffer), or "ERR: reason". */
static const char *round_trip(lua_State *L, const char *in)
{
    static char out[65536];
    const char *err = NULL;
    char why[256];
    if (tm_ljson_decode(L, in, strlen(in), &err) != 0) {
        snprintf(out, sizeof out, "ERR: %s", err);
        return out;
    }
    struct tm_json *jb = tm_json_new(&host);
    if (tm_ljson_encode(L, -1, jb, NULL, why, sizeof why) != 0) {
        snprintf(out, sizeof out, "ERR: %s", why);
    } else {
        const char *t = tm_json_text(jb, NULL);
        snprintf(out, sizeof out, "%s", t != NULL ? t : tm_json_error(jb));
    }
    tm_json_free(jb);
    lua_pop(L, 1);
    return out;
}

static lua_State *new_state(void)
{
    lua_State *L = luaL_newstate();
    ck_assert_ptr_nonnull(L);
    luaL_openlibs(L);
    tm_ljson_setup(L);
    return L;
}

/* in, and what comes back (NULL: the same text) */
static const struct {
    const char *in, *out;
} cases[] = {
    /* objects and arrays, empty ones kept apart */
    {"{}", NULL},
    {"[]", NULL},
    {"[[],{},[{}],{\"a\":[]}]", NULL},
    {"{\"a\":{\"b\":{\"c\":[1,[2,[3]]]}}}", NULL},
    /* null is kept, in arrays and objects */
    {"null", NULL},
    {"[null,1,null]", NULL},
    {"{\"k\":null}", NULL},
    {"[true,false]", NULL},
    /* integers stay integers, to the ends of 64 bits */
    {"0", NULL},
    {"-1", NULL},
    {"9223372036854775807", NULL},
    {"-9223372036854775808", NULL},
    /* beyond: a float */
    {"9223372036854775808", "9.223372036854776e+18"},
    {"18446744073709551616", "1.8446744073709552e+19"},
    /* floats stay floats, written to read back the same */
    {"1.5", NULL},
    {"-0.25", NULL},
    {"1e300", "1e+300"},
    {"2.0", "2"},
    {"0.1", NULL},
    /* strings: UTF-8 kept, escapes decoded, control characters escaped */
    {"\"\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80\"", NULL},
    {"\"\\u00e4\\u20ac\\ud83d\\ude00\"", "\"\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80\""},
    {"\"a\\nb\\t\\\"q\\\"\\\\\"", NULL},
    {"\"\\/\"", "\"/\""},
    {"\"\\u0000x\"", "\"\\u0000x\""},
    {"  { \"a\" : [ 1 , 2 ] }  ", "{\"a\":[1,2]}"},
    /* refused on the way in */
    {"{\"a\":}", "ERR: bad number"},
    {"[1,]", "ERR: bad number"},
    {"\"\\ud800\"", "ERR: bad string"},
    {"\"\\udc00\"", "ERR: bad string"},
    {"\"abc", "ERR: bad string"},
    {"[1] x", "ERR: text after the value"},
    {"", "ERR: unexpected end"},
};

START_TEST(table_round_trips)
{
    lua_State *L = new_state();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *want = cases[i].out != NULL ? cases[i].out : cases[i].in;
        const char *got = round_trip(L, cases[i].in);
        ck_assert_msg(strcmp(got, want) == 0, "case %zu: %s -> %s, want %s",
                      i, cases[i].in, got, want);
        ck_assert_int_eq(lua_gettop(L), 0);
    }
    lua_close(L);
}
END_TEST

/* nest makes depth arrays around 1. */
static char *nest(int depth)
{
    char *s = malloc((size_t)depth * 2 + 2);
    ck_assert_ptr_nonnull(s);
    memset(s, '[', (size_t)depth);
    s[depth] = '1';
    memset(s + depth + 1, ']', (size_t)depth);
    s[2 * depth + 1] = '\0';
    return s;
}

START_TEST(depth_is_capped)
{
    lua_State *L = new_state();
    char *ok = nest(TM_LJSON_MAX_DEPTH);
    char *deep = nest(TM_LJSON_MAX_DEPTH + 1);
    ck_assert_str_eq(round_trip(L, ok), ok);
    ck_assert_str_eq(round_trip(L, deep), "ERR: nested too deep");
    ck_assert_int_eq(lua_gettop(L), 0);
    free(ok);
    free(deep);
    lua_close(L);
}
END_TEST

/* encode runs chunk (which returns one value) and encodes its value. */
static const char *encode_lua(lua_State *L, const char *chunk)
{
    static char out[4096];
    char why[256];
    ck_assert_int_eq(luaL_dostring(L, chunk), LUA_OK);
    struct tm_json *jb = tm_json_new(&host);
    if (tm_ljson_encode(L, -1, jb, NULL, why, sizeof why) != 0)
        snprintf(out, sizeof out, "ERR: %s", why);
    else {
        const char *t = tm_json_text(jb, NULL);
        snprintf(out, sizeof out, "%s", t != NULL ? t : "(no text)");
    }
    tm_json_free(jb);
    lua_settop(L, 0);
    return out;
}

START_TEST(lua_values_to_json)
{
    lua_State *L = new_state();
    ck_assert_str_eq(encode_lua(L, "return {1, 2, 3}"), "[1,2,3]");
    ck_assert_str_eq(encode_lua(L, "return {}"), "{}");
    ck_assert_str_eq(encode_lua(L, "return {a = 1}"), "{\"a\":1}");
    ck_assert_str_eq(encode_lua(L, "return 3 // 1"), "3");
    ck_assert_str_eq(encode_lua(L, "return 3 / 2"), "1.5");
    ck_assert_str_eq(encode_lua(L, "return {1, 2, x = 1}"),
                     "ERR: an object key is a number, not a string");
    ck_assert_str_eq(encode_lua(L, "return {1, nil, 3}"),
                     "ERR: an object key is a number, not a string");
    ck_assert_str_eq(encode_lua(L, "return {f = print}"),
                     "ERR: a function cannot be written as JSON");
    ck_assert_str_eq(encode_lua(L, "return 0/0"),
                     "ERR: a number is not finite");
    ck_assert_str_eq(encode_lua(L, "local t = {} t.t = t return t"),
                     "ERR: nested too deep (or a table contains itself)");
    ck_assert_str_eq(encode_lua(L, "return '\\xff'"),
                     "ERR: a string or key is not valid UTF-8");
    lua_close(L);
}
END_TEST

static Suite *lua_json_suite(void)
{
    Suite *s = suite_create("host_lua_json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, table_round_trips);
    tcase_add_test(tc, depth_is_capped);
    tcase_add_test(tc, lua_values_to_json);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tm_log_setup(TM_LOG_ERR, TM_LOG_TEXT);
    return tm_unit_run(lua_json_suite());
}
