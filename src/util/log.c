/* log.c - one line per event to stderr, text or JSON. */
#include "util/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#define TM_LOG_LINE_MAX 2048

/* The settings are set at start and again by a reload (main thread) while
 * every thread logs: each is an atomic of its own, read relaxed. They
 * order nothing else, and a line written during a reload may use the old
 * level or format, or the new ones, each line whole either way. */
static atomic_int log_level = TM_LOG_INFO;
static atomic_int log_format = TM_LOG_TEXT;

void tm_log_setup(int level, int format)
{
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
    atomic_store_explicit(&log_format, format, memory_order_relaxed);
}

int tm_log_get_format(void)
{
    return atomic_load_explicit(&log_format, memory_order_relaxed);
}

int tm_log_enabled(int level)
{
    return level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

static const char *level_name(int level)
{
    switch (level) {
    case TM_LOG_ERR:
        return "error";
    case TM_LOG_WARNING:
        return "warning";
    case TM_LOG_INFO:
        return "info";
    default:
        return "debug";
    }
}

/* append copies s into buf at *pos, escaping for JSON when json is set and
 * replacing control characters (newlines) with spaces otherwise. */
static void append(char *buf, size_t *pos, size_t cap, const char *s,
                   int json)
{
    for (; *s != '\0' && *pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (json && (c == '"' || c == '\\')) {
            buf[(*pos)++] = '\\';
            buf[(*pos)++] = (char)c;
        } else if (c < 0x20) {
            if (json) {
                *pos += (size_t)snprintf(buf + *pos, cap - *pos, "\\u%04x", c);
            } else {
                buf[(*pos)++] = ' ';
            }
        } else {
            buf[(*pos)++] = (char)c;
        }
    }
}

static void append_raw(char *buf, size_t *pos, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (*pos + n + 2 >= cap)
        n = cap > *pos + 2 ? cap - *pos - 2 : 0;
    memcpy(buf + *pos, s, n);
    *pos += n;
}

void tm_log_vwrite(int level, const char *src, const char *task,
                   const char *msgid, const char *fmt, va_list ap)
{
    if (!tm_log_enabled(level))
        return;
    char msg[TM_LOG_LINE_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tmv;
    gmtime_r(&ts.tv_sec, &tmv);
    char stamp[96];
    snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
             tmv.tm_year + 1900, tmv.tm_mon + 1, tmv.tm_mday, tmv.tm_hour,
             tmv.tm_min, tmv.tm_sec, ts.tv_nsec / 1000000L);

    char line[TM_LOG_LINE_MAX + 512];
    size_t pos = 0, cap = sizeof line;
    if (tm_log_get_format() == TM_LOG_JSON) {
        append_raw(line, &pos, cap, "{\"ts\":\"");
        append_raw(line, &pos, cap, stamp);
        append_raw(line, &pos, cap, "\",\"level\":\"");
        append_raw(line, &pos, cap, level_name(level));
        append_raw(line, &pos, cap, "\",\"src\":\"");
        append(line, &pos, cap, src ? src : "taskmill", 1);
        if (task != NULL) {
            append_raw(line, &pos, cap, "\",\"task\":\"");
            append(line, &pos, cap, task, 1);
        }
        if (msgid != NULL) {
            append_raw(line, &pos, cap, "\",\"msg_id\":\"");
            append(line, &pos, cap, msgid, 1);
        }
        append_raw(line, &pos, cap, "\",\"msg\":\"");
        append(line, &pos, cap, msg, 1);
        append_raw(line, &pos, cap, "\"}");
    } else {
        append_raw(line, &pos, cap, stamp);
        append_raw(line, &pos, cap, " ");
        append_raw(line, &pos, cap, level_name(level));
        append_raw(line, &pos, cap, " [");
        append(line, &pos, cap, src ? src : "taskmill", 0);
        if (task != NULL) {
            append_raw(line, &pos, cap, ":");
            append(line, &pos, cap, task, 0);
        }
        append_raw(line, &pos, cap, "] ");
        if (msgid != NULL) {
            append_raw(line, &pos, cap, "id=");
            append(line, &pos, cap, msgid, 0);
            append_raw(line, &pos, cap, " ");
        }
        append(line, &pos, cap, msg, 0);
    }
    line[pos++] = '\n';
    /* one write(2) per line keeps lines whole across threads/processes */
    if (write(STDERR_FILENO, line, pos) < 0) {
        /* stderr is gone; nothing to report to */
    }
}

void tm_log_write(int level, const char *src, const char *task,
                  const char *msgid, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tm_log_vwrite(level, src, task, msgid, fmt, ap);
    va_end(ap);
}

void tm_log_gate_init(struct tm_log_gate *g, unsigned burst,
                      int64_t window_ms)
{
    *g = (struct tm_log_gate)TM_LOG_GATE(burst, window_ms);
}

int tm_log_gate_pass(struct tm_log_gate *g, int64_t now_ms,
                     unsigned long *suppressed)
{
    if (!g->open || now_ms - g->opened_ms >= g->window_ms) {
        g->open = 1;
        g->opened_ms = now_ms;
        g->passed = 0;
    }
    if (g->passed >= g->burst) {
        g->suppressed++;
        return 0;
    }
    g->passed++;
    if (suppressed != NULL)
        *suppressed = g->suppressed;
    g->suppressed = 0;
    return 1;
}

void tm_log_gate_reset(struct tm_log_gate *g)
{
    g->open = 0;
}

int tm_log_repeat_level(struct tm_log_repeat *r, int level, const char *text)
{
    /* FNV-1a, 64 bits; 0 is kept for "none" */
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0';
         p++)
        h = (h ^ *p) * 1099511628211ull;
    if (h == 0)
        h = 1;
    int same = h == r->hash;
    r->hash = h;
    return same ? TM_LOG_DEBUG : level;
}
