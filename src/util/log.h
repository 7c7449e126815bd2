/* log.h - one line per event to stderr, text or JSON. */
#ifndef TASKMILL_LOG_H
#define TASKMILL_LOG_H

#include <stdarg.h>
#include <stdint.h>

#include "taskmill.h" /* TM_LOG_* levels */

/* The formats of a line (log.format in the config). */
enum tm_log_format { TM_LOG_TEXT = 1, TM_LOG_JSON = 2 };

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

/*
 * struct tm_log_gate bounds the lines of one kind of event that may come
 * at any rate (a refusal repeated every few milliseconds, a warning noted
 * at every measurement): at most burst lines pass per window of
 * window_ms, the window opening at the first line that comes after the
 * last one ended. The lines held back are counted, and the next line that
 * passes can say how many. Not locked: the lines of one gate come from one
 * thread, or under the caller's lock. Make one with TM_LOG_GATE(burst,
 * window_ms) or tm_log_gate_init; a zeroed gate is not ready.
 */
struct tm_log_gate {
    int64_t window_ms;          /* the length of a window */
    unsigned burst;             /* lines that pass per window, 1 or more */
    int open;                   /* a window opened (at opened_ms) */
    int64_t opened_ms;
    unsigned passed;            /* lines passed in the open window */
    unsigned long suppressed;   /* held back since the last that passed */
};

#define TM_LOG_GATE(burst_, window_ms_) \
    { .window_ms = (window_ms_), .burst = (burst_) }

void tm_log_gate_init(struct tm_log_gate *g, unsigned burst,
                      int64_t window_ms);

/* tm_log_gate_pass says whether a line may be written now (now_ms, a
 * monotonic clock, tm_now_ms): 1, with the count of lines held back
 * since the last one that passed in *suppressed (NULL: not wanted), the
 * count starting again from 0; or 0, the line held back and counted. */
int tm_log_gate_pass(struct tm_log_gate *g, int64_t now_ms,
                     unsigned long *suppressed);

/* tm_log_gate_reset closes the open window: the next line passes (a
 * condition that ended and came back is news again). The count of lines
 * held back is kept for it. */
void tm_log_gate_reset(struct tm_log_gate *g);

/*
 * struct tm_log_repeat tells a new reason from the same one again: a
 * failure retried in a loop (a connect, a channel open) is worth a line at
 * its level when its text changes, and only a debug line while it is the
 * same as the last one. Not locked: one thread, or the caller's lock. A
 * zeroed one has seen nothing.
 */
struct tm_log_repeat {
    uint64_t hash; /* of the last text, 0: none */
};

/* tm_log_repeat_level returns level when text differs from the last text
 * given to r (which it then remembers), else TM_LOG_DEBUG. */
int tm_log_repeat_level(struct tm_log_repeat *r, int level, const char *text);

/* tm_log_repeat_reset forgets the last text: the condition ended, and
 * its return is news again. */
static inline void tm_log_repeat_reset(struct tm_log_repeat *r)
{
    r->hash = 0;
}

#endif /* TASKMILL_LOG_H */
