/* crash.c - a fatal signal's last words: signal, task, message, backtrace. */
#include "util/crash.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

/*
 * Everything the handler does must be async-signal-safe: no malloc, no
 * stdio, no locks of our own. It formats into a buffer on its stack with
 * the helpers below and writes each line with one write(2). Two calls are
 * not on POSIX's list but are what every crash reporter relies on:
 * backtrace() (made safe by a first call at install time, which loads
 * libgcc's unwinder) and dladdr() (the lookup backtrace_symbols_fd() does
 * internally; used directly so each frame becomes a log line, in the JSON
 * format too).
 */

/* Task names are config keys; message ids are Redis ids or AMQP
 * message_id values (a short string, at most 255 bytes). Longer values are
 * truncated in the report. */
#define CRASH_TASK_MAX 128
#define CRASH_ID_MAX 256
/* Deepest backtrace reported. */
#define CRASH_FRAMES_MAX 64
/* One report line: message plus timestamp, names and JSON escaping. */
#define CRASH_LINE_MAX 2048
/* Alternate signal stack per thread: the report's frames need a few KiB;
 * dladdr() and the unwinder more. */
#define CRASH_ALTSTACK_SIZE (64u * 1024u)

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE,
                                    SIGABRT};

/* struct crash_ctx is what a thread runs. active is set only after the
 * names are complete, and cleared before they change, so the handler never
 * reads a half-written name (a signal interrupts only its own thread). */
struct crash_ctx {
    volatile sig_atomic_t active;
    char task[CRASH_TASK_MAX];
    char msgid[CRASH_ID_MAX];
};

static _Thread_local struct crash_ctx crash_ctx;
static _Thread_local void *crash_altstack; /* mapped here, or NULL */

/* Names of loaded objects (see tm_crash_name_object). A slot's base is
 * stored last (release) when it is filled and cleared first when it is
 * emptied, so the handler, which reads base with acquire, never sees a
 * half-written path for a live base. Writers hold objects_mu (the handler
 * never takes it). */
#define CRASH_PATH_MAX 256
static struct {
    _Atomic(uintptr_t) base;
    char path[CRASH_PATH_MAX];
} crash_objects[TM_CRASH_OBJECTS];
static pthread_mutex_t objects_mu = PTHREAD_MUTEX_INITIALIZER;

void tm_crash_name_object(const void *base, const char *path)
{
    pthread_mutex_lock(&objects_mu);
    for (size_t i = 0; i < TM_CRASH_OBJECTS; i++) {
        if (atomic_load_explicit(&crash_objects[i].base,
                                 memory_order_relaxed) != 0)
            continue;
        size_t n = strlen(path);
        if (n >= CRASH_PATH_MAX)
            n = CRASH_PATH_MAX - 1;
        memcpy(crash_objects[i].path, path, n);
        crash_objects[i].path[n] = '\0';
        atomic_store_explicit(&crash_objects[i].base, (uintptr_t)base,
                              memory_order_release);
        break;
    }
    pthread_mutex_unlock(&objects_mu);
}

void tm_crash_forget_object(const void *base)
{
    pthread_mutex_lock(&objects_mu);
    for (size_t i = 0; i < TM_CRASH_OBJECTS; i++)
        if (atomic_load_explicit(&crash_objects[i].base,
                                 memory_order_relaxed) == (uintptr_t)base) {
            atomic_store_explicit(&crash_objects[i].base, 0,
                                  memory_order_release);
            break;
        }
    pthread_mutex_unlock(&objects_mu);
}

/* object_name returns the name registered for an object loaded at base,
 * or fallback. Async-signal-safe: atomic loads only. */
static const char *object_name(const void *base, const char *fallback)
{
    for (size_t i = 0; i < TM_CRASH_OBJECTS; i++)
        if (atomic_load_explicit(&crash_objects[i].base,
                                 memory_order_acquire) == (uintptr_t)base)
            return crash_objects[i].path;
    return fallback;
}

/* crash_tid is the thread that is reporting (0: none yet). */
static atomic_int crash_tid;

/* ------------------------------------------------ async-signal-safe text */

struct line {
    char buf[CRASH_LINE_MAX];
    size_t n;
};

static void put_raw(struct line *l, const char *s)
{
    for (; *s != '\0' && l->n < sizeof l->buf - 2; s++)
        l->buf[l->n++] = *s;
}

/* put_text appends s escaped for a JSON string (json) or with control
 * characters made spaces (text), as log.c does. */
