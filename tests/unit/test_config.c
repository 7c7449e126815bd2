/* test_config.c - unit tests for the YAML configuration (src/config/):
 * whole files that load, their defaults and derived values. Errors are
 * in test_config_errors.c, single values in test_config_values.c. */
#include "config_fixture.h"

#include <errno.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "taskmill.h"

/* ------------------------------------------------------------ full */

/* DESIGN.md's example, with an AMQP broker (priorities are refused on
 * Redis) and the password file made to exist. */
static const char design_example[] =
    "broker:\n"
    "  url: amqp://user:pa%40ss@mq.example:5673/prod  # or redis\n"
    "  password_file: secret   # optional; ${ENV_VAR} expanded\n"
    "pool:\n"
    "  kind: fork\n"
    "  size: 4\n"
    "  max_tasks_per_child: 100\n"
    "plugin_dir: plugins\n"
    "plugin_watch: true\n"
    "instance: worker-1\n"
    "http:\n"
    "  listen: 127.0.0.1:9999\n"
    "  token: ${TM_TEST_TOKEN}\n"
    "shutdown_timeout: 45s\n"
    "log: { level: debug, format: json }\n"
    "tasks:\n"
    "  add:\n"
    "    plugin: add.so\n"
    "    queue: taskmill.add\n"
    "    group: workers\n"
    "    prefetch: 32\n"
    "    timeout: 1.5s\n"
    "    claim_idle: 2m\n"
    "    maxlen: 100000\n"
    "    on_error: reject\n"
    "    max_retries: -1\n"
    "    backoff: 250ms\n"
    "    max_backoff: 1h\n"
    "    dead_letter: taskmill.add.dead\n"
    "    max_payload: 64KiB\n"
    "    max_priority: 5\n"
    "    priority: 2\n"
    "    config: { any: mapping, n: 3, f: 1.5, ok: true, none: ~,\n"
    "              s: \"42\", list: [1, two], env: \"${TM_TEST_TOKEN}\" }\n"
    "  sleep:\n"
    "    plugin: /opt/sleep.so\n";

START_TEST(test_design_example)
{
    char err[512] = "";
    char expect[PATH_MAX];
    setenv("TM_TEST_TOKEN", "s3cret", 1);
    write_file("secret", "from-file\n\n");
    struct tm_cfg *cfg = load_text(design_example, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);

    ck_assert_str_eq(cfg->broker_url,
                     "amqp://user:pa%40ss@mq.example:5673/prod");
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_AMQP);
    ck_assert_str_eq(cfg->url.user, "user");
    ck_assert_str_eq(cfg->url.password, "from-file");
    ck_assert_str_eq(cfg->url.host, "mq.example");
    ck_assert_int_eq(cfg->url.port, 5673);
    ck_assert_str_eq(cfg->url.vhost, "prod");
    ck_assert_str_eq(cfg->url.redacted, "amqp://mq.example:5673/prod");
    tm_snprintf(expect, sizeof expect, "%s/secret", g_dir);
    ck_assert_str_eq(cfg->password_file, expect);
    ck_assert_int_eq(cfg->pool_kind, TM_POOL_FORK);
    ck_assert_uint_eq(cfg->pool_size, 4);
    ck_assert_uint_eq(cfg->max_tasks_per_child, 100);
    tm_snprintf(expect, sizeof expect, "%s/plugins", g_dir);
    ck_assert_str_eq(cfg->plugin_dir, expect);
    ck_assert_str_eq(cfg->dir, g_dir);
    ck_assert(cfg->plugin_watch);
    ck_assert_str_eq(cfg->instance, "worker-1");
    ck_assert_str_eq(cfg->http_listen, "127.0.0.1:9999");
    ck_assert_str_eq(cfg->http_token, "s3cret");
    ck_assert_int_eq(cfg->shutdown_timeout_ms, 45000);
    ck_assert_int_eq(cfg->log_level, TM_LOG_DEBUG);
    ck_assert_int_eq(cfg->log_format, TM_LOG_JSON);

    ck_assert_uint_eq(cfg->ntasks, 2);
    const struct tm_cfg_task *t = tm_cfg_find_task(cfg, "add");
    ck_assert_ptr_eq(t, &cfg->tasks[0]);
    ck_assert_str_eq(t->name, "add");
    ck_assert_str_eq(t->plugin, "add.so");
    tm_snprintf(expect, sizeof expect, "%s/plugins/add.so", g_dir);
    ck_assert_str_eq(t->plugin_path, expect);
    ck_assert_str_eq(t->queue, "taskmill.add");
    ck_assert_str_eq(t->group, "workers");
    ck_assert_uint_eq(t->prefetch, 32);
    ck_assert_int_eq(t->timeout_ms, 1500);
    ck_assert_int_eq(t->claim_idle_ms, 120000);
    ck_assert_int_eq(t->maxlen, 100000);
    ck_assert_int_eq(t->on_error, TM_ON_ERROR_REJECT);
    ck_assert_int_eq(t->max_retries, -1);
    ck_assert_int_eq(t->backoff_ms, 250);
    ck_assert_int_eq(t->max_backoff_ms, 3600000);
    ck_assert_str_eq(t->dead_letter, "taskmill.add.dead");
    ck_assert_uint_eq(t->max_payload, 65536);
    ck_assert_int_eq(t->max_priority, 5);
    ck_assert_int_eq(t->priority, 2);
    ck_assert(t->has_priority);
    ck_assert(t->has_max_priority);
    ck_assert_int_eq(t->at.line, 17);
    ck_assert_int_eq(t->at.col, 3);
    ck_assert_int_eq(t->plugin_at.line, 18);
    ck_assert_int_eq(t->plugin_at.col, 13);
    ck_assert_str_eq(t->config_json,
                     "{\"any\":\"mapping\",\"n\":3,\"f\":1.5,\"ok\":true,"
                     "\"none\":null,\"s\":\"42\",\"list\":[1,\"two\"],"
                     "\"env\":\"s3cret\"}");

    t = tm_cfg_find_task(cfg, "sleep");
    ck_assert_ptr_eq(t, &cfg->tasks[1]);
    ck_assert_str_eq(t->plugin_path, "/opt/sleep.so");
    ck_assert_str_eq(t->queue, "taskmill.sleep");
    ck_assert_str_eq(t->dead_letter, "taskmill.sleep.dlq");
    ck_assert_str_eq(t->config_json, "{}");
    ck_assert(!t->has_priority);
    ck_assert_ptr_null(tm_cfg_find_task(cfg, "nope"));
    ck_assert_ptr_null(tm_cfg_find_task(cfg, "ad"));
    tm_cfg_free(cfg);
}
END_TEST

