/* test_config.c - unit tests for the YAML configuration (src/config/). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* mkdtemp, setenv */
#endif

#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "taskmill.h"
#include "util.h"

/* The scratch directory every test writes its YAML files into. */
static char g_dir[64];

/* write_file writes text to g_dir/name; returns the path (static). */
static const char *write_file(const char *name, const char *text)
{
    static char path[PATH_MAX];
    tm_snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static struct tm_cfg *load_text(const char *text, char *err, size_t errlen)
{
    return tm_cfg_load(write_file("c.yaml", text), err, errlen);
}

/* expect_error loads yaml and checks the error is one line starting with
 * "FILE:POS: " and containing msg. */
static void expect_error(const char *yaml, const char *pos, const char *msg)
{
    char err[1024], prefix[PATH_MAX + 32];
    const char *path = write_file("bad.yaml", yaml);
    memset(err, 'x', sizeof err);
    struct tm_cfg *cfg = tm_cfg_load(path, err, sizeof err);
    ck_assert_msg(cfg == NULL, "loaded, but expected '%s' at %s:\n%s", msg,
                  pos, yaml);
    if (getenv("TM_TEST_SHOW_ERRORS") != NULL)
        fprintf(stderr, "%s\n", err);
    tm_snprintf(prefix, sizeof prefix, "%s:%s: ", path, pos);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
                  "error '%s' does not start with '%s'", err, prefix);
    ck_assert_msg(strstr(err, msg) != NULL,
                  "error '%s' does not contain '%s'", err, msg);
    ck_assert_msg(strchr(err, '\n') == NULL, "error '%s' has a newline",
                  err);
}

#define TASK "tasks:\n  add:\n    plugin: add.so\n"
/* lines 4 to 6 of a config with a schedule; its keys follow on line 7 */
#define SCHED "schedules:\n  nightly:\n    task: add\n"

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

/* ------------------------------------------------------------- errors */

struct bad {
    const char *yaml;
    const char *pos;
    const char *msg;
};

