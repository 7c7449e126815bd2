/* util.c - allocation wrappers, clocks and small string helpers. */
#include "util/util.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static void oom(size_t size)
{
    char line[96];
    int n = snprintf(line, sizeof line,
                     "taskmill: out of memory allocating %zu bytes\n", size);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) {
        /* nothing more can be done */
    }
    abort();
}

void *tm_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (p == NULL)
        oom(size);
    return p;
}

void *tm_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        oom(SIZE_MAX);
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        oom(n * size);
    return p;
}

void *tm_realloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (q == NULL)
        oom(size);
    return q;
}

void *tm_zero_pages(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        oom(SIZE_MAX);
    size_t len = n * size != 0 ? n * size : 1;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        oom(len);
    return p;
}

void tm_zero_pages_free(void *p, size_t n, size_t size)
{
    if (p != NULL)
        munmap(p, n * size != 0 ? n * size : 1);
}

char *tm_strdup(const char *s)
{
    return tm_strndup(s, strlen(s));
}

char *tm_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = tm_malloc(len + 1);
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

void tm_free(void *p)
{
    free(p);
}

char *tm_vasprintf(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0)
        n = 0;
    char *s = tm_malloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, again);
    va_end(again);
    return s;
}

char *tm_asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = tm_vasprintf(fmt, ap);
    va_end(ap);
    return s;
}

size_t tm_snprintf(char *buf, size_t size, const char *fmt, ...)
{
    if (size == 0)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)n >= size)
        return size - 1;
    return (size_t)n;
}

const char *tm_strerror(int errnum, char *buf, size_t size)
{
    /* _GNU_SOURCE strerror_r may return a static string instead. */
    const char *s = strerror_r(errnum, buf, size);
    if (s != buf)
        tm_snprintf(buf, size, "%s", s);
    return buf;
}

int64_t tm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t tm_now_ms(void)
{
    return tm_now_ns() / 1000000LL;
}

int64_t tm_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000LL;
}

void tm_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
}

/* monotonic_after returns CLOCK_MONOTONIC now + ns as a timespec. */
static struct timespec monotonic_after(int64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec += (long)(ns % 1000000000LL);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void tm_cond_wait_ns(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    struct timespec ts = monotonic_after(ns);
    pthread_cond_clockwait(cv, mu, CLOCK_MONOTONIC, &ts);
}

void tm_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec until = monotonic_after(ms * 1000000LL);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
           EINTR) {
    }
}

/* ascii_run returns how many of the n bytes at s are ASCII: 64, 16 or 8
 * at a time (large bodies are mostly ASCII). */
static size_t ascii_run(const unsigned char *s, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    while (n - i >= 64) {
        const __m128i *v = (const __m128i *)(const void *)(s + i);
        __m128i o = _mm_or_si128(
            _mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
            _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)));
        if (_mm_movemask_epi8(o) != 0)
            break;
        i += 64;
    }
    while (n - i >= 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
        if (m != 0)
            return i + (size_t)__builtin_ctz(m);
        i += 16;
    }
#endif
    uint64_t w;
    while (n - i >= sizeof w) {
        memcpy(&w, s + i, sizeof w);
        if ((w & 0x8080808080808080ull) != 0)
            break;
        i += sizeof w;
    }
    while (i < n && s[i] < 0x80)
        i++;
    return i;
}

size_t tm_utf8_seq(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    assert(n > 0 && s[0] >= 0x80);
    unsigned c = s[0];
    size_t need;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n <= need)
        return 0;
    unsigned cp = c & (0x3Fu >> need);
    for (size_t k = 1; k <= need; k++) {
        unsigned cc = s[k];
        if ((cc & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return need + 1;
}

int tm_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        i += ascii_run(s + i, len - i);
        if (i >= len)
            break;
        size_t k = tm_utf8_seq(str + i, len - i);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

uint64_t tm_rand64(void)
{
    static _Thread_local uint64_t state;
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                ((uint64_t)(uintptr_t)&state) ^ (uint64_t)getpid();
        if (state == 0)
            state = 0x9E3779B97F4A7C15ULL;
    }
    /* xorshift64* */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

void tm_rfc3339(long long ms, char *buf, size_t size)
{
    /* floor division, so times before 1970 come out right too */
    long long s = ms / 1000, frac = ms % 1000;
    if (frac < 0) {
        frac += 1000;
        s--;
    }
    time_t secs = (time_t)s;
    struct tm tmv;
    char base[40];
    if (gmtime_r(&secs, &tmv) == NULL ||
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tmv) == 0) {
        tm_snprintf(buf, size, "%lld", ms);
        return;
    }
    tm_snprintf(buf, size, "%s.%03dZ", base, (int)frac);
}

void tm_uuid4(char *buf, size_t size)
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        uint64_t a = tm_rand64() ^ (uint64_t)tm_now_ns(), b = tm_rand64();
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 8);
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    tm_snprintf(buf, size,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
                r[10], r[11], r[12], r[13], r[14], r[15]);
}

int64_t tm_backoff_next(int64_t ms, int64_t min_ms, int64_t max_ms)
{
    if (ms <= 0)
        return min_ms;
    return ms > max_ms / 2 ? max_ms : ms * 2;
}

int64_t tm_backoff_jitter(int64_t ms)
{
    return ms + (int64_t)(tm_rand64() % (uint64_t)(ms / 2 + 1));
}
