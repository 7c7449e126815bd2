/* taskmill.h - the one public header a taskmill task plugin includes. */
#ifndef TASKMILL_H
#define TASKMILL_H

/*
 * A task plugin is a shared object that exports one function,
 * tm_task_descriptor(), which returns a constant description of the task:
 * ABI stamp, name, version, description, optional JSON Schemas and the
 * entry points. Write it with TM_TASK_DECLARE():
 *
 *     #include <taskmill.h>
 *
 *     static int cb_run(struct tm_call *call)
 *     {
 *         tm_result(call, "{\"ok\":true}");
 *         return TM_TASK_OK;
 *     }
 *
 *     TM_TASK_DECLARE(
 *         .name = "hello",
 *         .version = "1.0.0",
 *         .description = "answers ok",
 *         .cb_run = cb_run,
 *     )
 *
 * Threading: cb_run may be called from several threads at once (thread
 * pool) or in several child processes (fork pool). cb_worker_init runs
 * once in each worker (thread or child) before its first cb_run there, and
 * cb_worker_fini when that worker ends. cb_init/cb_fini run once per task
 * in the daemon process, before any worker starts and after all stopped.
 *
 * Memory: everything the daemon passes in is borrowed for the length of the
 * callback; copy what you keep. tm_result() and tm_error() copy their input.
 *
 * JSON: read the body (or the config) with tm_json_get_*(), build a result
 * with tm_json_new_object() and tm_json_add_*(), hand it over with
 * tm_json_result(). The daemon does the parsing and escaping; a result
 * that is not valid JSON fails the run (outcome error, "invalid result").
 *
 * Only standard C headers are used here, so the header builds anywhere.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h> /* malloc, free: tm_json_get_strdup */

#ifdef __cplusplus
extern "C" {
#endif

/* TM_TASK_ABI_MAJOR changes when a layout below changes incompatibly: the
 * daemon refuses a plugin whose major differs. TM_TASK_ABI_MINOR grows when
 * fields are added at the end; the daemon accepts any minor and reads only
 * the fields the plugin's struct_size covers, and a plugin calls a host
 * function only when the host table's struct_size covers it (the wrappers
 * below check). Minor 1 added the JSON helpers, minor 2 the descriptor's
 * config_keys and flags, minor 3 the host's traceparent. */
#define TM_TASK_ABI_MAJOR 1
#define TM_TASK_ABI_MINOR 3

/* TM_TASK_MAGIC marks a descriptor ("TMPL" in ASCII). */
#define TM_TASK_MAGIC 0x544d504cu

/* TM_TASK_SIGNATURE encodes build properties that must match between the
 * daemon and the plugin: pointer size and the size of size_t. */
#define TM_TASK_SIGNATURE \
    ((uint32_t)(sizeof(void *) << 8) | (uint32_t)sizeof(size_t))

/* The name of the exported descriptor function. */
#define TM_TASK_SYMBOL "tm_task_descriptor"

/* Outcome of one run. Zero is deliberately not a valid outcome, so a
 * forgotten return value is never mistaken for success. */
enum tm_task_result {
    TM_TASK_OK = 1,     /* success: the message is acknowledged */
    TM_TASK_ERROR = 2,  /* failure: the task's on_error applies (retry) */
    TM_TASK_REJECT = 3  /* permanent failure: dead-letter now */
};

/* Log levels, syslog severities. */
enum tm_log_level {
    TM_LOG_ERR = 3,
    TM_LOG_WARNING = 4,
    TM_LOG_INFO = 6,
    TM_LOG_DEBUG = 7
};

struct tm_call;
struct tm_task_env;
struct tm_json;

/*
 * struct tm_host is the table of daemon services a plugin may call. It is
 * reached through call->host or env->host; plugins never link against the
 * daemon. All functions are safe to call from any worker.
 */
struct tm_host {
    size_t struct_size;
    /* log writes one line prefixed with the task name (and message id
     * during a run). ctx is a struct tm_call * or a struct tm_task_env *
     * as kind says (0 = env, 1 = call). Never log bodies or secrets. */
    void (*log)(const void *ctx, int kind, int level, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 4, 5)))
