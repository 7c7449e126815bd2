/* config.h - the YAML configuration, loaded and validated.
 *
 * The config is the ground floor (docs/development.md, "Layers"): it
 * reads the file, checks what the file alone can tell and records where
 * each value is written; it includes only util.h, log.h, json.h,
 * taskmill.h and the schedule spec (schedule/), and calls no broker, pool,
 * http or daemon code (scripts/check-layers.sh, run by make check). What a
 * broker adapter requires of a config (Redis Cluster's one-slot rule, the
 * rabbitmq-c and OpenSSL libraries) is checked by the adapter's check op
 * (broker.h) on the loaded config, with its errors placed at the marks
 * kept here (url_at, tasks' queue_at, schedules' task_at) through struct
 * tm_cfg_errors, in the loader's own format. */
#ifndef TASKMILL_CONFIG_H
#define TASKMILL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schedule/schedule.h"
#include "util/log.h" /* enum tm_log_format */

enum tm_pool_kind { TM_POOL_THREAD = 1, TM_POOL_FORK = 2 };
enum tm_on_error { TM_ON_ERROR_REQUEUE = 1, TM_ON_ERROR_REJECT = 2 };
enum tm_broker_kind { TM_BROKER_REDIS = 1, TM_BROKER_AMQP = 2 };
/* broker.redis.mode: one server, servers found through sentinels (the
 * URLs list the sentinels), or a Redis Cluster (the URLs are seeds). */
enum tm_redis_mode {
    TM_REDIS_STANDALONE = 1,
    TM_REDIS_SENTINEL = 2,
    TM_REDIS_CLUSTER = 3
};
/* broker.amqp.queue_type: the kind of every queue taskmill declares. */
enum tm_amqp_queue_type { TM_AMQP_CLASSIC = 1, TM_AMQP_QUORUM = 2 };

/* struct tm_mark is a position in the config file, 1-based. */
struct tm_mark {
    int line;
    int col;
};

/* struct tm_url is a parsed broker URL. Every string is owned by it. */
struct tm_url {
    enum tm_broker_kind kind;
    bool tls;           /* amqps:// or rediss:// */
    char *scheme;       /* "redis", "rediss", "amqp", "amqps" */
    char *user;         /* NULL when absent; percent-decoded */
    char *password;     /* NULL when absent; percent-decoded */
    char *host;         /* never NULL; default 127.0.0.1 */
    int port;           /* default 6379 / 5672 / 5671 */
    int db;             /* redis database number from the path; 0 */
    char *vhost;        /* amqp vhost, percent-decoded; default "/" */
    char *redacted;     /* the URL without credentials, for logs/status */
};

/* struct tm_tls is broker.tls, for rediss:// and amqps:// nodes. Paths
 * are resolved against the config file's directory; NULL when not set. */
struct tm_tls {
    char *ca_file;       /* NULL: the system CA store */
    char *cert_file;     /* client certificate; set with key_file */
    char *key_file;
    char *server_name;   /* the name verified; NULL: each URL's host */
    bool verify;         /* default true */
};

/* struct tm_cfg_key is a key of a task's `config:` mapping (the top
 * level) and where it is written, so that a plugin's refusal of a key
 * points at it. */
struct tm_cfg_key {
    char *name;
    struct tm_mark at;
};