static void put_text(struct line *l, const char *s, int json)
{
    static const char hex[] = "0123456789abcdef";
    for (; *s != '\0' && l->n < sizeof l->buf - 8; s++) {
        unsigned char c = (unsigned char)*s;
        if (json && (c == '"' || c == '\\')) {
            l->buf[l->n++] = '\\';
            l->buf[l->n++] = (char)c;
        } else if (c < 0x20) {
            if (json) {
                memcpy(l->buf + l->n, "\\u00", 4);
                l->buf[l->n + 4] = hex[c >> 4];
                l->buf[l->n + 5] = hex[c & 15];
                l->n += 6;
            } else {
                l->buf[l->n++] = ' ';
            }
        } else {
            l->buf[l->n++] = (char)c;
        }
    }
}

/* fmt_uint writes v in base 10 or 16, zero-padded to width, into out
 * (at least 24 bytes). */
static void fmt_uint(char *out, uintmax_t v, unsigned base, int width)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v != 0 && n < (int)sizeof tmp);
    while (n < width && n < (int)sizeof tmp)
        tmp[n++] = '0';
    int k = 0;
    while (n > 0)
        out[k++] = tmp[--n];
    out[k] = '\0';
}

static void put_uint(struct line *l, uintmax_t v, int width)
{
    char d[24];
    fmt_uint(d, v, 10, width);
    put_raw(l, d);
}

static void put_hex(struct line *l, uintptr_t v)
{
    char d[24];
    fmt_uint(d, v, 16, 1);
    put_raw(l, "0x");
    put_raw(l, d);
}

/* put_stamp appends the UTC time as log.c writes it, computed by hand:
 * gmtime_r() may take the time zone lock. Days to civil date after
 * H. Hinnant's days_from_civil inverse. */
static void put_stamp(struct line *l)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t secs = (int64_t)ts.tv_sec;
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1;
    int64_t m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (m <= 2);
    put_uint(l, (uintmax_t)y, 4);
    put_raw(l, "-");
    put_uint(l, (uintmax_t)m, 2);
    put_raw(l, "-");
    put_uint(l, (uintmax_t)d, 2);
    put_raw(l, "T");
    put_uint(l, (uintmax_t)(rem / 3600), 2);
    put_raw(l, ":");
    put_uint(l, (uintmax_t)(rem / 60 % 60), 2);
    put_raw(l, ":");
    put_uint(l, (uintmax_t)(rem % 60), 2);
    put_raw(l, ".");
    put_uint(l, (uintmax_t)(ts.tv_nsec / 1000000L), 3);
    put_raw(l, "Z");
}

/* line_begin starts a log line with level error, source "crash" and the
 * thread's task and message id, in the log's format. */
static void line_begin(struct line *l, int json)
{
    const struct crash_ctx *c = &crash_ctx;
    int named = c->active;
    l->n = 0;
    if (json) {
        put_raw(l, "{\"ts\":\"");
        put_stamp(l);
        put_raw(l, "\",\"level\":\"error\",\"src\":\"crash");
        if (named && c->task[0] != '\0') {
            put_raw(l, "\",\"task\":\"");
            put_text(l, c->task, 1);
        }
        if (named && c->msgid[0] != '\0') {
            put_raw(l, "\",\"msg_id\":\"");
            put_text(l, c->msgid, 1);
        }
        put_raw(l, "\",\"msg\":\"");
        return;
    }
    put_stamp(l);
    put_raw(l, " error [crash");
    if (named && c->task[0] != '\0') {
        put_raw(l, ":");
        put_text(l, c->task, 0);
    }
    put_raw(l, "] ");
    if (named && c->msgid[0] != '\0') {
        put_raw(l, "id=");
        put_text(l, c->msgid, 0);
        put_raw(l, " ");
    }
}

/* line_end closes the line and writes it with one write(2). */
static void line_end(struct line *l, int json)
{
    if (json)
        put_raw(l, "\"}");
    l->buf[l->n++] = '\n';
    const char *p = l->buf;
    size_t left = l->n;
    while (left > 0) {
        ssize_t w = write(STDERR_FILENO, p, left);
        if (w <= 0)
            break; /* stderr is gone: nothing to report to */
        p += w;
        left -= (size_t)w;
    }
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGILL:
        return "SIGILL";
    case SIGFPE:
        return "SIGFPE";
    case SIGABRT:
        return "SIGABRT";
    default:
        return "signal";
    }
}

/* put_frame appends "#i FILE(SYMBOL+0xOFF) [0xADDR]" for one return
 * address, as backtrace_symbols_fd() would print it. */
static void put_frame(struct line *l, int i, void *addr, int json)
{
    Dl_info info;
    put_raw(l, "#");
    put_uint(l, (uintmax_t)i, 1);
    put_raw(l, " ");
    if (dladdr(addr, &info) != 0 && info.dli_fname != NULL) {
        put_text(l, object_name(info.dli_fbase, info.dli_fname), json);
        put_raw(l, "(");
        if (info.dli_sname != NULL && info.dli_saddr != NULL) {
            put_text(l, info.dli_sname, json);
            put_raw(l, "+");
            put_hex(l, (uintptr_t)addr - (uintptr_t)info.dli_saddr);
        } else {
            put_raw(l, "+");
            put_hex(l, (uintptr_t)addr - (uintptr_t)info.dli_fbase);
        }
        put_raw(l, ") ");
    }
    put_raw(l, "[");
    put_hex(l, (uintptr_t)addr);
    put_raw(l, "]");
}