#endif
        ;
    /* set_result stores a copy of len bytes of JSON text as the run's
     * result (replacing an earlier one). Returns 0, or -1 when out of
     * memory or the text is larger than the daemon accepts. */
    int (*set_result)(struct tm_call *call, const char *json, size_t len);
    /* set_error stores a copy of a one-line reason for an ERROR or REJECT
     * outcome; it shows in logs and in the dead-letter entry. */
    void (*set_error)(struct tm_call *call, const char *msg);
    /* now_ms returns CLOCK_MONOTONIC in milliseconds, the clock of
     * call->deadline_ms. */
    int64_t (*now_ms)(void);
    /* should_stop returns non-zero once the run's deadline has passed or
     * the daemon abandons running work; long runs should poll it. */
    int (*should_stop)(const struct tm_call *call);
    void *spare[8];

    /* ABI 1.1: the JSON helpers. Call them through the tm_json_*()
     * wrappers below, which check struct_size first. */

    /* json_find looks up key among the members of the JSON object text
     * json[0..len) and returns in *val, *val_len its value's JSON text (a
     * slice of json). Returns a tm_json_status. */
    int (*json_find)(const char *json, size_t len, const char *key,
                     const char **val, size_t *val_len);
    /* json_string decodes the JSON string value val[0..len) into buf[size]
     * (NUL-terminated) and its length into *out_len; with buf NULL, only
     * measures. */
    int (*json_string)(const char *val, size_t len, char *buf, size_t size,
                       size_t *out_len);
    /* json_int and json_number read a JSON number value. */
    int (*json_int)(const char *val, size_t len, int64_t *out);
    int (*json_number)(const char *val, size_t len, double *out);
    /* The builder: see tm_json_new() and the tm_json_add_*() wrappers. */
    struct tm_json *(*json_new)(void);
    void (*json_free)(struct tm_json *jb);
    int (*json_open)(struct tm_json *jb, const char *key, int array);
    int (*json_close)(struct tm_json *jb);
    int (*json_add_string)(struct tm_json *jb, const char *key,
                           const char *s, size_t len);
    int (*json_add_int)(struct tm_json *jb, const char *key, int64_t v);
    int (*json_add_double)(struct tm_json *jb, const char *key, double v);
    int (*json_add_bool)(struct tm_json *jb, const char *key, int v);
    int (*json_add_null)(struct tm_json *jb, const char *key);
    int (*json_add_raw)(struct tm_json *jb, const char *key,
                        const char *json, size_t len);
    const char *(*json_text)(struct tm_json *jb, size_t *len);
    const char *(*json_error)(const struct tm_json *jb);
    int (*json_result)(struct tm_call *call, struct tm_json *jb);

    /* ABI 1.3: the run's trace context. Call it through tm_traceparent(). */

    /* traceparent returns the W3C traceparent of the run (55 characters,
     * NUL-terminated, valid for the length of cb_run), or NULL when the
     * message carries no trace context. */
    const char *(*traceparent)(const struct tm_call *call);
};

/* TM_HOST_HAS(host, member) is true when the host table has member: a
 * daemon older than the plugin's header has a shorter table. */
#define TM_HOST_HAS(host, member)                                         \
    ((host) != NULL && (host)->struct_size >=                             \
                           offsetof(struct tm_host, member) +             \
                               sizeof((host)->member))

/*
 * struct tm_task_env is what cb_init receives: the task's identity and its
 * `config:` mapping from the YAML file as JSON text ("{}" when absent).
 */
struct tm_task_env {
    size_t struct_size;
    const char *task;        /* task name in the config */
    const char *queue;       /* queue or stream it consumes */
    const char *config_json; /* NUL-terminated JSON object text */
    const struct tm_host *host;
    void *spare[4];
};

/*
 * struct tm_call is one run of one message. body is NUL-terminated JSON
 * object text (already validated as UTF-8 JSON object); body and id are
 * borrowed for the length of cb_run.
 */
struct tm_call {
    size_t struct_size;
    const char *body;
    size_t body_len;
    const char *id;          /* the broker's message id */
    unsigned attempt;        /* 1 on first delivery, then 2, 3, ... */
    int64_t deadline_ms;     /* CLOCK_MONOTONIC ms; 0 = no deadline */
    void *task_data;         /* what cb_init stored */
    void *worker_data;       /* what cb_worker_init stored */
    const struct tm_host *host;
    void *spare[4];
};