struct tm_cfg_task {
    char *name;
    char *plugin;            /* as written, e.g. "add.so" */
    char *plugin_path;       /* resolved against plugin_dir */
    char *queue;             /* default: "taskmill.<name>" */
    char *group;             /* default: "taskmill" */
    unsigned prefetch;       /* default 16, 1..65535 */
    int64_t timeout_ms;      /* default 30000; 0 = none */
    int64_t claim_idle_ms;   /* default 60000; > 0 */
    int64_t maxlen;          /* default 0 = no cap */
    enum tm_on_error on_error; /* default requeue */
    int max_retries;         /* default 3; -1 = unlimited */
    int64_t backoff_ms;      /* default 1000 */
    int64_t max_backoff_ms;  /* default 300000; >= backoff_ms */
    char *dead_letter;       /* default "<queue>.dlq" */
    size_t max_payload;      /* default 1 MiB */
    int max_priority;        /* default 0 = none; 0..255 */
    int priority;            /* default 0; 0..max_priority */
    bool has_priority;       /* key given */
    bool has_max_priority;   /* key given */
    char *config_json;       /* `config:` mapping as JSON, default "{}" */
    /* circuit breaker: crashes or timeouts in a row that pause intake
     * (default 5; 0 = never), the first pause (default 5 s), doubling up
     * to the longest (default 5 min; >= circuit_cool_off) */
    unsigned circuit_failures;
    int64_t circuit_cool_off_ms;
    int64_t circuit_max_cool_off_ms;
    /* flow control: rate_limit is rate_count runs per rate_period_ms
     * (rate_count 0 = no limit); concurrency caps this task's runs at once
     * in this daemon (0 = the pool's size) */
    uint32_t rate_count;
    int64_t rate_period_ms;
    unsigned concurrency;
    int64_t dedup_ttl_ms;    /* default 0 = no deduplication */
    int64_t reply_ttl_ms;    /* default 5 min; Redis reply streams' expiry */
    struct tm_mark at;       /* the task's name key */
    struct tm_mark queue_at; /* the queue: value, or the name key when
                                queue: is not given */
    struct tm_mark plugin_at; /* the plugin: value, for plugin refusals */
    struct tm_mark config_at; /* the config: key (0:0 when absent), for
                                 refusals of the config by the plugin */
    struct tm_cfg_key *config_keys; /* config:'s top-level keys, in order */
    size_t nconfig_keys;
};

enum tm_catch_up { TM_CATCH_UP_SKIP = 1, TM_CATCH_UP_ONCE = 2 };

/* struct tm_cfg_schedule is one entry of `schedules:`, compiled: the
 * firing code needs no re-parse. Every pointer is owned by it. */
struct tm_cfg_schedule {
    char *name;
    char *task;              /* a task of the file */
    char *spec_text;         /* the cron: or every: value, as expanded */
    char *timezone;          /* cron: the zone's name, default "UTC";
                                every: NULL */
    struct tm_tz *tz;        /* cron: the loaded zone; every: NULL */
    struct tm_sched_spec spec; /* cron or every; spec.tz == tz */
    char *body_json;         /* `body:` mapping as JSON, default "{}" */
    enum tm_catch_up catch_up; /* default skip */
    struct tm_mark at;       /* the schedule's name key */
    struct tm_mark task_at;  /* the task: value */
};

/* struct tm_cfg_header is one HTTP header of telemetry.headers */
struct tm_cfg_header {
    char *name;
    char *value;
};

