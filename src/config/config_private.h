/* config/config_private.h - what the files of the config reader share.
 * Not a public header: the config contract is config.h. */
#ifndef TM_CONFIG_PRIVATE_H
#define TM_CONFIG_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "config/config.h"

/* CFG_MAX_FILE bounds the config file: a task map is a few KiB, anything
 * past 16 MiB is a mistake (a log file given by -c, say). */
#define CFG_MAX_FILE (16u << 20)
/* CFG_MAX_SECRET bounds a password_file: a secret, not a document. */
#define CFG_MAX_SECRET 65536
/* CFG_MAX_DEPTH bounds nesting in a task's config: mapping, so neither a
 * hostile file nor a self-referencing alias exhausts the stack. */
#define CFG_MAX_DEPTH 64
/* CFG_MAX_JSON_NODES bounds the values converted from one config: mapping,
 * against alias bombs (an alias repeated into an exponential tree). */
#define CFG_MAX_JSON_NODES 100000
/* CFG_MAX_DURATION_MS keeps every duration convertible to int64 ns. */
#define CFG_MAX_DURATION_MS (INT64_MAX / 1000000)
/* CFG_MAX_PAYLOAD is the largest max_payload accepted, 512 MiB. */
#define CFG_MAX_PAYLOAD ((size_t)512 << 20)
/* CFG_PATH_LEN holds a key path such as "tasks.NAME.max_backoff". */
#define CFG_PATH_LEN 512
/* CFG_CLIP is how much of an offending value an error message echoes. */
#define CFG_CLIP 80
/* CFG_ENV_DEPTH bounds nested defaults, ${A:-${B:-${C:-x}}}. */
#define CFG_ENV_DEPTH 8
/* AMQP short strings (queue names) hold at most 255 bytes. */
#define AMQP_NAME_MAX 255

#define DEFAULT_BROKER_URL "redis://127.0.0.1:6379/0"
#define DURATION_HINT "a duration like 250ms, 30s, 5m, 1h"
#define SIZE_HINT "a size like 512B, 64KiB, 1MiB"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------ context */

/* struct task_marks remembers where keys were, for checks that need the
 * whole document (the broker kind may come after the tasks). */
struct task_marks {
    struct tm_mark queue_at;
    struct tm_mark dead_letter_at;
    struct tm_mark priority_at;     /* the key, for the Redis refusal */
    struct tm_mark priority_val_at; /* the value, for the range check */
    struct tm_mark max_priority_at;
    struct tm_mark dedup_ttl_at;    /* the key, for the RabbitMQ refusal */
    bool has_queue;
    bool has_dead_letter;
    bool ok;        /* the task parsed without error */
};
struct ctx {
    struct tm_cfg_errors errs; /* parsing stops when it is full */
    yaml_document_t *doc;
    struct tm_cfg *cfg;
    struct task_marks *marks; /* one per task */
    size_t json_nodes;
    bool url_done;
    bool url_bad;       /* broker.url is given but unusable */
    bool has_tasks;     /* the tasks key is present */
};

/* section_fn handles key keys[i] of a section, its full path in path. */
typedef int (*section_fn)(struct ctx *c, int i, const yaml_node_t *key,
                          const yaml_node_t *val, const char *path,
                          void *arg);

/* struct choice maps an enum value's name to its number; the first
 * alias-free entries (shown != 0) are listed in errors. */
struct choice {
    const char *name;
    int value;
    int shown;
};

/* struct sbuf is a growable string; p is NUL-terminated once non-empty. */
struct sbuf {
    char *p;
    size_t len;
    size_t cap;
};

/* The functions below are described where they are defined. */

/* text.c */
void tm_cfg_sb_add(struct sbuf *b, const char *s, size_t n);
void tm_cfg_sb_adds(struct sbuf *b, const char *s);
char *tm_cfg_sb_take(struct sbuf *b);
const char *tm_cfg_clip_n(const char *s, size_t n, char *buf, size_t size);
const char *tm_cfg_clip(const char *s, char *buf, size_t size);
int tm_cfg_is_digit(int ch);

/* units.c */
const char *tm_cfg_fmt_ms(int64_t ms, char *buf, size_t size);
int tm_cfg_parse_i64(const char *s, int64_t *out);

/* url.c */
int tm_cfg_hexval(int ch);
int tm_cfg_is_host_char(int ch);
int tm_cfg_is_ip6_char(int ch);

