/* test_config_values.c - unit tests for the YAML configuration
 * (src/config/): URLs, durations, sizes, environment expansion. */
#include "config_fixture.h"

#include <errno.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "taskmill.h"

/* -------------------------------------------------------------- URLs */

START_TEST(test_url_parse)
{
    struct tm_url u;
    char err[256];

    ck_assert_int_eq(tm_url_parse("redis://127.0.0.1:6379/0", &u, err,
                                  sizeof err), 0);
    ck_assert_int_eq(u.kind, TM_BROKER_REDIS);
    ck_assert(!u.tls);
    ck_assert_str_eq(u.scheme, "redis");
    ck_assert_ptr_null(u.user);
    ck_assert_ptr_null(u.password);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 0);
    ck_assert_str_eq(u.redacted, "redis://127.0.0.1:6379/0");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("redis://", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.host, "127.0.0.1");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 0);
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("REDIS://us%3Aer:p%40ss:w@cache.local/15",
                                  &u, err, sizeof err), 0);
    ck_assert_str_eq(u.scheme, "redis");
    ck_assert_str_eq(u.user, "us:er");
    ck_assert_str_eq(u.password, "p@ss:w");
    ck_assert_str_eq(u.host, "cache.local");
    ck_assert_int_eq(u.port, 6379);
    ck_assert_int_eq(u.db, 15);
    ck_assert_str_eq(u.redacted, "redis://cache.local:6379/15");
    tm_url_clear(&u);

    /* An unencoded '@' in the password: the last '@' ends the userinfo. */
    ck_assert_int_eq(tm_url_parse("redis://:a@b@h:1/", &u, err, sizeof err),
                     0);
    ck_assert_ptr_null(u.user);
    ck_assert_str_eq(u.password, "a@b");
    ck_assert_str_eq(u.host, "h");
    ck_assert_int_eq(u.port, 1);
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("redis://[::1]:7000/2", &u, err,
                                  sizeof err), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_int_eq(u.port, 7000);
    ck_assert_int_eq(u.db, 2);
    ck_assert_str_eq(u.redacted, "redis://[::1]:7000/2");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqp://guest:guest@rabbit", &u, err,
                                  sizeof err), 0);
    ck_assert_int_eq(u.kind, TM_BROKER_AMQP);
    ck_assert(!u.tls);
    ck_assert_str_eq(u.user, "guest");
    ck_assert_str_eq(u.password, "guest");
    ck_assert_int_eq(u.port, 5672);
    ck_assert_str_eq(u.vhost, "/");
    ck_assert_str_eq(u.redacted, "amqp://rabbit:5672/%2F");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqp://h/", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.vhost, "/");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqp://h/%2f", &u, err, sizeof err), 0);
    ck_assert_str_eq(u.vhost, "/");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqp://h/%2Fprod%20a", &u, err,
                                  sizeof err), 0);
    ck_assert_str_eq(u.vhost, "/prod a");
    ck_assert_str_eq(u.redacted, "amqp://h:5672/%2Fprod%20a");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqps://u@[fe80::1]:5000/v", &u, err,
                                  sizeof err), 0);
    ck_assert_int_eq(u.kind, TM_BROKER_AMQP);
    ck_assert(u.tls);
    ck_assert_str_eq(u.scheme, "amqps");
    ck_assert_str_eq(u.user, "u");
    ck_assert_ptr_null(u.password);
    ck_assert_str_eq(u.host, "fe80::1");
    ck_assert_int_eq(u.port, 5000);
    ck_assert_str_eq(u.vhost, "v");
    ck_assert_str_eq(u.redacted, "amqps://[fe80::1]:5000/v");
    tm_url_clear(&u);

    ck_assert_int_eq(tm_url_parse("amqps://h", &u, err, sizeof err), 0);
    ck_assert_int_eq(u.port, 5671);
    tm_url_clear(&u);
}
END_TEST

struct bad_url {
    const char *url;
    const char *msg;
};

static const struct bad_url bad_urls[] = {
    { "http://h", "unknown scheme 'http'; expected one of: redis, rediss, "
      "amqp, amqps" },
    { "127.0.0.1:6379", "expected a URL like" },
    { "", "expected a URL like" },
    { "redis://h:0", "invalid port '0'" },
    { "redis://h:65536", "invalid port '65536'" },
    { "redis://h:", "invalid port ''" },
    { "redis://h:12a", "invalid port '12a'" },
    { "redis://h/-1", "invalid database number '-1'" },
    { "redis://h/1x", "invalid database number '1x'" },
    { "redis://h/1/2", "invalid database number '1/2'" },
    { "redis://h/99999999999", "invalid database number" },
    { "redis://::1/0", "an IPv6 host must be in brackets" },
    { "redis://[::1/0", "unterminated '['" },
    { "redis://[]:1/0", "invalid IPv6 address" },
    { "redis://[::1]x/0", "unexpected text after ']'" },
    { "redis://h o/0", "invalid host 'h o'" },
    { "redis://u:p%zz@h", "invalid percent-encoding in the password" },
    { "redis://u%4:p@h", "invalid percent-encoding in the user name" },
    { "redis://u:p%00@h", "invalid percent-encoding in the password" },
    { "amqp://h/a/b", "a '/' in the vhost must be written as %2f" },
    { "amqp://h/%g1", "invalid percent-encoding in the vhost" },
    { "amqp://h/v?heartbeat=5", "query strings and fragments are not "
      "supported" },
    { "redis://h/0#x", "query strings and fragments" },
    { "redis://u:p/w@h/0", "percent-encode '/', '?' and '#'" },
};