struct tm_cfg {
    char *path;              /* the config file as given */
    char *dir;               /* its directory, for relative paths */
    char *broker_url;        /* after ${VAR} expansion; a list's URLs
                                joined by ", " */
    struct tm_url url;       /* the first node (a copy of nodes[0]);
                                password from password_file when given */
    struct tm_mark url_at;   /* where broker.url (its first URL) is
                                written; without one, 1:1 or 0:0 (no
                                position) */
    struct tm_url *nodes;    /* every node of broker.url, in order, all
                                of one scheme; nnodes >= 1 */
    size_t nnodes;
    char *password_file;     /* resolved path, or NULL */
    struct tm_tls tls;       /* broker.tls */
    bool has_tls;            /* broker.tls given */
    enum tm_redis_mode redis_mode; /* default standalone */
    char *redis_master;      /* sentinel: the master's name, else NULL */
    enum tm_amqp_queue_type amqp_queue_type; /* default classic */
    int64_t amqp_heartbeat_ms; /* default 30000; 0 = off; whole seconds */
    enum tm_pool_kind pool_kind;  /* default thread */
    unsigned pool_size;      /* default: online CPUs; 1..1024 */
    unsigned max_tasks_per_child; /* default 0 = never */
    char *plugin_dir;        /* resolved; default "<dir>/plugins" */
    bool plugin_watch;       /* default false */
    char *instance;          /* default "<hostname>-<pid>" */
    char *http_listen;       /* NULL = HTTP disabled; "host:port" */
    char *http_token;        /* NULL = no token */
    char **http_allowed_hosts; /* host names (lower case) the console and
                                  the API answer besides IP literals and
                                  localhost; reloadable */
    size_t http_nallowed_hosts;
    int64_t shutdown_timeout_ms; /* default 30000 */
    int log_level;           /* enum tm_log_level, default TM_LOG_INFO */
    enum tm_log_format log_format; /* default text */
    struct tm_cfg_task *tasks;
    size_t ntasks;
    struct tm_cfg_schedule *schedules; /* in file order */
    size_t nschedules;
    /* telemetry: (docs/observability.md); restart only */
    char *otel_endpoint;     /* NULL = no export; http(s)://..., without a
                                trailing '/'; traces go to its /v1/traces */
    struct tm_cfg_header *otel_headers; /* sent with every export */
    size_t otel_nheaders;
    char *otel_service_name; /* NULL = "taskmill" */
    double otel_sample_ratio; /* 0..1, default 1: share of new traces
                                 recorded (a parent's flag is followed) */
};

/*
 * tm_cfg_load reads and validates the YAML file at path: what the file
 * alone can tell. What its broker requires besides is the adapter's check
 * (tm_broker_load_config in broker.h runs both). On success returns
 * a config the caller frees with tm_cfg_free(). On failure returns NULL and
 * writes one line "FILE:LINE:COL: message" (no trailing newline) into err:
 * the first error of the file.
 */
struct tm_cfg *tm_cfg_load(const char *path, char *err, size_t errlen);

/*
 * tm_cfg_load_all is tm_cfg_load that goes on after an error and reports
 * up to max_errors of them (at least 1), each one line as above, the
 * lines separated by '\n' in err (cut when errlen is too small). A file
 * that cannot be read is one line "cannot open FILE: reason". *nerrors
 * (when not NULL) is set to the number of errors recorded: 0 on success,
 * max_errors when checking stopped at the cap.
 */
struct tm_cfg *tm_cfg_load_all(const char *path, size_t max_errors,
                               char *err, size_t errlen, size_t *nerrors);

/*
 * struct tm_cfg_errors collects the errors of one config file as
 * tm_cfg_load_all reports them: each one line "FILE:LINE:COL: message"
 * ("FILE: message" for a mark of line 0; control characters become '?'),
 * the lines separated by '\n' in err (cut when errlen is too small), at
 * most max_errors of them. The loader fills one; checks run on a loaded
 * config (a broker adapter's check op, broker.h) add to another, so that
 * their errors read as the loader's.
 */
struct tm_cfg_errors {
    const char *path;   /* the file, as given */
    char *err;          /* may be NULL (errlen 0): only counted */
    size_t errlen;
    size_t errused;     /* bytes of err in use, without the NUL */
    size_t nerrors;     /* errors recorded, at most max_errors */
    size_t max_errors;  /* >= 1 */
    bool failed;        /* an error was reported, recorded or not */
};

/* tm_cfg_errors_init starts an empty list for path (err emptied);
 * max_errors 0 counts as 1. */
void tm_cfg_errors_init(struct tm_cfg_errors *e, const char *path,
                        size_t max_errors, char *err, size_t errlen);

/* tm_cfg_error reports an error at at: recorded after the earlier ones
 * while fewer than max_errors are. */