/* read.c */
void tm_cfg_fail(struct ctx *c, struct tm_mark at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool tm_cfg_stop(const struct ctx *c);
struct tm_mark tm_cfg_mark_of(const yaml_node_t *n);
yaml_node_t *tm_cfg_node_at(struct ctx *c, int id);
const char *tm_cfg_node_kind(const yaml_node_t *n);
const char *tm_cfg_scalar_raw(const yaml_node_t *n);
int tm_cfg_is_null_word(const char *s);
int tm_cfg_is_null(const yaml_node_t *n);
void tm_cfg_join_path(char *buf, const char *where, const char *key);
char *tm_cfg_scalar_text(struct ctx *c, const yaml_node_t *n,
                         const char *path);
char *tm_cfg_get_scalar(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path);
int tm_cfg_get_string(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v, const char *path, char **out);
/* tm_cfg_get_optional reads a scalar that may be left unset: a null or
 * empty value (e.g. an unset ${VAR:-}) gives 0 with *out NULL; else 0 with
 * *out the text (the caller frees it), or -1 after reporting. */
int tm_cfg_get_optional(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path, char **out);
int tm_cfg_get_int(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                   const char *path, int64_t min, int64_t max, int64_t *out);
int tm_cfg_get_duration(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        int64_t min_ms, int64_t *out);
int tm_cfg_get_size(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, size_t *out);
int tm_cfg_get_bool(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, bool *out);
int tm_cfg_get_enum(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, const struct choice *ch, size_t n,
                    int *out);
int tm_cfg_want_mapping(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        bool allow_null);
int tm_cfg_key_index(struct ctx *c, const yaml_node_t *k, const char *where,
                     const struct tm_cfg_section *sec, uint32_t *seen);
int tm_cfg_walk_section(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *where,
                        const struct tm_cfg_section *sec, section_fn fn,
                        void *arg);

/* files.c */
char *tm_cfg_path_join(const char *dir, const char *rel);
void tm_cfg_trim_slashes(char *p);
char *tm_cfg_config_dir(const char *path);
int tm_cfg_read_file(const char *path, size_t max, char **out, size_t *len,
                     int *opened);

/* yaml_json.c */
int tm_cfg_get_mapping_json(struct ctx *c, const yaml_node_t *val,
                            const char *path, char **out);

/* tasks.c */
int tm_cfg_valid_task_name(const char *s);
int tm_cfg_parse_tasks(struct ctx *c, const yaml_node_t *k,
                       const yaml_node_t *v);

/* schedules.c */
void tm_cfg_schedule_clear(struct tm_cfg_schedule *s);
int tm_cfg_parse_schedules(struct ctx *c, const yaml_node_t *k,
                           const yaml_node_t *v);
int tm_cfg_check_schedules(struct ctx *c);

/* broker.c */
void tm_cfg_clear_nodes(struct tm_cfg *cfg);
int tm_cfg_set_url(struct ctx *c, const char *s, struct tm_mark at);
int tm_cfg_parse_broker(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v);

/* sections.c */
int tm_cfg_parse_pool(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v);
int tm_cfg_parse_http(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v);
int tm_cfg_parse_log(struct ctx *c, const yaml_node_t *k,
                     const yaml_node_t *v);

/* telemetry.c */
int tm_cfg_parse_telemetry(struct ctx *c, const yaml_node_t *k,
                           const yaml_node_t *v);
void tm_cfg_clear_telemetry(struct tm_cfg *cfg);

/* keys.c: the sections the reader walks, their keys in the order the
 * callbacks number them */
extern const struct tm_cfg_section tm_cfg_sec_top, tm_cfg_sec_broker,
    tm_cfg_sec_tls, tm_cfg_sec_redis, tm_cfg_sec_amqp, tm_cfg_sec_pool,
    tm_cfg_sec_http, tm_cfg_sec_log, tm_cfg_sec_task, tm_cfg_sec_schedule,
    tm_cfg_sec_telemetry;
/* tm_cfg_section_known says whether sec is one of them (tm_cfg_section_at) */
bool tm_cfg_section_known(const struct tm_cfg_section *sec);

/* document.c */
int tm_cfg_parse_top(struct ctx *c, const yaml_node_t *root);
int tm_cfg_check_whole(struct ctx *c, const yaml_node_t *root);

#endif
