/* bench.h - small helpers shared by the bench/ programs (header only). */
#ifndef TASKMILL_BENCH_H
#define TASKMILL_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* bench_die prints "PROG: message" to stderr and exits 1. */
static inline void bench_die(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

static inline void bench_die(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* bench_mono_ns is CLOCK_MONOTONIC in nanoseconds. */
static inline int64_t bench_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* bench_wall_ns is CLOCK_REALTIME in nanoseconds: the clock shared with
 * the broker's own timestamps on the same host. */
static inline int64_t bench_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* bench_sleep_until sleeps until the monotonic time t_ns. */
static inline void bench_sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000LL),
                          .tv_nsec = (long)(t_ns % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
}

/* bench_parse_long parses a decimal argument or dies naming it. */
static inline long long bench_parse_long(const char *prog, const char *what,
                                         const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        bench_die(prog, "%s: expected an integer, got '%s'", what, s);
    return v;
}

static inline int bench_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* bench_pct returns the q-quantile (0..1, nearest rank) of the sorted
 * array v of n values; 0 when n is 0. */
static inline int64_t bench_pct(const int64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1];
}

/* bench_id_cmp orders two Redis stream ids "ms-seq" numerically. */
static inline int bench_id_cmp(const char *a, const char *b)
{
    char *ea, *eb;
    unsigned long long ams = strtoull(a, &ea, 10);
    unsigned long long bms = strtoull(b, &eb, 10);
    if (ams != bms)
        return ams < bms ? -1 : 1;
    unsigned long long aseq = *ea == '-' ? strtoull(ea + 1, NULL, 10) : 0;
    unsigned long long bseq = *eb == '-' ? strtoull(eb + 1, NULL, 10) : 0;
    return aseq < bseq ? -1 : aseq > bseq;
}

static volatile sig_atomic_t bench_term_seen;

static inline void bench_on_term(int sig)
{
    (void)sig;
    bench_term_seen = 1;
}

/* bench_hold_init, called first thing, catches SIGTERM and SIGINT when
 * BENCH_HOLD=1 (measure sets it), so that bench_hold() can wait for them:
 * a finished ceiling loop then stays alive, its /proc figures readable,
 * until the watcher has taken them. Reads restart (SA_RESTART). */
static inline int bench_hold_init(void)
{
    const char *h = getenv("BENCH_HOLD");
    if (h == NULL || strcmp(h, "1") != 0)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = bench_on_term;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    return 1;
}

/* bench_hold waits for the signal bench_hold_init caught (or returns at
 * once without BENCH_HOLD). */
static inline void bench_hold(void)
{
    const char *h = getenv("BENCH_HOLD");
    if (h == NULL || strcmp(h, "1") != 0)
        return;
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    while (!bench_term_seen)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

#endif /* TASKMILL_BENCH_H */