void tm_cfg_error(struct tm_cfg_errors *e, struct tm_mark at,
                  const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* tm_cfg_errors_full says whether no further error would be recorded:
 * a check may stop. */
bool tm_cfg_errors_full(const struct tm_cfg_errors *e);

/* tm_cfg_free releases a config; NULL is accepted. */
void tm_cfg_free(struct tm_cfg *cfg);

/* tm_cfg_find_task returns the task named name, or NULL. */
const struct tm_cfg_task *tm_cfg_find_task(const struct tm_cfg *cfg,
                                           const char *name);

/* tm_cfg_find_schedule returns the schedule named name, or NULL. */
const struct tm_cfg_schedule *tm_cfg_find_schedule(const struct tm_cfg *cfg,
                                                   const char *name);

/*
 * tm_url_parse parses a broker URL into *url (zeroed first). Returns 0, or
 * -1 with a reason in err. Free with tm_url_clear().
 */
int tm_url_parse(const char *s, struct tm_url *url, char *err, size_t errlen);
void tm_url_clear(struct tm_url *url);

/*
 * tm_parse_duration parses "250ms", "30s", "5m", "1h" or a bare "0" into
 * milliseconds. tm_parse_size parses "512B", "64KiB", "1MiB" or a bare
 * number of bytes. Both return 0, or -1 when s is malformed or overflows.
 */
int tm_parse_duration(const char *s, int64_t *ms);

/* tm_parse_at reads the TIME of `emit --at`: RFC 3339 (ISO 8601
 * with a zone: 2026-12-01T03:00:00Z, 2026-12-01T04:00:00.250+01:00) or
 * a count of epoch milliseconds, into epoch ms; tm_parse_delay reads
 * the DURATION of `emit --delay` (250ms, 30s, 5m, 1h, the units of the
 * configuration). Both return 0, or -1 when s is not such a value. */
int tm_parse_at(const char *s, int64_t *ms);
int tm_parse_delay(const char *s, int64_t *ms);
int tm_parse_size(const char *s, size_t *bytes);

/*
 * tm_expand_env expands ${VAR} and ${VAR:-default} in s. Returns a new
 * string the caller frees, or NULL with a reason in err (an unset VAR
 * without default is an error naming VAR).
 */
char *tm_expand_env(const char *s, char *err, size_t errlen);

/* How a reload treats a key of the file (src/config/keys.c): applied by
 * the new generation it starts, or kept until a restart (a reload that
 * changes it is refused and names it), or a section whose keys are
 * classified one by one (its path in tm_cfg_section_at). Zero is no
 * class: every key has one. */
enum tm_cfg_apply {
    TM_CFG_RELOAD = 1,
    TM_CFG_RESTART = 2,
    TM_CFG_NESTED = 3
};

/* struct tm_cfg_keydef is one key of a section of the file. */
struct tm_cfg_keydef {
    const char *name;           /* as written in its section */
    enum tm_cfg_apply apply;
    /* TM_CFG_RESTART: whether a and b differ in this key; else NULL */
    bool (*differs)(const struct tm_cfg *a, const struct tm_cfg *b);
};

/* struct tm_cfg_section is a mapping of the file with fixed keys: "" (the
 * top level), "broker.tls", "tasks.*" (each task) and so on. */
struct tm_cfg_section {
    const char *path;
    const struct tm_cfg_keydef *keys;
    size_t nkeys;
};

/* tm_cfg_section_at returns the i-th section the reader walks, or NULL
 * past the last: every key the reader accepts is in one of them. */
const struct tm_cfg_section *tm_cfg_section_at(size_t i);

/*
 * tm_cfg_restart_changes names the restart-only keys whose values differ
 * between a and b, by their full paths ("broker.tls.ca_file, pool.size")
 * in buf (cut to size). Returns how many differ; 0 when a reload can
 * apply b.
 */
size_t tm_cfg_restart_changes(const struct tm_cfg *a, const struct tm_cfg *b,
                              char *buf, size_t size);

#endif /* TASKMILL_CONFIG_H */
