/* config/keys.c - every key of the config file, declared once: its name,
 * its section, and whether a reload applies it. The reader walks each
 * section by these tables (their order is the index each section's
 * callback switches on), and a reload compares every restart-only key
 * by them, so that a key the reader knows is always classified. */
#include "config/config_private.h"

#include <string.h>

#include "util/util.h"

/* STRNE: a and b differ, NULL (not set) being a value of its own */
static bool strne(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

static bool d_broker_url(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->broker_url, b->broker_url);
}

/* the file's path, or, with the same file, the password read from it */
static bool d_password_file(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->password_file, b->password_file) ||
           (a->password_file != NULL &&
            strne(a->url.password, b->url.password));
}

static bool d_tls_ca_file(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->tls.ca_file, b->tls.ca_file);
}

static bool d_tls_cert_file(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->tls.cert_file, b->tls.cert_file);
}

static bool d_tls_key_file(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->tls.key_file, b->tls.key_file);
}

static bool d_tls_server_name(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->tls.server_name, b->tls.server_name);
}

static bool d_tls_verify(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->tls.verify != b->tls.verify;
}

static bool d_redis_mode(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->redis_mode != b->redis_mode;
}

static bool d_redis_master(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->redis_master, b->redis_master);
}

static bool d_amqp_queue_type(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->amqp_queue_type != b->amqp_queue_type;
}

static bool d_amqp_heartbeat(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->amqp_heartbeat_ms != b->amqp_heartbeat_ms;
}

static bool d_pool_kind(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->pool_kind != b->pool_kind;
}

static bool d_pool_size(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->pool_size != b->pool_size;
}

static bool d_max_tasks_per_child(const struct tm_cfg *a,
                                  const struct tm_cfg *b)
{
    return a->max_tasks_per_child != b->max_tasks_per_child;
}

static bool d_plugin_dir(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->plugin_dir, b->plugin_dir);
}

static bool d_plugin_watch(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return a->plugin_watch != b->plugin_watch;
}

static bool d_instance(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->instance, b->instance);
}

static bool d_http_listen(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->http_listen, b->http_listen);
}

static bool d_http_token(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->http_token, b->http_token);
}

static bool d_otel_endpoint(const struct tm_cfg *a, const struct tm_cfg *b)
{
    return strne(a->otel_endpoint, b->otel_endpoint);
}

/* the same headers in the same order */
static bool d_otel_headers(const struct tm_cfg *a, const struct tm_cfg *b)
{
    if (a->otel_nheaders != b->otel_nheaders)
        return true;
    for (size_t i = 0; i < a->otel_nheaders; i++)
        if (strne(a->otel_headers[i].name, b->otel_headers[i].name) ||
            strne(a->otel_headers[i].value, b->otel_headers[i].value))
            return true;
    return false;
}

static bool d_otel_service_name(const struct tm_cfg *a,
                                const struct tm_cfg *b)
{
    return strne(a->otel_service_name, b->otel_service_name);
}

static bool d_otel_sample_ratio(const struct tm_cfg *a,
                                const struct tm_cfg *b)
{
    return a->otel_sample_ratio != b->otel_sample_ratio;
}

#define RELOAD(n) { .name = (n), .apply = TM_CFG_RELOAD }
#define RESTART(n, f) { .name = (n), .apply = TM_CFG_RESTART, .differs = (f) }
#define NESTED(n) { .name = (n), .apply = TM_CFG_NESTED }
#define SECTION(p, k) { .path = (p), .keys = (k), .nkeys = NELEM(k) }

/* The order of each array is the reader's: enum top_key (document.c),
 * enum broker_key (broker.c), the switches of cb_tls_key, cb_redis_key,
 * cb_amqp_key (broker.c), cb_pool_key, cb_http_key, cb_log_key
 * (sections.c), enum task_key (tasks.c), enum schedule_key
 * (schedules.c), enum telemetry_key (telemetry.c). */
static const struct tm_cfg_keydef top_keys[] = {
    NESTED("broker"),
    NESTED("pool"),
    RESTART("plugin_dir", d_plugin_dir),
    RESTART("plugin_watch", d_plugin_watch),
    RESTART("instance", d_instance),
    NESTED("http"),
    RELOAD("shutdown_timeout"),
    NESTED("log"),
    NESTED("tasks"),
    NESTED("schedules"),
    NESTED("telemetry"),
};

static const struct tm_cfg_keydef broker_keys[] = {
    RESTART("url", d_broker_url),
    RESTART("password_file", d_password_file),
    NESTED("tls"),
    NESTED("redis"),
    NESTED("amqp"),
};

static const struct tm_cfg_keydef tls_keys[] = {
    RESTART("ca_file", d_tls_ca_file),
    RESTART("cert_file", d_tls_cert_file),
    RESTART("key_file", d_tls_key_file),
    RESTART("server_name", d_tls_server_name),
    RESTART("verify", d_tls_verify),
};

static const struct tm_cfg_keydef redis_keys[] = {
    RESTART("mode", d_redis_mode),
    RESTART("master", d_redis_master),
};

