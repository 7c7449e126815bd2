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
 * Only standard C headers are used here, so the header builds anywhere.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TM_TASK_ABI_MAJOR changes when a layout below changes incompatibly: the
 * daemon refuses a plugin whose major differs. TM_TASK_ABI_MINOR grows when
 * fields are added at the end; the daemon accepts any minor and reads only
 * the fields the plugin's struct_size covers. */
#define TM_TASK_ABI_MAJOR 1
#define TM_TASK_ABI_MINOR 0

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
};

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

    void *spare[8];
};

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

#ifdef __cplusplus
}
#endif

#endif /* TASKMILL_H */