/*
 * struct tm_task_plugin describes a plugin. struct_size comes first so that
 * the loader can check it before reading anything else.
 */
struct tm_task_plugin {
    uint32_t struct_size;
    uint32_t magic;          /* TM_TASK_MAGIC */
    uint16_t abi_major;      /* TM_TASK_ABI_MAJOR */
    uint16_t abi_minor;      /* TM_TASK_ABI_MINOR */
    uint32_t signature;      /* TM_TASK_SIGNATURE */

    const char *name;        /* required, unique among loaded plugins */
    const char *version;     /* required */
    const char *description; /* optional */
    const char *request_schema;  /* optional JSON Schema text */
    const char *response_schema; /* optional JSON Schema text */

    /* cb_init prepares the task from its config; store per-task state in
     * *task_data. Return 0, or -1 after env->host->log() of the reason:
     * the daemon then refuses the task. Optional. */
    int (*cb_init)(const struct tm_task_env *env, void **task_data);
    /* cb_fini releases what cb_init made. Optional. */
    void (*cb_fini)(void *task_data);
    /* cb_worker_init runs once per worker thread or child process.
     * Return 0, or -1 to refuse (the worker is not started). Optional. */
    int (*cb_worker_init)(void *task_data, void **worker_data);
    /* cb_worker_fini releases what cb_worker_init made. Optional. */
    void (*cb_worker_fini)(void *task_data, void *worker_data);
    /* cb_run processes one message. Required. Returns a tm_task_result. */
    int (*cb_run)(struct tm_call *call);

    /* ABI 1.2: config_keys, when not NULL, is a NULL-terminated list of
     * the keys the task's `config:` mapping may have at its top level;
     * the daemon refuses any other key (a misspelling) before cb_init,
     * with the key's place in the file. NULL: any key (the plugin checks
     * its own). It and flags take the place of two spare pointers: the
     * descriptor's size is that of 1.1. */
    const char *const *config_keys;
    /* ABI 1.2: TM_TASK_F_* bits (0 in older plugins). */
    uintptr_t flags;
    void *spare[6];
};

/* TM_TASK_F_INIT_ON_RELOAD: the task's code lives in files cb_init reads
 * (a script, a module, an executable), which can change while its config
 * and the plugin file do not: a reload runs cb_init again for the task (a
 * fresh task data) instead of keeping the running one, so that a reload
 * refuses what a start would. */
#define TM_TASK_F_INIT_ON_RELOAD 0x1u

/* TM_TASK_DECLARE(...) defines the exported descriptor function. Pass the
 * descriptor's fields as designated initializers. */
#if defined(__GNUC__)
#define TM_TASK_EXPORT __attribute__((visibility("default")))
#else
#define TM_TASK_EXPORT
#endif

/* TM_TASK_LINKAGE gives the descriptor C linkage in a C++ plugin, where
 * the macro expands outside the header's extern "C" block; without it the
 * name is mangled and the loader finds no TM_TASK_SYMBOL. */
#ifdef __cplusplus
#define TM_TASK_LINKAGE extern "C"
#else
#define TM_TASK_LINKAGE
#endif

#define TM_TASK_DECLARE(...)                                               \
    TM_TASK_LINKAGE TM_TASK_EXPORT const struct tm_task_plugin *           \
    tm_task_descriptor(void);                                              \
    TM_TASK_LINKAGE TM_TASK_EXPORT const struct tm_task_plugin *           \
    tm_task_descriptor(void)                                               \
    {                                                                      \
        static const struct tm_task_plugin desc = {                        \
            .struct_size = (uint32_t)sizeof(struct tm_task_plugin),        \
            .magic = TM_TASK_MAGIC,                                        \
            .abi_major = TM_TASK_ABI_MAJOR,                                \
            .abi_minor = TM_TASK_ABI_MINOR,                                \
            .signature = TM_TASK_SIGNATURE,                                \
            __VA_ARGS__};                                                  \
        return &desc;                                                      \
    }

/* Convenience wrappers. */
#define tm_log(call, level, ...) \
    (call)->host->log((call), 1, (level), __VA_ARGS__)
#define tm_env_log(env, level, ...) \
    (env)->host->log((env), 0, (level), __VA_ARGS__)

/* tm_result stores a copy of the NUL-terminated JSON text as the result. */
static inline int tm_result(struct tm_call *call, const char *json)
{
    size_t n = 0;
    while (json[n] != '\0')
        n++;
    return call->host->set_result(call, json, n);
}