/* restore_and_raise gives sig its default action and sends it to this
 * thread. It is blocked while the handler runs, so it takes effect when
 * the handler returns (for a fault, re-executing the instruction faults
 * again, now fatally). */
static void restore_and_raise(int sig)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void cb_crash(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    int saved_errno = errno;
    int tid = (int)gettid();
    int none = 0;
    if (!atomic_compare_exchange_strong(&crash_tid, &none, tid)) {
        if (none == tid) {
            /* a fault inside this report: die without finishing it */
            restore_and_raise(sig);
            return;
        }
        /* another thread is reporting and will end the process */
        for (;;)
            pause();
    }
    int json = tm_log_get_format() == TM_LOG_JSON;
    struct line l;

    line_begin(&l, json);
    put_raw(&l, "crashed: signal ");
    put_uint(&l, (uintmax_t)sig, 1);
    put_raw(&l, " (");
    put_raw(&l, signal_name(sig));
    if (sig != SIGABRT && si != NULL && si->si_code > 0) {
        /* raised by the hardware, not sent: the faulting address */
        put_raw(&l, ", address ");
        put_hex(&l, (uintptr_t)si->si_addr);
    }
    put_raw(&l, ") in thread ");
    put_uint(&l, (uintmax_t)tid, 1);
    if (crash_ctx.active)
        put_raw(&l, " while running this task's message; backtrace:");
    else
        put_raw(&l, ", no task run recorded for this thread; backtrace:");
    line_end(&l, json);

    void *frames[CRASH_FRAMES_MAX];
    int n = backtrace(frames, CRASH_FRAMES_MAX);
    for (int i = 0; i < n; i++) {
        line_begin(&l, json);
        put_frame(&l, i, frames[i], json);
        line_end(&l, json);
    }
    line_begin(&l, json);
    put_raw(&l, "end of report; the process ends by signal ");
    put_uint(&l, (uintmax_t)sig, 1);
    line_end(&l, json);

    errno = saved_errno;
    restore_and_raise(sig);
}

/* ---------------------------------------------------------------- setup */

int tm_crash_thread_init(void)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE))
        return 0; /* one is set already (a sanitizer's): keep it */
    size_t size = CRASH_ALTSTACK_SIZE;
    if ((size_t)SIGSTKSZ > size)
        size = (size_t)SIGSTKSZ;
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED)
        return -1;
    stack_t ss = {.ss_sp = mem, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        munmap(mem, size);
        return -1;
    }
    crash_altstack = mem;
    return 0;
}

void tm_crash_thread_fini(void)
{
    if (crash_altstack == NULL)
        return;
    stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == crash_altstack &&
        sigaltstack(&off, NULL) == 0)
        munmap(cur.ss_sp, cur.ss_size);
    crash_altstack = NULL;
}

void tm_crash_install(void)
{
    /* the first backtrace() loads the unwinder (dlopen, malloc): do it
     * now, not in the handler */
    void *warm[2];
    (void)backtrace(warm, 2);
    if (tm_crash_thread_init() != 0)
        tm_log_warn("crash", "no alternate signal stack for the main "
                    "thread: a stack overflow there is not reported");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = cb_crash;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    /* no crash signal interrupts the report of another */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0];
         i++)
        sigaddset(&sa.sa_mask, crash_signals[i]);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0];
         i++)
        if (sigaction(crash_signals[i], &sa, NULL) != 0)
            tm_log_warn("crash", "cannot handle %s: its crashes are not "
                        "reported", signal_name(crash_signals[i]));
}

/* copy_name copies n bytes of s (or up to its NUL when n is SIZE_MAX)
 * into out[size], truncated and NUL-terminated. */
static void copy_name(char *out, size_t size, const char *s, size_t n)
{
    size_t k = 0;
    if (s != NULL)
        for (; k < n && k + 1 < size && s[k] != '\0'; k++)
            out[k] = s[k];
    out[k] = '\0';
}

void tm_crash_enter(const char *task, const char *msgid, size_t msgid_len)
{
    struct crash_ctx *c = &crash_ctx;
    c->active = 0;
    atomic_signal_fence(memory_order_seq_cst);
    copy_name(c->task, sizeof c->task, task, SIZE_MAX);
    copy_name(c->msgid, sizeof c->msgid, msgid, msgid_len);
    atomic_signal_fence(memory_order_seq_cst);
    c->active = 1;
}

void tm_crash_leave(void)
{
    crash_ctx.active = 0;
    atomic_signal_fence(memory_order_seq_cst);
}