static const struct bad bad_configs[] = {
    /* YAML syntax */
    { "tasks: add: x\n", "1:11",
      "mapping values are not allowed in this context" },
    { "tasks:\n\tadd: {plugin: a.so}\n", "2:1",
      "found character that cannot start any token (while scanning for the "
      "next token at line 2, column 1); indent with spaces, not tabs" },
    { "tasks:\n  add:\n    plugin add.so\n    queue: q\n", "4:10",
      "mapping values are not allowed in this context; is a ':' missing on "
      "a line above" },
    { "pool: {}\nplugin_dir\ntasks: {}\n", "3:1",
      "could not find expected ':' (while scanning a simple key at line 2, "
      "column 1); is a ':' missing after a key?" },
    { "tasks: [a, b\n", "2:1", "did not find expected ',' or ']'" },
    { "tasks: *nope\n", "1:8", "found undefined alias" },
    { "tasks:\n  add: {plugin: \xff}\n", "2:17", "invalid leading UTF-8" },
    { "", "1:1", "the config is empty" },
    { "# nothing\n", "1:1", "the config is empty" },
    { TASK "---\n" TASK, "4:1", "only one YAML document is allowed" },
    /* shape */
    { "- a\n- b\n", "1:1", "expected a mapping at the top level, got a "
      "sequence" },
    { "tasks: 5\n", "1:8", "tasks: expected a mapping, got a scalar" },
    { "tasks:\n  - add\n", "2:3", "tasks: expected a mapping, got a "
      "sequence" },
    { "tasks:\n", "1:1", "tasks: missing value" },
    { "tasks: {}\n", "1:8", "tasks: expected at least one task" },
    { "pool: {kind: thread}\n", "1:1", "missing required key 'tasks'" },
    { "pool: [thread]\n" TASK, "1:7", "pool: expected a mapping, got a "
      "sequence" },
    { "log: info\n" TASK, "1:6", "log: expected a mapping, got a scalar" },
    { "broker: redis://x\n" TASK, "1:9", "broker: expected a mapping" },
    { "http: [1]\n" TASK, "1:7", "http: expected a mapping" },
    { "tasks:\n  add: plugin.so\n", "2:8", "tasks.add: expected a mapping, "
      "got a scalar" },
    { "tasks:\n  add:\n    plugin: [a.so]\n", "3:13", "tasks.add.plugin: "
      "expected a scalar value, got a sequence" },
    { "tasks:\n  add:\n    plugin: a.so\n    [x]: 1\n", "4:5",
      "expected a key name in tasks.add, got a sequence" },
    { "tasks:\n  [x]: {plugin: a.so}\n", "2:3", "tasks: expected a task "
      "name, got a sequence" },
    { "tasks:\n  add:\n    plugin: a.so\n    queue:\n", "4:5",
      "tasks.add.queue: missing value" },
    { "tasks:\n  add:\n    plugin: a.so\n    queue: \"\"\n", "4:12",
      "tasks.add.queue: must not be empty" },
    { "tasks:\n  add:\n    plugin:\n", "3:5", "tasks.add.plugin: missing "
      "value" },
    /* unknown and duplicate keys */
    { TASK "foo: 1\n", "4:1", "unknown key 'foo'; expected one of: broker, "
      "pool, plugin_dir, plugin_watch, instance, http, shutdown_timeout, "
      "log, tasks" },
    { "pool:\n  kind: thread\n  sise: 4\n" TASK, "3:3",
      "unknown key 'sise' in pool; expected one of: kind, size, "
      "max_tasks_per_child" },
    { "broker: { uri: redis://h }\n" TASK, "1:11",
      "unknown key 'uri' in broker; expected one of: url, password_file, "
      "tls, redis, amqp" },
    { "http: { port: 80 }\n" TASK, "1:9",
      "unknown key 'port' in http; expected one of: listen, token" },
    { "log: { level: info, colour: no }\n" TASK, "1:21",
      "unknown key 'colour' in log; expected one of: level, format" },
    { TASK "    prefech: 4\n", "4:5", "unknown key 'prefech' in tasks.add; "
      "expected one of: plugin, queue, group, prefetch, timeout, "
      "claim_idle, maxlen, on_error, max_retries, backoff, max_backoff, "
      "dead_letter, max_payload, max_priority, priority, config" },
    { "tasks:\n  add:\n    queue: a\n    plugin: a.so\n    queue: b\n",
      "5:5", "duplicate key 'queue' in tasks.add" },
    { "tasks:\n  a: {plugin: a.so}\ntasks:\n  b: {plugin: b.so}\n", "3:1",
      "duplicate key 'tasks'" },
    { "tasks:\n  a: {plugin: a.so}\n  a: {plugin: b.so}\n", "3:3",
      "duplicate key 'a' in tasks" },
    { "log: { level: info, level: debug }\n" TASK, "1:21",
      "duplicate key 'level' in log" },
    { TASK "    config: { a: 1, b: { c: 2, c: 3 } }\n", "4:32",
      "duplicate key 'c' in tasks.add.config.b" },
    /* required keys and names */
    { "tasks:\n  add:\n    queue: q\n", "2:3",
      "tasks.add: missing required key 'plugin'" },
    { "tasks:\n  add:\n", "2:3", "tasks.add: missing required key "
      "'plugin'" },
    { "tasks:\n  'a b': {plugin: a.so}\n", "2:3",
      "tasks: invalid task name 'a b'; use letters, digits, '_', '.' and "
      "'-'" },
    { "tasks:\n  add{x}: {plugin: a.so}\n", "2:3", "invalid task name" },
    { "tasks:\n  '': {plugin: a.so}\n", "2:3", "invalid task name ''" },
    /* integers */
    { TASK "    prefetch: abc\n", "4:15", "tasks.add.prefetch: expected an "
      "integer from 1 to 65535, got 'abc'" },
    { TASK "    prefetch: 0\n", "4:15", "expected an integer from 1 to "
      "65535, got '0'" },
    { TASK "    prefetch: 65536\n", "4:15", "from 1 to 65535, got '65536'" },
    { TASK "    prefetch: 16x\n", "4:15", "got '16x'" },
    { TASK "    prefetch: +16\n", "4:15", "got '+16'" },
    { TASK "    prefetch: 1.5\n", "4:15", "got '1.5'" },
    { "pool: { size: 0 }\n" TASK, "1:15", "pool.size: expected an integer "
      "from 1 to 1024, got '0'" },
    { "pool: { size: 1025 }\n" TASK, "1:15", "pool.size: expected an "
      "integer from 1 to 1024" },
    { "pool: { max_tasks_per_child: -1 }\n" TASK, "1:30",
      "pool.max_tasks_per_child: expected an integer >= 0, got '-1'" },
    { "pool: { max_tasks_per_child: 99999999999 }\n" TASK, "1:30",
      "pool.max_tasks_per_child: expected an integer >= 0" },
    { TASK "    max_retries: -2\n", "4:18", "tasks.add.max_retries: "
      "expected an integer >= -1, got '-2'" },
    { TASK "    max_retries: 99999999999999999999\n", "4:18",
      "tasks.add.max_retries: expected an integer >= -1" },
    { TASK "    maxlen: -1\n", "4:13", "tasks.add.maxlen: expected an "
      "integer >= 0, got '-1'" },
    { TASK "    maxlen: 1e6\n", "4:13", "tasks.add.maxlen: expected an "
      "integer >= 0, got '1e6'" },
    /* durations */
    { TASK "    timeout: 30\n", "4:14", "tasks.add.timeout: expected a "
      "duration like 250ms, 30s, 5m, 1h, got '30' (a bare number is "
      "ambiguous" },
    { TASK "    timeout: -1s\n", "4:14", "tasks.add.timeout: expected a "
      "duration like 250ms, 30s, 5m, 1h, got '-1s'" },
    { TASK "    timeout: 30 s\n", "4:14", "got '30 s'" },
    { TASK "    timeout: 1d\n", "4:14", "got '1d'" },
    { TASK "    claim_idle: 0\n", "4:17", "tasks.add.claim_idle: must be "
      "greater than 0, got '0'" },
    { TASK "    claim_idle: 0ms\n", "4:17", "tasks.add.claim_idle: must be "
      "greater than 0" },
    { TASK "    backoff: 0s\n", "4:14", "tasks.add.backoff: must be greater "
      "than 0" },
    { TASK "    backoff: 10s\n    max_backoff: 5s\n", "5:18",
      "tasks.add.max_backoff: must be at least backoff (10s), got 5s" },
    { TASK "    max_backoff: 500ms\n", "4:18", "tasks.add.max_backoff: "
      "must be at least backoff (1s), got 500ms" },
    { TASK "    circuit_max_cool_off: 1s\n", "4:27",
      "tasks.add.circuit_max_cool_off: must be at least circuit_cool_off "
      "(5s), got 1s" },
    { TASK "    circuit_cool_off: 0s\n", "4:23", "tasks.add.circuit_cool_off: "
      "must be greater than 0" },
    { TASK "    circuit_failures: -1\n", "4:23", "tasks.add.circuit_failures: "
      "expected an integer" },
    { "shutdown_timeout: soon\n" TASK, "1:19", "shutdown_timeout: expected "
      "a duration like 250ms, 30s, 5m, 1h, got 'soon'" },
    { "shutdown_timeout: 99999999999999h\n" TASK, "1:19",
      "shutdown_timeout: duration '99999999999999h' is too long" },
    { "shutdown_timeout: 300000000h\n" TASK, "1:19",
      "shutdown_timeout: duration '300000000h' is too long" },
    /* sizes */
    { TASK "    max_payload: 1MB\n", "4:18", "tasks.add.max_payload: "
      "expected a size like 512B, 64KiB, 1MiB, got '1MB'" },
    { TASK "    max_payload: 0\n", "4:18", "tasks.add.max_payload: expected "
      "a size from 1B to 512MiB, got '0'" },
    { TASK "    max_payload: 513MiB\n", "4:18", "expected a size from 1B "
      "to 512MiB, got '513MiB'" },
    { TASK "    max_payload: -1\n", "4:18", "expected a size like" },
    /* enums and booleans */
    { "pool:\n  kind: forks\n" TASK, "2:9", "pool.kind: unknown value "
      "'forks'; expected one of: thread, fork" },
    { TASK "    on_error: retry\n", "4:15", "tasks.add.on_error: unknown "
      "value 'retry'; expected one of: requeue, reject" },
    { "log: { level: verbose, format: text }\n" TASK, "1:15",
      "log.level: unknown value 'verbose'; expected one of: error, "
      "warning, info, debug" },
    { "log: { format: xml }\n" TASK, "1:16", "log.format: unknown value "
      "'xml'; expected one of: text, json" },
    { "plugin_watch: maybe\n" TASK, "1:15", "plugin_watch: expected true "
      "or false, got 'maybe'" },
    { "plugin_watch: [true]\n" TASK, "1:15", "plugin_watch: expected a "
      "scalar value, got a sequence" },
    /* environment */
    { "instance: ${TM_TEST_UNSET}\n" TASK, "1:11",
      "instance: environment variable 'TM_TEST_UNSET' is not set (use "
      "${TM_TEST_UNSET:-default} for a default)" },
    { TASK "    queue: 'q-${TM_TEST_UNSET:-${TM_TEST_UNSET2}}'\n", "4:12",
      "environment variable 'TM_TEST_UNSET2' is not set" },
    { TASK "    config: { deep: [ x, \"${TM_TEST_UNSET}\" ] }\n", "4:26",
      "tasks.add.config.deep[1]: environment variable 'TM_TEST_UNSET' is "
      "not set" },
    { "instance: ${1X}\n" TASK, "1:11", "instance: invalid variable "
      "reference '${1X}'; expected ${NAME} or ${NAME:-default}" },
    { "instance: abc${HOME\n" TASK, "1:11", "instance: unterminated "
      "'${HOME'" },
    { "instance: ${HOME:=x}\n" TASK, "1:11", "invalid variable reference" },
    /* password_file */
    { "broker:\n  password_file: no-such-secret\n" TASK, "2:18",
      "broker.password_file: cannot read '" },
    { "broker:\n  password_file: no-such-secret\n" TASK, "2:18",
      "/no-such-secret': No such file or directory" },
    /* priorities */
    { TASK "    priority: 1\n", "4:5", "tasks.add.priority: priorities are "
      "not supported on Redis streams (RabbitMQ only)" },
    { TASK "    max_priority: 4\n    priority: 1\n"
      "broker: { url: 'redis://h' }\n", "4:5", "tasks.add.max_priority: "
      "priorities are not supported on Redis streams (RabbitMQ only)" },
    { "tasks:\n  add:\n    priority: 1\n    plugin: a.so\n"
      "    max_priority: 4\n", "3:5", "tasks.add.priority: priorities are "
      "not supported on Redis streams" },
    { "broker: {url: amqp://h}\n" TASK "    max_priority: 3\n"
      "    priority: 4\n", "6:15", "tasks.add.priority: 4 is above "
      "max_priority (3); expected an integer from 0 to 3" },
    { TASK "    priority: 2\nbroker: {url: amqp://h}\n", "4:15",
      "tasks.add.priority: 2 is above max_priority (0)" },
    { "broker: {url: amqp://h}\n" TASK "    max_priority: 256\n", "5:19",
      "tasks.add.max_priority: expected an integer from 0 to 255, got "
      "'256'" },
    { "broker: {url: amqp://h}\n" TASK "    priority: -1\n", "5:15",
      "tasks.add.priority: expected an integer from 0 to 255, got '-1'" },
    /* deduplication needs a shared store: Redis only */
    { "broker: {url: amqp://h}\n" TASK "    dedup_ttl: 1m\n", "5:5",
      "tasks.add.dedup_ttl: deduplication needs a store shared by every "
      "daemon of the queue, which RabbitMQ does not have" },
    { TASK "    dedup_ttl: 1m\nbroker: {url: amqp://h}\n", "4:5",
      "tasks.add.dedup_ttl: deduplication needs a store shared" },
    /* broker URL */
    { "broker:\n  url: http://x\n" TASK, "2:8", "broker.url: unknown scheme "
      "'http'; expected one of: redis, rediss, amqp, amqps" },
    /* broker section: lists of nodes, tls, redis, amqp */
    { "broker:\n  url: [amqp://a, redis://b]\n" TASK, "2:19",
      "broker.url[1]: scheme redis:// differs from the first node's "
      "amqp://" },
    { "broker:\n  url: [amqp://a, amqps://b]\n" TASK, "2:19",
      "broker.url[1]: scheme amqps:// differs" },
    { "broker:\n  url: [amqp://a, 'x:1']\n" TASK, "2:19",
      "broker.url[1]: expected a URL like" },
    { "broker:\n  url: [amqp://a, '']\n" TASK, "2:19",
      "broker.url[1]: must not be empty" },
    { "broker:\n  url: []\n" TASK, "2:8", "broker.url: an empty list" },
    { "broker:\n  url: [redis://a, redis://b]\n" TASK, "2:8",
      "broker.url: 2 URLs with broker.redis.mode: standalone (one server); "
      "use mode: sentinel (the URLs are the sentinels) or cluster" },
    { "broker:\n  url: amqps://h\n  tls:\n    cert_file: c.pem\n" TASK,
      "4:5", "broker.tls.cert_file: given without broker.tls.key_file" },
    { "broker:\n  url: amqps://h\n  tls: {key_file: k.pem}\n" TASK,
      "3:9", "broker.tls.key_file: given without broker.tls.cert_file" },
    { "broker:\n  url: amqp://h\n  tls: {verify: false}\n" TASK, "3:3",
      "broker.tls: TLS settings with a plain amqp:// URL; use amqps://" },
    { "broker:\n  tls: {ca_file: ca.pem}\n" TASK, "2:3",
      "broker.tls: TLS settings with a plain redis:// URL; use rediss://" },
    { "broker:\n  url: amqps://h\n  tls: {verify: maybe}\n" TASK, "3:17",
      "broker.tls.verify: expected true or false" },
    { "broker:\n  url: amqps://h\n  tls: {colour: red}\n" TASK, "3:9",
      "unknown key 'colour' in broker.tls; expected one of: ca_file, "
      "cert_file, key_file, server_name, verify" },
    { "broker:\n  url: redis://h\n  redis: {mode: sentinel}\n" TASK,
      "3:17", "broker.redis.mode: sentinel needs broker.redis.master" },
    { "broker:\n  url: redis://h\n  redis: {master: m}\n" TASK, "3:11",
      "broker.redis.master: only used with broker.redis.mode: sentinel" },
    { "broker:\n  url: redis://h\n  redis: {mode: ring}\n" TASK, "3:17",
      "broker.redis.mode: unknown value 'ring'; expected one of: "
      "standalone, sentinel, cluster" },
    { "broker:\n  url: amqp://h\n  redis: {mode: cluster}\n" TASK, "3:3",
      "broker.redis: Redis settings with an amqp:// URL" },
    { "broker:\n  url: redis://h\n  amqp: {queue_type: quorum}\n" TASK,
      "3:3", "broker.amqp: RabbitMQ settings with a redis:// URL" },
    { "broker:\n  url: amqp://h\n  amqp: {queue_type: stream}\n" TASK,
      "3:22", "broker.amqp.queue_type: unknown value 'stream'; expected one "
      "of: classic, quorum" },
    { "broker:\n  url: amqp://h\n  amqp: {heartbeat: 1500ms}\n" TASK,
      "3:21", "broker.amqp.heartbeat: expected whole seconds from 0 (off) "
      "to 65535s, got '1500ms'" },
    { "broker:\n  url: amqp://h\n  amqp: {heartbeat: 19h}\n" TASK,
      "3:21", "broker.amqp.heartbeat: expected whole seconds" },
    { "broker:\n  url: amqp://h\n  amqp: {queue_type: quorum}\n" TASK
      "    max_priority: 3\n", "7:5", "tasks.add.max_priority: priorities "
      "are not supported on quorum queues (broker.amqp.queue_type: quorum)" },
    { TASK "    max_priority: 3\nbroker:\n  url: amqp://h\n  amqp: "
      "{queue_type: quorum}\n", "4:5", "tasks.add.max_priority: priorities "
      "are not supported on quorum queues" },
    { "broker:\n  url: redis://h:99999/0\n" TASK, "2:8", "broker.url: "
      "invalid port '99999'; expected 1 to 65535" },
    { "broker:\n  url: redis://h/x\n" TASK, "2:8", "broker.url: invalid "
      "database number 'x'" },
    { "broker:\n  url: localhost:6379\n" TASK, "2:8", "broker.url: "
      "expected a URL like redis://host:6379/0" },
    { "broker:\n  url: ''\n" TASK, "2:8", "broker.url: must not be empty" },
    /* other values */
    { "http:\n  listen: 9999\n" TASK, "2:11", "http.listen: expected "
      "host:port like 127.0.0.1:9999, got '9999'" },
    { "http:\n  listen: 'localhost:http'\n" TASK, "2:11",
      "http.listen: expected host:port" },
    { "plugin_dir: ''\n" TASK, "1:13", "plugin_dir: must not be empty" },
    { TASK "    config: [1, 2]\n", "4:13", "tasks.add.config: expected a "
      "mapping, got a sequence" },
    { TASK "    config: '{\"a\": 1}'\n", "4:13", "tasks.add.config: "
      "expected a mapping, got a scalar" },
    { TASK "    queue: q\n    dead_letter: q\n", "5:18",
      "tasks.add.dead_letter: must differ from the queue 'q'" },
    { TASK "    queue: \"a\\0b\"\n", "4:12", "tasks.add.queue: contains a "
      "NUL character" },
    { TASK "    config: &a { x: *a }\n", "4:13", ".x.x.x.x: nested more "
      "than 64 levels deep" },
    /* schedules: */
    { TASK SCHED "    cron: '0 24 * * *'\n", "7:14",
      "schedules.nightly.cron: field 2 (hour) at column 3: expected 0-23, "
      "got '24'" },
    { TASK SCHED "    cron: 0 0 30 2 *\n", "7:15", "schedules.nightly.cron: "
      "field 3 (day-of-month) at column 5: no month of the spec has such a "
      "day: it never fires" },
    { TASK SCHED "    cron: \"*/5 * * * mon#\"\n", "7:25",
      "unexpected character '#'" },
    { TASK SCHED "    cron: '* * * *'\n", "7:19", "schedules.nightly.cron: "
      "4 fields, expected five" },
    { TASK SCHED "    cron: '0 3 * * *'\n    every: 30s\n", "8:5",
      "schedules.nightly.every: give either cron or every, not both" },
    { TASK SCHED, "5:3", "schedules.nightly: missing 'cron' or 'every'" },
    { TASK "schedules:\n  nightly:\n    every: 1m\n", "5:3",
      "schedules.nightly: missing required key 'task'" },
    { TASK "schedules:\n  nightly:\n    task: nope\n    every: 1m\n", "6:11",
      "schedules.nightly.task: unknown task 'nope'; expected a task of this "
      "file: add" },
    { TASK SCHED "    every: 1m\n    timezone: Europe/Berlin\n", "8:5",
      "schedules.nightly.timezone: applies to cron only; every slots are "
      "aligned to the Unix epoch (UTC)" },
    { TASK SCHED "    cron: '0 3 * * *'\n    timezone: Mars/Base\n", "8:15",
      "schedules.nightly.timezone: unknown time zone 'Mars/Base'" },
    { TASK SCHED "    cron: '0 3 * * *'\n    timezone: ../../etc/passwd\n",
      "8:15", "schedules.nightly.timezone: invalid time zone name" },
    { TASK SCHED "    every: 1m\n    tz: UTC\n", "8:5", "unknown key 'tz' in "
      "schedules.nightly; expected one of: task, cron, every, timezone, "
      "body, catch_up" },
    { TASK "schedules:\n  'bad name':\n    task: add\n    every: 1m\n",
      "5:3", "schedules: invalid schedule name 'bad name'; use letters, "
      "digits, '_', '.' and '-'" },
    { TASK SCHED "    every: 1m\n    catch_up: always\n", "8:15",
      "schedules.nightly.catch_up: unknown value 'always'; expected one of: "
      "skip, once" },
    { TASK SCHED "    every: 0\n", "7:12", "schedules.nightly.every: must be "
      "greater than 0" },
    { TASK SCHED "    every: 5 minutes\n", "7:12", "schedules.nightly.every: "
      "expected a duration like 250ms, 30s, 5m, 1h" },
    { TASK SCHED "    every: 1m\n    body: [1]\n", "8:11",
      "schedules.nightly.body: expected a mapping, got a sequence" },
    { TASK "schedules: [a]\n", "4:12", "schedules: expected a mapping, got "
      "a sequence" },
    { TASK "schedules:\n  nightly:\n", "5:3", "schedules.nightly: missing "
      "value" },
    { TASK "schedules:\n  a: {task: add, every: 1m}\n"
      "  a: {task: add, every: 2m}\n", "6:3",
      "duplicate key 'a' in schedules" },
};