START_TEST(test_url_bad)
{
    struct tm_url u;
    char err[256] = "";
    memset(&u, 0xff, sizeof u);
    ck_assert_msg(tm_url_parse(bad_urls[_i].url, &u, err, sizeof err) == -1,
                  "'%s' parsed", bad_urls[_i].url);
    ck_assert_msg(strstr(err, bad_urls[_i].msg) != NULL,
                  "'%s': '%s' lacks '%s'", bad_urls[_i].url, err,
                  bad_urls[_i].msg);
    /* Nothing is left allocated on failure. */
    ck_assert_ptr_null(u.scheme);
    ck_assert_ptr_null(u.host);
    ck_assert_ptr_null(u.user);
    ck_assert_ptr_null(u.password);
    ck_assert_ptr_null(u.redacted);
}
END_TEST

/* ------------------------------------------------- durations, sizes */

START_TEST(test_duration)
{
    static const struct {
        const char *s;
        int64_t ms;
    } good[] = {
        { "0", 0 }, { "0ms", 0 }, { "0s", 0 }, { "250ms", 250 },
        { "30s", 30000 }, { "5m", 300000 }, { "1h", 3600000 },
        { "1.5s", 1500 }, { "0.25s", 250 }, { "1.5m", 90000 },
        { "0.5h", 1800000 }, { "1.0005s", 1000 }, { "2.9ms", 2 },
        { "007s", 7000 },
        { "9223372036854775807ms", INT64_MAX },
    };
    static const char *const bad[] = {
        "", "30", "1.5", "00", "-1s", "+1s", "1.s", ".5s", "1 s", " 1s",
        "1s ", "1S", "1sec", "1d", "1us", "s", "ms", "1.5.5s", "1e3ms",
        "9223372036854775808ms", "2562047788015216h", "99999999999999999999s",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ms = -42;
        ck_assert_msg(tm_parse_duration(good[i].s, &ms) == 0, "%s",
                      good[i].s);
        ck_assert_msg(ms == good[i].ms, "%s: %lld", good[i].s,
                      (long long)ms);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = -42;
        ck_assert_msg(tm_parse_duration(bad[i], &ms) == -1, "'%s' parsed",
                      bad[i]);
        ck_assert_int_eq(ms, -42);
    }
}
END_TEST

START_TEST(test_size)
{
    static const struct {
        const char *s;
        size_t n;
    } good[] = {
        { "0", 0 }, { "1", 1 }, { "512B", 512 }, { "64KiB", 65536 },
        { "1MiB", 1048576 }, { "512MiB", (size_t)512 << 20 },
        { "2GiB", (size_t)2 << 30 }, { "4096", 4096 },
    };
    static const char *const bad[] = {
        "", "B", "-1", "+1", "1.5MiB", "1MB", "1KB", "1k", "1 KiB", "1mib",
        "1KiB ", "18446744073709551616", "18446744073709551615KiB",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t n = 42;
        ck_assert_msg(tm_parse_size(good[i].s, &n) == 0, "%s", good[i].s);
        ck_assert_msg(n == good[i].n, "%s: %zu", good[i].s, n);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = 42;
        ck_assert_msg(tm_parse_size(bad[i], &n) == -1, "'%s' parsed",
                      bad[i]);
        ck_assert_uint_eq(n, 42);
    }
}
END_TEST

/* ------------------------------------------------------- environment */