static const struct tm_cfg_keydef amqp_keys[] = {
    RESTART("queue_type", d_amqp_queue_type),
    RESTART("heartbeat", d_amqp_heartbeat),
};

static const struct tm_cfg_keydef pool_keys[] = {
    RESTART("kind", d_pool_kind),
    RESTART("size", d_pool_size),
    RESTART("max_tasks_per_child", d_max_tasks_per_child),
};

static const struct tm_cfg_keydef http_keys[] = {
    RESTART("listen", d_http_listen),
    RESTART("token", d_http_token),
    RELOAD("allowed_hosts"),
};

/* the exporter is made once, at start */
static const struct tm_cfg_keydef telemetry_keys[] = {
    RESTART("otlp_endpoint", d_otel_endpoint),
    RESTART("headers", d_otel_headers),
    RESTART("service_name", d_otel_service_name),
    RESTART("sample_ratio", d_otel_sample_ratio),
};

static const struct tm_cfg_keydef log_keys[] = {
    RELOAD("level"),
    RELOAD("format"),
};

/* a reload starts a new generation of every task and schedule */
static const struct tm_cfg_keydef task_keys[] = {
    RELOAD("plugin"), RELOAD("queue"), RELOAD("group"), RELOAD("prefetch"),
    RELOAD("timeout"), RELOAD("claim_idle"), RELOAD("maxlen"),
    RELOAD("on_error"), RELOAD("max_retries"), RELOAD("backoff"),
    RELOAD("max_backoff"), RELOAD("dead_letter"), RELOAD("max_payload"),
    RELOAD("max_priority"), RELOAD("priority"), RELOAD("config"),
    RELOAD("circuit_failures"), RELOAD("circuit_cool_off"),
    RELOAD("circuit_max_cool_off"), RELOAD("rate_limit"),
    RELOAD("concurrency"), RELOAD("dedup_ttl"), RELOAD("reply_ttl"),
};

static const struct tm_cfg_keydef schedule_keys[] = {
    RELOAD("task"), RELOAD("cron"), RELOAD("every"), RELOAD("timezone"),
    RELOAD("body"), RELOAD("catch_up"),
};

const struct tm_cfg_section tm_cfg_sec_top = SECTION("", top_keys);
const struct tm_cfg_section tm_cfg_sec_broker = SECTION("broker", broker_keys);
const struct tm_cfg_section tm_cfg_sec_tls = SECTION("broker.tls", tls_keys);
const struct tm_cfg_section tm_cfg_sec_redis =
    SECTION("broker.redis", redis_keys);
const struct tm_cfg_section tm_cfg_sec_amqp = SECTION("broker.amqp", amqp_keys);
const struct tm_cfg_section tm_cfg_sec_pool = SECTION("pool", pool_keys);
const struct tm_cfg_section tm_cfg_sec_http = SECTION("http", http_keys);
const struct tm_cfg_section tm_cfg_sec_log = SECTION("log", log_keys);
const struct tm_cfg_section tm_cfg_sec_telemetry =
    SECTION("telemetry", telemetry_keys);
const struct tm_cfg_section tm_cfg_sec_task = SECTION("tasks.*", task_keys);
const struct tm_cfg_section tm_cfg_sec_schedule =
    SECTION("schedules.*", schedule_keys);

static const struct tm_cfg_section *const all_sections[] = {
    &tm_cfg_sec_top, &tm_cfg_sec_broker, &tm_cfg_sec_tls, &tm_cfg_sec_redis,
    &tm_cfg_sec_amqp, &tm_cfg_sec_pool, &tm_cfg_sec_http, &tm_cfg_sec_log,
    &tm_cfg_sec_task, &tm_cfg_sec_schedule, &tm_cfg_sec_telemetry,
};

const struct tm_cfg_section *tm_cfg_section_at(size_t i)
{
    return i < NELEM(all_sections) ? all_sections[i] : NULL;
}

bool tm_cfg_section_known(const struct tm_cfg_section *sec)
{
    for (size_t i = 0; i < NELEM(all_sections); i++)
        if (all_sections[i] == sec)
            return true;
    return false;
}

size_t tm_cfg_restart_changes(const struct tm_cfg *a, const struct tm_cfg *b,
                              char *buf, size_t size)
{
    char path[CFG_PATH_LEN];
    size_t n = 0, len = 0;
    if (size > 0)
        buf[0] = '\0';
    for (size_t s = 0; s < NELEM(all_sections); s++) {
        const struct tm_cfg_section *sec = all_sections[s];
        for (size_t i = 0; i < sec->nkeys; i++) {
            const struct tm_cfg_keydef *k = &sec->keys[i];
            if (k->apply != TM_CFG_RESTART || !k->differs(a, b))
                continue;
            tm_cfg_join_path(path, sec->path[0] != '\0' ? sec->path : NULL,
                             k->name);
            if (len + 1 < size)
                len += tm_snprintf(buf + len, size - len, "%s%s",
                                   n > 0 ? ", " : "", path);
            n++;
        }
    }
    return n;
}