/* tm_error stores a copy of a one-line failure reason. */
static inline void tm_error(struct tm_call *call, const char *msg)
{
    call->host->set_error(call, msg);
}

/* tm_traceparent returns the run's W3C traceparent
 * ("00-<trace-id>-<span-id>-<flags>"), the parent for spans the task code
 * makes, or NULL when there is none (or the daemon is older than ABI
 * 1.3). With tracing on (telemetry.otlp_endpoint) it names the run's own
 * span; without, the context the message came with. Borrowed, like the
 * body, for the length of cb_run. */
static inline const char *tm_traceparent(const struct tm_call *call)
{
    /* a table long enough may still leave it unset */
    if (!TM_HOST_HAS(call->host, traceparent) ||
        call->host->traceparent == NULL)
        return NULL;
    return call->host->traceparent(call);
}

/*
 * JSON helpers, served by the daemon (so they work in every pool and need
 * no JSON library in the plugin).
 *
 * Reading: tm_json_get_*(host, json, key, ...) looks up key among the
 * members of the top-level object in the NUL-terminated JSON text json
 * (call->body in cb_run, env->config_json in cb_init; host is call->host or
 * env->host). Keys are compared after unescaping. Each returns TM_JSON_OK
 * and stores the value, or a status and leaves the output untouched:
 *
 *     int64_t a;
 *     if (tm_json_get_int(call->host, call->body, "a", &a) != TM_JSON_OK)
 *         ...
 */
enum tm_json_status {
    TM_JSON_OK = 0,
    TM_JSON_ABSENT = -1,      /* the object has no member with that key */
    TM_JSON_WRONG_TYPE = -2,  /* the value is of another type (null too) */
    TM_JSON_RANGE = -3,       /* the value does not fit: an integer out of
                                 range, a number beyond double, a string
                                 longer than the buffer or holding \u0000 */
    TM_JSON_BAD_TEXT = -4,    /* the text is not one JSON object, or it
                                 names the key twice */
    TM_JSON_NO_MEMORY = -5,   /* malloc failed (tm_json_get_strdup) */
    TM_JSON_UNSUPPORTED = -6  /* the daemon predates the helpers */
};

/* tm_json_status_text names a status for an error message. */
static inline const char *tm_json_status_text(int status)
{
    switch (status) {
    case TM_JSON_OK:
        return "ok";
    case TM_JSON_ABSENT:
        return "missing";
    case TM_JSON_WRONG_TYPE:
        return "of the wrong type";
    case TM_JSON_RANGE:
        return "out of range";
    case TM_JSON_BAD_TEXT:
        return "not read: the text is not one JSON object with unique keys";
    case TM_JSON_NO_MEMORY:
        return "not read: out of memory";
    case TM_JSON_UNSUPPORTED:
        return "not read: the daemon is too old for the JSON helpers";
    default:
        return "not read";
    }
}

/* tm_json_get_raw stores in *val and *len the value's JSON text, as it
 * stands in json (borrowed: a slice of json, not NUL-terminated), e.g. to
 * pass a sub-object on with tm_json_add_rawn(). The other getters use it. */
static inline int tm_json_get_raw(const struct tm_host *host,
                                  const char *json, const char *key,
                                  const char **val, size_t *len)
{
    size_t n = 0;
    if (!TM_HOST_HAS(host, json_result))
        return TM_JSON_UNSUPPORTED;
    if (json != NULL)
        while (json[n] != '\0')
            n++;
    return host->json_find(json, n, key, val, len);
}

/* tm_json_get_string copies the unescaped string into buf[size], NUL-
 * terminated (TM_JSON_RANGE when it does not fit). */
static inline int tm_json_get_string(const struct tm_host *host,
                                     const char *json, const char *key,
                                     char *buf, size_t size)
{
    const char *v;
    size_t n, out;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    if (st != TM_JSON_OK)
        return st;
    if (buf == NULL || size == 0)
        return TM_JSON_RANGE;
    return host->json_string(v, n, buf, size, &out);
}

/* tm_json_get_strdup stores in *out a malloc'd copy of the unescaped
 * string; the caller frees it with free(). */
