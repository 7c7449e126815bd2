/* util.h - allocation wrappers, clocks and small string helpers. */
#ifndef TASKMILL_UTIL_H
#define TASKMILL_UTIL_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* tm_malloc/tm_calloc/tm_realloc/tm_strdup abort the process with a log
 * line when memory is exhausted: the daemon cannot settle messages safely
 * without memory, and the broker redelivers what was unacknowledged.
 * tm_calloc checks n * size for overflow. tm_free accepts NULL. */
void *tm_malloc(size_t size);
void *tm_calloc(size_t n, size_t size);
void *tm_realloc(void *p, size_t size);
char *tm_strdup(const char *s);
char *tm_strndup(const char *s, size_t n);
void tm_free(void *p);

/* tm_zero_pages returns n * size bytes of zero pages of their own (an
 * anonymous mapping, aborting like tm_calloc when there is none): no page
 * is resident before it is first touched, whatever the heap's state, so a
 * large array that is mostly never used costs nothing.
 * tm_zero_pages_free takes the same n and size; it accepts NULL. */
void *tm_zero_pages(size_t n, size_t size);
void tm_zero_pages_free(void *p, size_t n, size_t size);

/* tm_asprintf returns a newly allocated formatted string. */
char *tm_asprintf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
char *tm_vasprintf(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));

/* tm_snprintf is snprintf that never returns more than size - 1 and
 * always terminates (size > 0). Returns the length written. */
size_t tm_snprintf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tm_strerror is a thread-safe strerror into buf; returns buf. */
const char *tm_strerror(int errnum, char *buf, size_t size);

/* Clocks: CLOCK_MONOTONIC in ns and ms; CLOCK_REALTIME in ms. */
int64_t tm_now_ns(void);
int64_t tm_now_ms(void);
int64_t tm_wall_ms(void);

/* tm_cond_init initialises cv to measure timed waits on CLOCK_MONOTONIC
 * (pthread_condattr_setclock), so that pthread_cond_timedwait deadlines
 * on it are monotonic ones: setting the wall clock neither stretches nor
 * cuts a wait. Destroy it with pthread_cond_destroy. */
void tm_cond_init(pthread_cond_t *cv);

/* tm_cond_wait_ns waits on cv, with mu held, for at most ns nanoseconds
 * measured on CLOCK_MONOTONIC, whatever clock cv was initialised with
 * (pthread_cond_clockwait): a wall clock step during the wait changes
 * nothing. It may return early (signal, spurious wake-up); callers look at
 * their condition again. */
void tm_cond_wait_ns(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ns);

/* tm_sleep_ms sleeps ms milliseconds of CLOCK_MONOTONIC, to an absolute
 * deadline, so that signals do not stretch it. */
void tm_sleep_ms(int64_t ms);

/* tm_utf8_valid returns 1 when s[0..len) is valid UTF-8 (no overlongs, no
 * surrogates), else 0. */
int tm_utf8_valid(const char *s, size_t len);
/* tm_utf8_seq returns the length (2 to 4) of the valid UTF-8 sequence
 * that starts s[0 .. n) (n > 0, s[0] not ASCII), or 0 when none does. */
size_t tm_utf8_seq(const char *s, size_t n);

/* tm_rand64 returns a fast thread-local pseudo-random number (jitter). */
uint64_t tm_rand64(void);

/* tm_backoff_next is the delay after one more failure in a row: min_ms
 * after the first (ms 0), then twice ms, at most max_ms. tm_backoff_jitter
 * is ms plus up to half of it at random (reconnects of many daemons do
 * not come in step). */
int64_t tm_backoff_next(int64_t ms, int64_t min_ms, int64_t max_ms);
int64_t tm_backoff_jitter(int64_t ms);

/* tm_uuid4 writes a random (version 4) UUID, 36 characters and a NUL,
 * into buf (message ids, reply streams, correlation ids): from the
 * kernel's random pool, or tm_rand64 and the clock if that would block. */
void tm_uuid4(char *buf, size_t size);

#define TM_STRERRNO_BUF 128

/* tm_rfc3339 writes the epoch milliseconds ms as an RFC 3339 UTC time
 * with milliseconds ("2026-12-01T03:00:00.000Z") into buf, the form every
 * time shown to people takes; the number itself if it cannot. */
void tm_rfc3339(long long ms, char *buf, size_t size);

#endif /* TASKMILL_UTIL_H */