START_TEST(test_expand_env)
{
    char err[256];
    char *s;
    setenv("TM_TEST_A", "alpha", 1);
    setenv("TM_TEST_EMPTY", "", 1);
    unsetenv("TM_TEST_UNSET");

    static const struct {
        const char *in;
        const char *out;
    } cases[] = {
        { "", "" },
        { "plain", "plain" },
        { "${TM_TEST_A}", "alpha" },
        { "x${TM_TEST_A}y${TM_TEST_A}", "xalphayalpha" },
        { "${TM_TEST_EMPTY}", "" },
        { "${TM_TEST_UNSET:-dflt}", "dflt" },
        { "${TM_TEST_EMPTY:-dflt}", "dflt" },
        { "${TM_TEST_A:-dflt}", "alpha" },
        { "${TM_TEST_UNSET:-}", "" },
        { "${TM_TEST_UNSET:-a:-b}", "a:-b" },
        { "${TM_TEST_UNSET:-${TM_TEST_A}}", "alpha" },
        { "${TM_TEST_UNSET:-<${TM_TEST_UNSET:-in}>}", "<in>" },
        { "$", "$" },
        { "a$b", "a$b" },
        { "$$", "$$" },
        { "100$", "100$" },
        { "$${TM_TEST_A}", "${TM_TEST_A}" },
        { "$TM_TEST_A", "$TM_TEST_A" },
        { "}{", "}{" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s = tm_expand_env(cases[i].in, err, sizeof err);
        ck_assert_msg(s != NULL, "%s: %s", cases[i].in, err);
        ck_assert_str_eq(s, cases[i].out);
        tm_free(s);
    }

    /* The value of a variable is not expanded again. */
    setenv("TM_TEST_REF", "${TM_TEST_UNSET}", 1);
    s = tm_expand_env("${TM_TEST_REF}", err, sizeof err);
    ck_assert_str_eq(s, "${TM_TEST_UNSET}");
    tm_free(s);

    static const struct {
        const char *in;
        const char *msg;
    } bad[] = {
        { "${TM_TEST_UNSET}", "environment variable 'TM_TEST_UNSET' is not "
          "set (use ${TM_TEST_UNSET:-default} for a default)" },
        { "a ${TM_TEST_A} ${TM_TEST_UNSET}", "'TM_TEST_UNSET' is not set" },
        { "${TM_TEST_UNSET:-${TM_TEST_UNSET}}", "'TM_TEST_UNSET' is not "
          "set" },
        { "${", "unterminated '${'" },
        { "${TM_TEST_A", "unterminated '${TM_TEST_A'" },
        { "${TM_TEST_A:-x", "unterminated" },
        { "${}", "invalid variable reference '${}'" },
        { "${9A}", "invalid variable reference" },
        { "${A-B}", "invalid variable reference" },
        { "${A B}", "invalid variable reference" },
        { "${TM_TEST_UNSET:-${a:-${a:-${a:-${a:-${a:-${a:-${a:-${a:-${a:-x}"
          "}}}}}}}}}", "nested too deeply" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        s = tm_expand_env(bad[i].in, err, sizeof err);
        ck_assert_msg(s == NULL, "'%s' expanded", bad[i].in);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s': '%s'",
                      bad[i].in, err);
    }
    ck_assert_ptr_null(tm_expand_env("${TM_TEST_UNSET}", NULL, 0));
}
END_TEST


/* --------------------------------------------------------------- main */

START_TEST(test_telemetry)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text("tasks:\n  add: { plugin: add.so }\n",
                                   err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_ptr_null(cfg->otel_endpoint);
    ck_assert_ptr_null(cfg->otel_service_name);
    ck_assert_uint_eq(cfg->otel_nheaders, 0);
    ck_assert(cfg->otel_sample_ratio == 1.0);
    tm_cfg_free(cfg);
    cfg = load_text(
        "telemetry:\n  otlp_endpoint: https://otel.example:4318//\n"
        "  headers: { Authorization: 'Bearer t', x-tenant: a }\n"
        "  service_name: worker-a\n  sample_ratio: 0.25\n"
        "tasks:\n  add: { plugin: add.so }\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->otel_endpoint, "https://otel.example:4318");
    ck_assert_uint_eq(cfg->otel_nheaders, 2);
    ck_assert_str_eq(cfg->otel_headers[0].name, "Authorization");
    ck_assert_str_eq(cfg->otel_headers[0].value, "Bearer t");
    ck_assert_str_eq(cfg->otel_headers[1].name, "x-tenant");
    ck_assert_str_eq(cfg->otel_headers[1].value, "a");
    ck_assert_str_eq(cfg->otel_service_name, "worker-a");
    ck_assert(cfg->otel_sample_ratio == 0.25);
    tm_cfg_free(cfg);
    /* empty (an unset ${VAR:-}) means not set */
    cfg = load_text("telemetry:\n  otlp_endpoint: ''\n  sample_ratio: 0\n"
                    "tasks:\n  add: { plugin: add.so }\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_ptr_null(cfg->otel_endpoint);
    ck_assert(cfg->otel_sample_ratio == 0.0);
    tm_cfg_free(cfg);
}
END_TEST

static Suite *config_values_suite(void)
{
    Suite *s = suite_create("config_values");
    TCase *tc = tcase_create("values");
    tcase_add_test(tc, test_url_parse);
    tcase_add_loop_test(tc, test_url_bad, 0,
                        (int)(sizeof bad_urls / sizeof bad_urls[0]));
    tcase_add_test(tc, test_duration);
    tcase_add_test(tc, test_size);
    tcase_add_test(tc, test_expand_env);
    tcase_add_test(tc, test_telemetry);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_in_scratch_dir(config_values_suite());
}