static inline int tm_json_get_strdup(const struct tm_host *host,
                                     const char *json, const char *key,
                                     char **out)
{
    const char *v;
    size_t n, len;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    if (st != TM_JSON_OK)
        return st;
    st = host->json_string(v, n, NULL, 0, &len);
    if (st != TM_JSON_OK)
        return st;
    char *s = (char *)malloc(len + 1);
    if (s == NULL)
        return TM_JSON_NO_MEMORY;
    st = host->json_string(v, n, s, len + 1, &len);
    if (st != TM_JSON_OK) {
        free(s);
        return st;
    }
    *out = s;
    return TM_JSON_OK;
}

/* tm_json_get_int reads an integer: no fraction, no exponent, within
 * int64_t (else TM_JSON_RANGE). */
static inline int tm_json_get_int(const struct tm_host *host,
                                  const char *json, const char *key,
                                  int64_t *out)
{
    const char *v;
    size_t n;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    return st != TM_JSON_OK ? st : host->json_int(v, n, out);
}

/* tm_json_get_int_range reads an integer from min to max inclusive. */
static inline int tm_json_get_int_range(const struct tm_host *host,
                                        const char *json, const char *key,
                                        int64_t min, int64_t max,
                                        int64_t *out)
{
    int64_t v;
    int st = tm_json_get_int(host, json, key, &v);
    if (st != TM_JSON_OK)
        return st;
    if (v < min || v > max)
        return TM_JSON_RANGE;
    *out = v;
    return TM_JSON_OK;
}

/* tm_json_get_number reads any JSON number as a double (TM_JSON_RANGE
 * beyond its range). */
static inline int tm_json_get_number(const struct tm_host *host,
                                     const char *json, const char *key,
                                     double *out)
{
    const char *v;
    size_t n;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    return st != TM_JSON_OK ? st : host->json_number(v, n, out);
}

/* tm_json_get_bool stores 1 for true, 0 for false. */
static inline int tm_json_get_bool(const struct tm_host *host,
                                   const char *json, const char *key,
                                   int *out)
{
    const char *v;
    size_t n;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    if (st != TM_JSON_OK)
        return st;
    if (n == 4 && v[0] == 't') {
        *out = 1;
        return TM_JSON_OK;
    }
    if (n == 5 && v[0] == 'f') {
        *out = 0;
        return TM_JSON_OK;
    }
    return TM_JSON_WRONG_TYPE;
}

/* tm_json_get_null returns TM_JSON_OK when key is present with the value
 * null, TM_JSON_WRONG_TYPE when present with another value. */
static inline int tm_json_get_null(const struct tm_host *host,
                                   const char *json, const char *key)
{
    const char *v;
    size_t n;
    int st = tm_json_get_raw(host, json, key, &v, &n);
    if (st != TM_JSON_OK)
        return st;
    return n == 4 && v[0] == 'n' ? TM_JSON_OK : TM_JSON_WRONG_TYPE;
}

/*
 * Building: a struct tm_json is a builder made by the daemon; it writes
 * one JSON value (usually an object), escaping strings and checking each
 * step, so its text is always valid JSON:
 *
 *     struct tm_json *out = tm_json_new_object(call->host);
 *     tm_json_add_string(out, "greeting", text);
 *     tm_json_add_int(out, "count", n);
 *     return tm_json_result(call, out) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
 *
 * key names the member inside an object and must be NULL at the top level
 * and inside an array. Each call returns 0, or -1 once the builder has
 * failed (a key missing or misplaced, a string not UTF-8, raw text not
 * JSON, a number not finite, nesting too deep, over 16 MiB); the first
 * failure sticks, later calls do nothing, and tm_json_result() reports it,
 * so checking only the last call is enough. A NULL builder is accepted
 * everywhere and fails. Keys are not checked for duplicates. A builder is
 * used by one thread at a time.
 */
struct tm_json {
    const struct tm_host *host; /* the table that made it; the rest of the
                                   builder is the daemon's */
};

/* tm_json_new returns an empty builder (NULL under a daemon without the
 * helpers). Free it with tm_json_free() or hand it to tm_json_result(). */
static inline struct tm_json *tm_json_new(const struct tm_host *host)
{
    return TM_HOST_HAS(host, json_result) ? host->json_new() : NULL;
}

/* tm_json_begin_object / tm_json_begin_array open a container (a member
 * named key inside an object); tm_json_end closes the innermost one. */