START_TEST(test_bad_config)
{
    const struct bad *b = &bad_configs[_i];
    unsetenv("TM_TEST_UNSET");
    unsetenv("TM_TEST_UNSET2");
    expect_error(b->yaml, b->pos, b->msg);
}
END_TEST

/* A list of AMQP nodes: each parsed, url a copy of the first, the
 * password file's secret on every node; broker.tls and broker.amqp. */
START_TEST(test_broker_nodes)
{
    char err[512] = "";
    char expect[PATH_MAX];
    write_file("secret", "s3\n");
    struct tm_cfg *cfg = load_text(
        "broker:\n"
        "  url: [amqps://u@rmq-0:5671/, 'amqps://u@rmq-1:5681/v',\n"
        "        amqps://u@rmq-2]\n"
        "  password_file: secret\n"
        "  tls:\n"
        "    ca_file: ca.pem\n"
        "    cert_file: /etc/c.pem\n"
        "    key_file: c.key\n"
        "    server_name: rmq.internal\n"
        "    verify: false\n"
        "  amqp: { queue_type: quorum, heartbeat: 5s }\n" TASK,
        err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 3);
    ck_assert_str_eq(cfg->broker_url, "amqps://u@rmq-0:5671/, "
                     "amqps://u@rmq-1:5681/v, amqps://u@rmq-2");
    ck_assert_str_eq(cfg->url.host, "rmq-0");
    ck_assert_str_eq(cfg->url.password, "s3");
    ck_assert_str_eq(cfg->nodes[0].host, "rmq-0");
    ck_assert_str_eq(cfg->nodes[1].host, "rmq-1");
    ck_assert_int_eq(cfg->nodes[1].port, 5681);
    ck_assert_str_eq(cfg->nodes[1].vhost, "v");
    ck_assert_str_eq(cfg->nodes[2].host, "rmq-2");
    ck_assert_int_eq(cfg->nodes[2].port, 5671);
    for (size_t i = 0; i < cfg->nnodes; i++) {
        ck_assert(cfg->nodes[i].tls);
        ck_assert_str_eq(cfg->nodes[i].user, "u");
        ck_assert_str_eq(cfg->nodes[i].password, "s3");
    }
    ck_assert(cfg->has_tls);
    tm_snprintf(expect, sizeof expect, "%s/ca.pem", g_dir);
    ck_assert_str_eq(cfg->tls.ca_file, expect);
    ck_assert_str_eq(cfg->tls.cert_file, "/etc/c.pem");
    tm_snprintf(expect, sizeof expect, "%s/c.key", g_dir);
    ck_assert_str_eq(cfg->tls.key_file, expect);
    ck_assert_str_eq(cfg->tls.server_name, "rmq.internal");
    ck_assert(!cfg->tls.verify);
    ck_assert_int_eq(cfg->amqp_queue_type, TM_AMQP_QUORUM);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 5000);
    tm_cfg_free(cfg);

    /* defaults: one node, classic, 30 s heartbeat, verify on */
    cfg = load_text("broker: { url: amqp://h }\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->nodes[0].redacted, cfg->url.redacted);
    ck_assert(!cfg->has_tls);
    ck_assert(cfg->tls.verify);
    ck_assert_int_eq(cfg->amqp_queue_type, TM_AMQP_CLASSIC);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 30000);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_STANDALONE);
    tm_cfg_free(cfg);

    /* no broker key at all: the default URL is the one node */
    cfg = load_text(TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->nodes[0].host, "127.0.0.1");
    tm_cfg_free(cfg);

    /* heartbeat 0 turns heartbeats off */
    cfg = load_text("broker: { url: amqp://h, amqp: { heartbeat: 0 } }\n"
                    TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 0);
    tm_cfg_free(cfg);
}
END_TEST