/* The example exactly as DESIGN.md prints it sets priorities with a Redis
 * URL, which the same document makes an error. */
START_TEST(test_design_example_redis_priority)
{
    char err[512] = "";
    char *yaml = tm_strdup(design_example);
    char *url = strstr(yaml, "amqp://user:pa%40ss@mq.example:5673/prod");
    ck_assert_ptr_nonnull(url);
    memset(url, ' ', 40);
    memcpy(url, "redis://mq.example:6379/0", 25);
    write_file("secret", "x\n");
    setenv("TM_TEST_TOKEN", "t", 1);
    ck_assert_ptr_null(load_text(yaml, err, sizeof err));
    ck_assert_msg(strstr(err, ":31:5: tasks.add.max_priority: priorities "
                         "are not supported on Redis streams") != NULL,
                  "%s", err);
    tm_free(yaml);
}
END_TEST

START_TEST(test_http_allowed_hosts)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text(
        "http:\n  listen: 127.0.0.1:9999\n"
        "  allowed_hosts: [TaskMill.Example.com, a-b.c, x, localhost]\n"
        "tasks:\n  add: { plugin: add.so }\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->http_nallowed_hosts, 4);
    ck_assert_str_eq(cfg->http_allowed_hosts[0], "taskmill.example.com");
    ck_assert_str_eq(cfg->http_allowed_hosts[1], "a-b.c");
    ck_assert_str_eq(cfg->http_allowed_hosts[2], "x");
    ck_assert_str_eq(cfg->http_allowed_hosts[3], "localhost");
    tm_cfg_free(cfg);
    cfg = load_text("http:\n  listen: 127.0.0.1:9999\n  allowed_hosts: []\n"
                    "tasks:\n  add: { plugin: add.so }\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->http_nallowed_hosts, 0);
    tm_cfg_free(cfg);
    static const char *const bad[] = {"[-a.example]", "[a-.example]",
                                      "[a..example]", "['a b']", "[.]", "[x.]",
                                      "['[::1]']", "{a: b}", "[[a]]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char yaml[256];
        tm_snprintf(yaml, sizeof yaml, "http:\n  listen: 127.0.0.1:9999\n"
                    "  allowed_hosts: %s\ntasks:\n  add: { plugin: add.so }\n",
                    bad[i]);
        cfg = load_text(yaml, err, sizeof err);
        ck_assert_msg(cfg == NULL, "accepted %s", bad[i]);
        ck_assert_msg(strstr(err, ":3:") != NULL &&
                          strstr(err, "http.allowed_hosts") != NULL,
                      "%s: %s", bad[i], err);
    }
}
END_TEST

START_TEST(test_defaults)
{
    char err[512] = "", host[256], expect[PATH_MAX];
    unsetenv("TM_TEST_TOKEN");
    struct tm_cfg *cfg = load_text(TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    tm_snprintf(expect, sizeof expect, "%s/c.yaml", g_dir);
    ck_assert_str_eq(cfg->path, expect);
    ck_assert_str_eq(cfg->broker_url, "redis://127.0.0.1:6379/0");
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_REDIS);
    ck_assert_str_eq(cfg->url.host, "127.0.0.1");
    ck_assert_int_eq(cfg->url.port, 6379);
    ck_assert_int_eq(cfg->url.db, 0);
    ck_assert_ptr_null(cfg->url.password);
    ck_assert_ptr_null(cfg->password_file);
    ck_assert_int_eq(cfg->pool_kind, TM_POOL_THREAD);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_uint_eq(cfg->pool_size, ncpu > 1024 ? 1024 :
                      ncpu < 1 ? 1 : (unsigned)ncpu);
    ck_assert_uint_eq(cfg->max_tasks_per_child, 0);
    tm_snprintf(expect, sizeof expect, "%s/plugins", g_dir);
    ck_assert_str_eq(cfg->plugin_dir, expect);
    ck_assert(!cfg->plugin_watch);
    ck_assert_int_eq(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    tm_snprintf(expect, sizeof expect, "%s-%ld", host, (long)getpid());
    ck_assert_str_eq(cfg->instance, expect);
    ck_assert_ptr_null(cfg->http_listen);
    ck_assert_ptr_null(cfg->http_token);
    ck_assert_uint_eq(cfg->http_nallowed_hosts, 0);
    ck_assert_int_eq(cfg->shutdown_timeout_ms, 30000);
    ck_assert_int_eq(cfg->log_level, TM_LOG_INFO);
    ck_assert_int_eq(cfg->log_format, TM_LOG_TEXT);
    ck_assert_uint_eq(cfg->ntasks, 1);
    const struct tm_cfg_task *t = &cfg->tasks[0];
    ck_assert_str_eq(t->plugin, "add.so");
    tm_snprintf(expect, sizeof expect, "%s/plugins/add.so", g_dir);
    ck_assert_str_eq(t->plugin_path, expect);
    ck_assert_str_eq(t->queue, "taskmill.add");
    ck_assert_str_eq(t->group, "taskmill");
    ck_assert_uint_eq(t->prefetch, 16);
    ck_assert_int_eq(t->timeout_ms, 30000);
    ck_assert_int_eq(t->claim_idle_ms, 60000);
    ck_assert_int_eq(t->maxlen, 0);
    ck_assert_int_eq(t->on_error, TM_ON_ERROR_REQUEUE);
    ck_assert_int_eq(t->max_retries, 3);
    ck_assert_int_eq(t->backoff_ms, 1000);
    ck_assert_int_eq(t->max_backoff_ms, 300000);
    ck_assert_str_eq(t->dead_letter, "taskmill.add.dlq");
    ck_assert_uint_eq(t->max_payload, 1024 * 1024);
    ck_assert_int_eq(t->max_priority, 0);
    ck_assert_int_eq(t->priority, 0);
    ck_assert(!t->has_priority && !t->has_max_priority);
    ck_assert_str_eq(t->config_json, "{}");
    ck_assert_uint_eq(t->circuit_failures, 5);
    ck_assert_int_eq(t->circuit_cool_off_ms, 5000);
    ck_assert_int_eq(t->circuit_max_cool_off_ms, 300000);
    ck_assert_uint_eq(t->rate_count, 0);
    ck_assert_int_eq(t->rate_period_ms, 0);
    ck_assert_uint_eq(t->concurrency, 0);
    ck_assert_int_eq(t->dedup_ttl_ms, 0);
    ck_assert_int_eq(t->reply_ttl_ms, 300000);
    tm_cfg_free(cfg);
}
END_TEST

/* The flow-control keys: rate_limit's units, concurrency, the TTLs. */
START_TEST(test_flow_keys)
{
    static const struct { const char *rate; uint32_t n; int64_t ms; } ok[] = {
        { "100/s", 100, 1000 }, { "30/m", 30, 60000 }, { "7/h", 7, 3600000 },
        { "1/sec", 1, 1000 }, { "2/min", 2, 60000 }, { "3/hour", 3, 3600000 },
        { "1000000000/s", 1000000000u, 1000 },
    };
    char text[512], err[512] = "";
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tm_snprintf(text, sizeof text,
                    TASK "    rate_limit: %s\n    concurrency: 3\n"
                    "    dedup_ttl: 10m\n    reply_ttl: 30s\n", ok[i].rate);
        struct tm_cfg *cfg = load_text(text, err, sizeof err);
        ck_assert_msg(cfg != NULL, "%s: %s", ok[i].rate, err);
        const struct tm_cfg_task *t = tm_cfg_find_task(cfg, "add");
        ck_assert_uint_eq(t->rate_count, ok[i].n);
        ck_assert_int_eq(t->rate_period_ms, ok[i].ms);
        ck_assert_uint_eq(t->concurrency, 3);
        ck_assert_int_eq(t->dedup_ttl_ms, 600000);
        ck_assert_int_eq(t->reply_ttl_ms, 30000);
        tm_cfg_free(cfg);
    }
    static const char *const bad[] = {
        "0/s", "-1/s", "10/day", "10", "/s", "1.5/s", "10/s/s",
        "1000000001/s", "x/s", "10 /s",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_snprintf(text, sizeof text, TASK "    rate_limit: \"%s\"\n",
                    bad[i]);
        struct tm_cfg *cfg = load_text(text, err, sizeof err);
        ck_assert_msg(cfg == NULL, "%s accepted", bad[i]);
        ck_assert_msg(strstr(err, ":4:17: tasks.add.rate_limit: ") != NULL &&
                      strstr(err, "expected a rate like 100/s") != NULL,
                      "%s: %s", bad[i], err);
    }
}
END_TEST

/* Smaller defaults that follow from other keys. */
START_TEST(test_derived_defaults)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text(
        "plugin_dir: ./lib/plugins/\n"
        "instance: ''\n"
        "http: { listen: '[::1]:0', token: '' }\n"
        "log: { level: warn }\n"
        "tasks:\n"
        "  a.b-c_1:\n"
        "    plugin: sub/x.so\n"
        "    queue: jobs\n"
        "    backoff: 10m\n"
        "    circuit_failures: 0\n"
        "    circuit_cool_off: 10m\n"
        "    config:\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    char expect[PATH_MAX];
    tm_snprintf(expect, sizeof expect, "%s/lib/plugins", g_dir);
    ck_assert_str_eq(cfg->plugin_dir, expect);
    tm_snprintf(expect, sizeof expect, "%s/lib/plugins/sub/x.so", g_dir);
    ck_assert_str_eq(cfg->tasks[0].plugin_path, expect);
    ck_assert_ptr_nonnull(cfg->instance);
    ck_assert(cfg->instance[0] != '\0');
    ck_assert_str_eq(cfg->http_listen, "[::1]:0");
    ck_assert_ptr_null(cfg->http_token);
    ck_assert_int_eq(cfg->log_level, TM_LOG_WARNING);
    ck_assert_int_eq(cfg->log_format, TM_LOG_TEXT);
    const struct tm_cfg_task *t = tm_cfg_find_task(cfg, "a.b-c_1");
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(t->queue, "jobs");
    ck_assert_str_eq(t->dead_letter, "jobs.dlq");
    /* max_backoff follows a backoff above its default. */
    ck_assert_int_eq(t->backoff_ms, 600000);
    ck_assert_int_eq(t->max_backoff_ms, 600000);
    /* so does circuit_max_cool_off a circuit_cool_off above it */
    ck_assert_uint_eq(t->circuit_failures, 0);
    ck_assert_int_eq(t->circuit_cool_off_ms, 600000);
    ck_assert_int_eq(t->circuit_max_cool_off_ms, 600000);
    ck_assert_str_eq(t->config_json, "{}");
    tm_cfg_free(cfg);
}
END_TEST

START_TEST(test_http_without_listen)
{
    char err[512] = "";
    setenv("TM_TEST_TOKEN", "", 1);
    struct tm_cfg *cfg = load_text(
        "http:\n  token: ${TM_TEST_TOKEN}\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_ptr_null(cfg->http_listen);
    ck_assert_ptr_null(cfg->http_token);
    tm_cfg_free(cfg);

    cfg = load_text("http:\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_ptr_null(cfg->http_listen);
    tm_cfg_free(cfg);
}
END_TEST

START_TEST(test_env_in_config)
{
    char err[512] = "";
    setenv("TM_TEST_URL", "redis://:pw@10.0.0.7:7000/3", 1);
    setenv("TM_TEST_EMPTY", "", 1);
    unsetenv("TM_TEST_UNSET");
    struct tm_cfg *cfg = load_text(
        "broker: { url: \"${TM_TEST_URL}\" }\n"
        "pool: { size: '${TM_TEST_UNSET:-${TM_TEST_EMPTY:-7}}' }\n"
        "instance: cost-$5-$$-$${HOME}\n"
        "shutdown_timeout: ${TM_TEST_UNSET:-2s}\n"
        "tasks:\n"
        "  add:\n"
        "    plugin: ${TM_TEST_UNSET:-add}.so\n"
        "    config:\n"
        "      port: ${TM_TEST_UNSET:-8080}\n"
        "      e: x${TM_TEST_EMPTY}\n"
        "      blank: ${TM_TEST_EMPTY}\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->broker_url, "redis://:pw@10.0.0.7:7000/3");
    ck_assert_ptr_null(cfg->url.user);
    ck_assert_str_eq(cfg->url.password, "pw");
    ck_assert_str_eq(cfg->url.host, "10.0.0.7");
    ck_assert_int_eq(cfg->url.port, 7000);
    ck_assert_int_eq(cfg->url.db, 3);
    ck_assert_str_eq(cfg->url.redacted, "redis://10.0.0.7:7000/3");
    ck_assert_uint_eq(cfg->pool_size, 7);
    ck_assert_str_eq(cfg->instance, "cost-$5-$$-${HOME}");
    ck_assert_int_eq(cfg->shutdown_timeout_ms, 2000);
    ck_assert_str_eq(cfg->tasks[0].plugin, "add.so");
    ck_assert_str_eq(cfg->tasks[0].config_json,
                     "{\"port\":8080,\"e\":\"x\",\"blank\":\"\"}");
    tm_cfg_free(cfg);
}
END_TEST

/* A task's config: key and its top-level keys keep their places, for the
 * refusals of a plugin (the descriptor's config_keys). */
START_TEST(test_config_key_places)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text(
        "broker: { url: \"redis://127.0.0.1/0\" }\n"
        "tasks:\n"
        "  a:\n"
        "    plugin: add.so\n"
        "    config:\n"
        "      module: m\n"
        "      nested: { inner: 1 }\n"
        "  b: { plugin: add.so, config: { x: 1 } }\n"
        "  c: { plugin: add.so }\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    const struct tm_cfg_task *a = &cfg->tasks[0];
    ck_assert_int_eq(a->config_at.line, 5);
    ck_assert_int_eq(a->config_at.col, 5);
    ck_assert_uint_eq(a->nconfig_keys, 2);
    ck_assert_str_eq(a->config_keys[0].name, "module");
    ck_assert_int_eq(a->config_keys[0].at.line, 6);
    ck_assert_int_eq(a->config_keys[0].at.col, 7);
    ck_assert_str_eq(a->config_keys[1].name, "nested");
    ck_assert_int_eq(a->config_keys[1].at.line, 7);
    const struct tm_cfg_task *b = &cfg->tasks[1];
    ck_assert_int_eq(b->config_at.line, 8);
    ck_assert_int_eq(b->config_at.col, 24);
    ck_assert_uint_eq(b->nconfig_keys, 1);
    ck_assert_str_eq(b->config_keys[0].name, "x");
    ck_assert_int_eq(b->config_keys[0].at.col, 34);
    const struct tm_cfg_task *c = &cfg->tasks[2];
    ck_assert_int_eq(c->config_at.line, 0);
    ck_assert_uint_eq(c->nconfig_keys, 0);
    tm_cfg_free(cfg);
}
END_TEST

START_TEST(test_password_file)
{
    char err[512] = "";
    write_file("pw", "p@ss word\r\n");
    struct tm_cfg *cfg = load_text(
        "broker:\n"
        "  password_file: pw\n"
        "  url: redis://:inurl@h/1\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->url.password, "p@ss word");
    ck_assert_str_eq(cfg->url.host, "h");
    ck_assert_int_eq(cfg->url.db, 1);
    /* The secret never reaches the redacted URL. */
    ck_assert_ptr_null(strstr(cfg->url.redacted, "p@ss"));
    tm_cfg_free(cfg);

    /* An absolute path, and the default URL when url is absent. */
    char yaml[PATH_MAX + 128];
    tm_snprintf(yaml, sizeof yaml, "broker: { password_file: '%s/pw' }\n"
                TASK, g_dir);
    cfg = load_text(yaml, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_str_eq(cfg->url.password, "p@ss word");
    ck_assert_str_eq(cfg->url.host, "127.0.0.1");
    tm_cfg_free(cfg);

    write_file("empty", "\n");
    expect_error("broker:\n  password_file: empty\n" TASK, "2:18",
                 "broker.password_file: '");
    expect_error("broker:\n  password_file: empty\n" TASK, "2:18",
                 "is empty");
}
END_TEST

START_TEST(test_missing_file)
{
    char err[512] = "", path[PATH_MAX + 32], expect[PATH_MAX + 64];
    tm_snprintf(path, sizeof path, "%s/does-not-exist.yaml", g_dir);
    ck_assert_ptr_null(tm_cfg_load(path, err, sizeof err));
    tm_snprintf(expect, sizeof expect,
                "cannot open %s: No such file or directory", path);
    ck_assert_str_eq(err, expect);

    ck_assert_ptr_null(tm_cfg_load(g_dir, err, sizeof err));
    tm_snprintf(expect, sizeof expect, "cannot read %s: Is a directory",
                g_dir);
    ck_assert_str_eq(err, expect);

    size_t n = 99;
    ck_assert_ptr_null(tm_cfg_load_all(path, 20, err, sizeof err, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_msg(strncmp(err, "cannot open ", 12) == 0, "%s", err);
}
END_TEST

/* count_lines counts the '\n'-separated lines of a non-empty text. */
static size_t count_lines(const char *s)
{
    size_t n = 1;
    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* tm_cfg_load_all reports every error of a file, in file order, each at
 * its own position, without errors that only follow from another one. */
START_TEST(test_all_errors)
{
    static const char yaml[] =
        "broker: { url: redis://127.0.0.1:6379/0, colour: red }\n" /* 1 */
        "pool: { kind: banana }\n"                                 /* 2 */
        "shutdown_timeout: 10 parsecs\n"                           /* 3 */
        "bogus: 1\n"                                               /* 4 */
        "tasks:\n"                                                 /* 5 */
        "  a: { plugin: a.so, timeout: soon, prefetch: 0 }\n"      /* 6 */
        "  b/c: { plugin: b.so }\n"                                /* 7 */
        "  d: { queue: q.d }\n"                                    /* 8 */
        "  e: { plugin: e.so, priority: 1 }\n";                    /* 9 */
    char err[8192];
    size_t n = 0;
    const char *path = write_file("many.yaml", yaml);
    ck_assert_ptr_null(tm_cfg_load_all(path, 20, err, sizeof err, &n));
    if (getenv("TM_TEST_SHOW_ERRORS") != NULL)
        fprintf(stderr, "%s\n", err);
    static const char *const want[] = {
        ":1:42: unknown key 'colour' in broker",
        ":2:15: pool.kind: unknown value 'banana'",
        ":3:19: shutdown_timeout: expected",
        ":4:1: unknown key 'bogus'",
        ":6:31: tasks.a.timeout: expected",
        ":6:47: tasks.a.prefetch: expected an integer from 1 to 65535",
        ":7:3: tasks: invalid task name 'b/c'",
        ":8:3: tasks.d: missing required key 'plugin'",
        ":9:22: tasks.e.priority: priorities are not supported on Redis",
    };
    size_t nwant = sizeof want / sizeof want[0];
    ck_assert_uint_eq(n, nwant);
    ck_assert_uint_eq(count_lines(err), nwant);
    const char *line = err;
    for (size_t i = 0; i < nwant; i++) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        ck_assert_msg(strncmp(line, path, strlen(path)) == 0 &&
                      memmem(line, len, want[i], strlen(want[i])) != NULL,
                      "error %zu is '%.*s', expected '%s'", i + 1, (int)len,
                      line, want[i]);
        line = end != NULL ? end + 1 : line + len;
    }

    /* tm_cfg_load reports the first of them only */
    ck_assert_ptr_null(tm_cfg_load(path, err, sizeof err));
    ck_assert_msg(strchr(err, '\n') == NULL && strstr(err, want[0]) != NULL,
                  "%s", err);

    /* at the cap, checking stops */
    ck_assert_ptr_null(tm_cfg_load_all(path, 3, err, sizeof err, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(count_lines(err), 3);
    ck_assert_msg(strstr(err, want[2]) != NULL, "%s", err);

    /* a bad broker.url is one error, not one per task that needs it */
    path = write_file("url.yaml", "broker: { url: 'amqp://x:99999/' }\n"
                      "tasks:\n  e: { plugin: e.so, max_priority: 2 }\n");
    ck_assert_ptr_null(tm_cfg_load_all(path, 20, err, sizeof err, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_msg(strstr(err, "broker.url") != NULL, "%s", err);

    /* a valid file: no error, *nerrors 0 */
    path = write_file("good.yaml", TASK);
    struct tm_cfg *cfg = tm_cfg_load_all(path, 20, err, sizeof err, &n);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_uint_eq(n, 0);
    tm_cfg_free(cfg);
}
END_TEST

/* Errors past a small buffer are cut, never overrun it. */
START_TEST(test_all_errors_small_buffer)
{
    char err[64];
    memset(err, 'x', sizeof err);
    const char *path = write_file("many2.yaml", "a: 1\nb: 2\nc: 3\n" TASK);
    size_t n = 0;
    ck_assert_ptr_null(tm_cfg_load_all(path, 20, err, 40, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(strlen(err), 39);
    ck_assert_int_eq(err[40], 'x');
}
END_TEST

/* A tiny error buffer is filled, terminated and not overrun. */
START_TEST(test_small_err_buffer)
{
    char err[16];
    memset(err, 'x', sizeof err);
    write_file("tiny.yaml", "tasks: 5\n");
    char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/tiny.yaml", g_dir);
    ck_assert_ptr_null(tm_cfg_load(path, err, 8));
    ck_assert_uint_eq(strlen(err), 7);
    ck_assert_int_eq(err[8], 'x');
    ck_assert_ptr_null(tm_cfg_load(path, NULL, 0));
}
END_TEST

/* The shipped conf/taskmill.yaml loads and shows every key. */
START_TEST(test_shipped_config)
{
    const char *src = getenv("TM_SRCDIR");
    char path[PATH_MAX], err[512] = "", expect[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/conf/taskmill.yaml",
                src != NULL ? src : ".");
    unsetenv("TASKMILL_HTTP_TOKEN");
    unsetenv("TASKMILL_BROKER_URL");
    unsetenv("TASKMILL_INSTANCE");
    struct tm_cfg *cfg = tm_cfg_load(path, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_REDIS);
    ck_assert_str_eq(cfg->http_listen, "127.0.0.1:9999");
    ck_assert_ptr_null(cfg->http_token);
    ck_assert_ptr_null(cfg->password_file);
    ck_assert_ptr_nonnull(strstr(cfg->plugin_dir, "/conf/../build/plugins"));
    tm_snprintf(expect, sizeof expect, "%s/add.so", cfg->plugin_dir);
    ck_assert_ptr_nonnull(tm_cfg_find_task(cfg, "add"));
    ck_assert_str_eq(tm_cfg_find_task(cfg, "add")->plugin_path, expect);
    ck_assert_ptr_nonnull(tm_cfg_find_task(cfg, "noop"));
    ck_assert_ptr_nonnull(tm_cfg_find_task(cfg, "sleep"));
    tm_cfg_free(cfg);

    /* Each documented key is present (or shown commented out). */
    static const char *const keys[] = {
        "url:", "password_file:", "kind:", "size:", "max_tasks_per_child:",
        "plugin_dir:", "plugin_watch:", "instance:", "listen:", "token:",
        "shutdown_timeout:", "level:", "format:", "plugin:", "queue:",
        "group:", "prefetch:", "timeout:", "claim_idle:", "maxlen:",
        "on_error:", "max_retries:", "backoff:", "max_backoff:",
        "dead_letter:", "max_payload:", "max_priority:", "priority:",
        "config:", "circuit_failures:", "circuit_cool_off:",
        "circuit_max_cool_off:", "schedules:", "cron:", "every:",
        "timezone:", "body:", "catch_up:", "tls:", "ca_file:", "cert_file:",
        "key_file:", "server_name:", "verify:", "redis:", "mode:",
        "master:", "amqp:", "queue_type:", "heartbeat:", "rate_limit:",
        "concurrency:", "dedup_ttl:", "reply_ttl:"
    };
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(strstr(text, keys[i]) != NULL, "no %s", keys[i]);

    /* The commented-out schedules example loads once uncommented: the
     * lines from "# schedules:" to the end, without their "# ". */
    const char *ex = strstr(text, "\n# schedules:\n");
    ck_assert_ptr_nonnull(ex);
    static char yaml[65536];
    size_t used = tm_snprintf(yaml, sizeof yaml, "%.*s",
                              (int)(ex + 1 - text), text);
    for (const char *line = ex + 1; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
        ck_assert_msg(len >= 2 && strncmp(line, "# ", 2) == 0,
                      "not a commented-out line: %.*s", (int)len, line);
        used += tm_snprintf(yaml + used, sizeof yaml - used, "%.*s\n",
                            (int)len - 2, line + 2);
        line += len + (nl != NULL);
    }
    cfg = load_text(yaml, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nschedules, 2);
    ck_assert_str_eq(cfg->schedules[0].name, "nightly-report");
    ck_assert_str_eq(cfg->schedules[0].timezone, "Europe/Berlin");
    ck_assert_int_eq(cfg->schedules[1].spec.every_ms, 30000);
    tm_cfg_free(cfg);

    /* With a RabbitMQ URL from the environment it loads too. */
    setenv("TASKMILL_BROKER_URL", "amqps://u:p@rabbit/%2f", 1);
    setenv("TASKMILL_HTTP_TOKEN", "tok", 1);
    cfg = tm_cfg_load(path, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_AMQP);
    ck_assert(cfg->url.tls);
    ck_assert_int_eq(cfg->url.port, 5671);
    ck_assert_str_eq(cfg->url.vhost, "/");
    ck_assert_str_eq(cfg->http_token, "tok");
    tm_cfg_free(cfg);
    unsetenv("TASKMILL_BROKER_URL");
    unsetenv("TASKMILL_HTTP_TOKEN");
}
END_TEST

/* schedules: each compiled (cron and zone, or every), with defaults */
START_TEST(test_schedules)
{
    char err[512] = "";
    int64_t slot;
    setenv("TM_TEST_CRON", "0 3 * * *", 1);
    struct tm_cfg *cfg = load_text(
        TASK
        "  noop:\n"
        "    plugin: noop.so\n"
        "schedules:\n"
        "  nightly-report:\n"
        "    task: add\n"
        "    cron: \"0 3 * * *\"\n"
        "    timezone: Europe/Berlin\n"
        "    body: { a: 1, b: \"two\" }\n"
        "    catch_up: once\n"
        "  heartbeat:\n"
        "    every: 30s\n"
        "    task: noop\n"
        "  env.cron_1:\n"
        "    task: add\n"
        "    cron: ${TM_TEST_CRON}\n"
        "    body: ~\n"
        "    catch_up: skip\n",
        err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nschedules, 3);

    const struct tm_cfg_schedule *s = &cfg->schedules[0];
    ck_assert_ptr_eq(tm_cfg_find_schedule(cfg, "nightly-report"), s);
    ck_assert_str_eq(s->task, "add");
    ck_assert_int_eq(s->spec.kind, TM_SCHED_CRON);
    ck_assert_str_eq(s->spec_text, "0 3 * * *");
    ck_assert_str_eq(s->timezone, "Europe/Berlin");
    ck_assert_ptr_eq(s->spec.tz, s->tz);
    ck_assert_str_eq(tm_tz_name(s->tz), "Europe/Berlin");
    ck_assert_str_eq(s->body_json, "{\"a\":1,\"b\":\"two\"}");
    ck_assert_int_eq(s->catch_up, TM_CATCH_UP_ONCE);
    ck_assert_int_eq(s->at.line, 7);
    ck_assert_int_eq(s->at.col, 3);
    /* 03:00 in Berlin is 01:00Z in summer (2026-07-01 is 1782864000 s) */
    ck_assert_int_eq(tm_sched_next(&s->spec, 1782864000000LL, &slot), 0);
    ck_assert_int_eq(slot, 1782864000000LL + 3600000);

    s = tm_cfg_find_schedule(cfg, "heartbeat");
    ck_assert_ptr_eq(s, &cfg->schedules[1]);
    ck_assert_int_eq(s->spec.kind, TM_SCHED_EVERY);
    ck_assert_int_eq(s->spec.every_ms, 30000);
    ck_assert_str_eq(s->spec_text, "30s");
    ck_assert_ptr_null(s->tz);
    ck_assert_ptr_null(s->timezone);
    ck_assert_str_eq(s->body_json, "{}");
    ck_assert_int_eq(s->catch_up, TM_CATCH_UP_SKIP);
    ck_assert_int_eq(tm_sched_next(&s->spec, 1782864000001LL, &slot), 0);
    ck_assert_int_eq(slot, 1782864030000LL);

    s = tm_cfg_find_schedule(cfg, "env.cron_1");
    ck_assert_str_eq(s->spec_text, "0 3 * * *");
    ck_assert_str_eq(s->timezone, "UTC");
    ck_assert_str_eq(tm_tz_name(s->spec.tz), "UTC");
    ck_assert_str_eq(s->body_json, "{}");
    ck_assert_int_eq(tm_sched_next(&s->spec, 1782864000000LL, &slot), 0);
    ck_assert_int_eq(slot, 1782864000000LL + 3 * 3600000);
    ck_assert_ptr_null(tm_cfg_find_schedule(cfg, "nope"));
    tm_cfg_free(cfg);

    /* no schedules at all, or an empty section */
    cfg = load_text(TASK "schedules:\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nschedules, 0);
    tm_cfg_free(cfg);
    unsetenv("TM_TEST_CRON");
}
END_TEST

/* Every bad schedule is reported, in file order, and none leaks. */
START_TEST(test_schedules_all_errors)
{
    char err[2048] = "";
    size_t nerr = 0;
    const char *path = write_file("bad.yaml",
        TASK
        "schedules:\n"
        "  a:\n"
        "    task: add\n"
        "    cron: '0 0 31 2 *'\n"
        "    timezone: Europe/Berlin\n"
        "  b:\n"
        "    task: nope\n"
        "    every: 1s\n"
        "  c:\n"
        "    task: add\n"
        "    every: 1h\n"
        "    timezone: UTC\n");
    struct tm_cfg *cfg = tm_cfg_load_all(path, 10, err, sizeof err, &nerr);
    ck_assert_ptr_null(cfg);
    ck_assert_uint_eq(nerr, 3);
    ck_assert_msg(strstr(err, ":7:16: schedules.a.cron: field 3") != NULL,
                  "%s", err);
    ck_assert_msg(strstr(err, ":15:5: schedules.c.timezone: applies to "
                  "cron only") != NULL, "%s", err);
    ck_assert_msg(strstr(err, ":10:11: schedules.b.task: unknown task "
                  "'nope'") != NULL, "%s", err);
}
END_TEST

START_TEST(test_free_null)
{
    tm_cfg_free(NULL);
    tm_url_clear(NULL);
    ck_assert_ptr_null(tm_cfg_find_task(NULL, "x"));
}
END_TEST


/* --------------------------------------------------------------- main */

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_design_example);
    tcase_add_test(tc, test_config_key_places);
    tcase_add_test(tc, test_design_example_redis_priority);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_http_allowed_hosts);
    tcase_add_test(tc, test_flow_keys);
    tcase_add_test(tc, test_derived_defaults);
    tcase_add_test(tc, test_http_without_listen);
    tcase_add_test(tc, test_env_in_config);
    tcase_add_test(tc, test_password_file);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_all_errors);
    tcase_add_test(tc, test_all_errors_small_buffer);
    tcase_add_test(tc, test_small_err_buffer);
    tcase_add_test(tc, test_shipped_config);
    tcase_add_test(tc, test_free_null);
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_schedules_all_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_in_scratch_dir(config_suite());
}
