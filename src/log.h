/* log.h - one line per event to stderr, text or JSON. */
#ifndef TASKMILL_LOG_H
#define TASKMILL_LOG_H

#include <stdarg.h>

#include "taskmill.h" /* TM_LOG_* levels */

/* tm_log_setup sets the minimum level (TM_LOG_*) and the format
 * (1 = text, 2 = json, see enum tm_log_format). Call before threads start. */
void tm_log_setup(int level, int format);

/* tm_log_get_format returns the format set by tm_log_setup (a plain
 * read: the crash handler uses it from a signal handler). */
int tm_log_get_format(void);

/* tm_log_enabled returns non-zero when level would be written. */
int tm_log_enabled(int level);

/*
 * tm_log_write writes one event. src is the subsystem ("broker:redis",
 * "pool:thread", "task:add"), task and msgid may be NULL. The message is
 * formatted from fmt; newlines in it are replaced so one event stays one
 * line. Safe from any thread; one write(2) per line.
 */
void tm_log_write(int level, const char *src, const char *task,
                  const char *msgid, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void tm_log_vwrite(int level, const char *src, const char *task,
                   const char *msgid, const char *fmt, va_list ap);

#define tm_log_err(src, ...) \
    do { tm_log_write(TM_LOG_ERR, (src), NULL, NULL, __VA_ARGS__); } while (0)
#define tm_log_warn(src, ...) \
    do { tm_log_write(TM_LOG_WARNING, (src), NULL, NULL, __VA_ARGS__); } \
    while (0)
#define tm_log_info(src, ...) \
    do { tm_log_write(TM_LOG_INFO, (src), NULL, NULL, __VA_ARGS__); } \
    while (0)
#define tm_log_debug(src, ...) \
    do { \
        if (tm_log_enabled(TM_LOG_DEBUG)) \
            tm_log_write(TM_LOG_DEBUG, (src), NULL, NULL, __VA_ARGS__); \
    } while (0)

#endif /* TASKMILL_LOG_H */