/* Redis: rediss:// is accepted by the configuration (the adapter decides
 * whether it can connect), sentinel and cluster take lists. */
START_TEST(test_broker_redis_modes)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text("broker: { url: 'rediss://h:7000/2' }\n"
                                   TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_REDIS);
    ck_assert(cfg->url.tls);
    ck_assert_str_eq(cfg->url.scheme, "rediss");
    ck_assert_str_eq(cfg->url.redacted, "rediss://h:7000/2");
    tm_cfg_free(cfg);

    cfg = load_text("broker:\n"
                    "  url: [redis://s1:26379, redis://s2:26379]\n"
                    "  redis: { mode: sentinel, master: mymaster }\n" TASK,
                    err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_SENTINEL);
    ck_assert_str_eq(cfg->redis_master, "mymaster");
    ck_assert_uint_eq(cfg->nnodes, 2);
    ck_assert_int_eq(cfg->nodes[1].port, 26379);
    tm_cfg_free(cfg);

    cfg = load_text("broker:\n"
                    "  url:\n    - redis://c1:7000\n    - redis://c2:7000\n"
                    "  redis: { mode: cluster }\n"
                    "tasks:\n  add: { plugin: add.so, queue: '{add}' }\n",
                    err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_CLUSTER);
    ck_assert_ptr_null(cfg->redis_master);
    ck_assert_uint_eq(cfg->nnodes, 2);
    tm_cfg_free(cfg);

    /* cluster: a task whose keys do not share a slot gets a hash tag
     * proposed */
    cfg = load_text("broker:\n"
                    "  url: [redis://c1:7000, redis://c2:7000]\n"
                    "  redis: { mode: cluster }\n" TASK, err, sizeof err);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(err, "one hash slot") != NULL &&
                  strstr(err, "queue: '{taskmill.add}'") != NULL, "%s", err);

    /* cluster: database 0 only, said at the URL */
    cfg = load_text("broker:\n"
                    "  url: [redis://c1:7000, 'redis://:pw@c2:7000/3']\n"
                    "  redis: { mode: cluster }\n"
                    "tasks:\n  add: { plugin: add.so, queue: '{add}' }\n",
                    err, sizeof err);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(err, ":2:8: broker.url: database 3 in "
                          "'redis://c2:7000/3'; a Redis Cluster has "
                          "database 0 only") != NULL &&
                  strstr(err, "pw") == NULL, "%s", err);

    /* a one-element list is a single node */
    cfg = load_text("broker: { url: [redis://h] }\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->broker_url, "redis://h");
    tm_cfg_free(cfg);
}
END_TEST