static inline int tm_json_begin_object(struct tm_json *jb, const char *key)
{
    return jb != NULL ? jb->host->json_open(jb, key, 0) : -1;
}

static inline int tm_json_begin_array(struct tm_json *jb, const char *key)
{
    return jb != NULL ? jb->host->json_open(jb, key, 1) : -1;
}

static inline int tm_json_end(struct tm_json *jb)
{
    return jb != NULL ? jb->host->json_close(jb) : -1;
}

/* tm_json_new_object returns a builder with its top-level object open. */
static inline struct tm_json *tm_json_new_object(const struct tm_host *host)
{
    struct tm_json *jb = tm_json_new(host);
    tm_json_begin_object(jb, NULL);
    return jb;
}

/* tm_json_add_stringn adds len bytes of UTF-8 text s, escaped. */
static inline int tm_json_add_stringn(struct tm_json *jb, const char *key,
                                      const char *s, size_t len)
{
    return jb != NULL ? jb->host->json_add_string(jb, key, s, len) : -1;
}

/* tm_json_add_string adds the NUL-terminated UTF-8 text s, escaped. */
static inline int tm_json_add_string(struct tm_json *jb, const char *key,
                                     const char *s)
{
    size_t n = 0;
    if (s != NULL)
        while (s[n] != '\0')
            n++;
    return jb != NULL ? jb->host->json_add_string(jb, key, s, n) : -1;
}

static inline int tm_json_add_int(struct tm_json *jb, const char *key,
                                  int64_t v)
{
    return jb != NULL ? jb->host->json_add_int(jb, key, v) : -1;
}

/* tm_json_add_double adds a finite number, written so that it reads back
 * as the same double. */
static inline int tm_json_add_double(struct tm_json *jb, const char *key,
                                     double v)
{
    return jb != NULL ? jb->host->json_add_double(jb, key, v) : -1;
}

static inline int tm_json_add_bool(struct tm_json *jb, const char *key,
                                   int v)
{
    return jb != NULL ? jb->host->json_add_bool(jb, key, v) : -1;
}

static inline int tm_json_add_null(struct tm_json *jb, const char *key)
{
    return jb != NULL ? jb->host->json_add_null(jb, key) : -1;
}

/* tm_json_add_rawn adds len bytes of JSON text as a value, after checking
 * that it is one valid UTF-8 JSON value (e.g. from tm_json_get_raw()). */
static inline int tm_json_add_rawn(struct tm_json *jb, const char *key,
                                   const char *json, size_t len)
{
    return jb != NULL ? jb->host->json_add_raw(jb, key, json, len) : -1;
}

static inline int tm_json_add_raw(struct tm_json *jb, const char *key,
                                  const char *json)
{
    size_t n = 0;
    if (json != NULL)
        while (json[n] != '\0')
            n++;
    return tm_json_add_rawn(jb, key, json, n);
}

/* tm_json_text closes what is still open and returns the text (NUL-
 * terminated, its length in *len when len is not NULL), owned by the
 * builder; NULL when the builder failed (tm_json_error() says why). Adding
 * after this fails. */
static inline const char *tm_json_text(struct tm_json *jb, size_t *len)
{
    return jb != NULL ? jb->host->json_text(jb, len) : NULL;
}

/* tm_json_error returns why the builder failed, or NULL. */
static inline const char *tm_json_error(const struct tm_json *jb)
{
    return jb != NULL ? jb->host->json_error(jb)
                      : "no builder (the daemon is too old for the JSON "
                        "helpers)";
}

/* tm_json_free frees a builder; NULL is accepted. */
static inline void tm_json_free(struct tm_json *jb)
{
    if (jb != NULL)
        jb->host->json_free(jb);
}

/* tm_json_result closes what is still open and makes the builder's text
 * the run's result, without copying; it frees the builder either way.
 * Returns 0, or -1 after setting the run's error to the builder's
 * failure. */
static inline int tm_json_result(struct tm_call *call, struct tm_json *jb)
{
    if (jb == NULL) {
        tm_error(call, "no result: the daemon is too old for the JSON "
                       "helpers");
        return -1;
    }
    return call->host->json_result(call, jb);
}

#ifdef __cplusplus
}
#endif

#endif /* TASKMILL_H */