/* The error names the key, never a secret from the URL. */
START_TEST(test_url_error_hides_password)
{
    char err[512] = "";
    ck_assert_ptr_null(load_text("broker: { url: 'redis://u:top/secret@h' }"
                                 "\n" TASK, err, sizeof err));
    ck_assert_ptr_null(strstr(err, "secret"));
    ck_assert_ptr_nonnull(strstr(err, "broker.url: "));
    ck_assert_ptr_null(load_text("broker: { url: 'ftp://u:secret@h' }\n"
                                 TASK, err, sizeof err));
    ck_assert_ptr_null(strstr(err, "secret"));
}
END_TEST

/* Control characters in a key name never break the one-line error. */
START_TEST(test_error_one_line)
{
    expect_error(TASK "    \"bad\\nkey\": 1\n", "4:5", "unknown key 'bad?key'");
}
END_TEST

/* Alias bombs are bounded instead of expanded. */
START_TEST(test_alias_bomb)
{
    static const char yaml[] =
        TASK
        "    config:\n"
        "      a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        "      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
        "      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    char err[512] = "";
    ck_assert_ptr_null(load_text(yaml, err, sizeof err));
    ck_assert_msg(strstr(err, "more than 100000 values") != NULL, "%s", err);
}
END_TEST

/* A small alias is fine and converts to JSON twice. */
START_TEST(test_config_json_types)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text(
        TASK
        "    config:\n"
        "      base: &b { host: db, port: 5432 }\n"
        "      copy: *b\n"
        "      ints: [0, -7, +3, 007, 0x1f, 0o17, 9223372036854775807]\n"
        "      big: [99999999999999999999, -00012, -0, +0]\n"
        "      floats: [1.5, -2.5e3, .5]\n"
        "      words: [yes, no, on, True, FALSE, Null, ~, nan, .inf, 0x]\n"
        "      quoted: ['1', \"true\", 'null']\n"
        "      block: |\n"
        "        line one\n"
        "        line two\n"
        "      empty: {}\n"
        "      \"sp ace\": ''\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    const char *j = cfg->tasks[0].config_json;
    ck_assert_str_eq(j,
        "{\"base\":{\"host\":\"db\",\"port\":5432},"
        "\"copy\":{\"host\":\"db\",\"port\":5432},"
        "\"ints\":[0,-7,3,7,31,15,9223372036854775807],"
        "\"big\":[99999999999999999999,-12,0,0],"
        "\"floats\":[1.5,-2500,0.5],"
        "\"words\":[\"yes\",\"no\",\"on\",true,false,null,null,\"nan\","
        "\".inf\",\"0x\"],"
        "\"quoted\":[\"1\",\"true\",\"null\"],"
        "\"block\":\"line one\\nline two\\n\","
        "\"empty\":{},"
        "\"sp ace\":\"\"}");
    cJSON *parsed = cJSON_Parse(j);
    ck_assert_ptr_nonnull(parsed);
    cJSON_Delete(parsed);
    tm_cfg_free(cfg);
}
END_TEST

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

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("load");
    tcase_add_test(tc, test_design_example);
    tcase_add_test(tc, test_design_example_redis_priority);
    tcase_add_test(tc, test_defaults);
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
    tcase_add_test(tc, test_config_json_types);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_bad_config, 0,
                        (int)(sizeof bad_configs / sizeof bad_configs[0]));
    tcase_add_test(tc, test_url_error_hides_password);
    tcase_add_test(tc, test_error_one_line);
    tcase_add_test(tc, test_alias_bomb);
    suite_add_tcase(s, tc);

    tc = tcase_create("values");
    tcase_add_test(tc, test_url_parse);
    tcase_add_test(tc, test_broker_nodes);
    tcase_add_test(tc, test_broker_redis_modes);
    tcase_add_loop_test(tc, test_url_bad, 0,
                        (int)(sizeof bad_urls / sizeof bad_urls[0]));
    tcase_add_test(tc, test_duration);
    tcase_add_test(tc, test_size);
    tcase_add_test(tc, test_expand_env);
    suite_add_tcase(s, tc);
    return s;
}

/* remove_dir removes the scratch directory and the files in it. */
static void remove_dir(void)
{
    static const char *const names[] = {
        "c.yaml", "bad.yaml", "secret", "pw", "empty", "tiny.yaml",
    };
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tm_snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    rmdir(g_dir);
}

int main(void)
{
    tm_snprintf(g_dir, sizeof g_dir, "/tmp/tm-config-XXXXXX");
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    remove_dir();
    return failed == 0 ? 0 : 1;
}
