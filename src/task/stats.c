/* stats.c - per-task completion rates and recent durations, fixed size. */
#include "task/stats.h"

#include <stdlib.h>

#define NS_PER_S 1000000000LL

/* Largest duration kept, in microseconds (the unsigned 32-bit range). */
#define TM_DUR_MAX_US 4294967295ULL

void tm_rate_note(struct tm_rate *r, int64_t now_ns)
{
    int64_t s = now_ns / NS_PER_S;
    /* single writer: a relaxed load sees its own last store */
    int64_t newest = atomic_load_explicit(&r->newest, memory_order_relaxed);
    if (s < newest) {
        if (newest - s > 2)
            s = newest;
    } else {
        atomic_store_explicit(&r->newest, s, memory_order_relaxed);
    }
    size_t k = (size_t)s & (TM_RATE_SLOTS - 1);
    if (atomic_load_explicit(&r->sec[k], memory_order_relaxed) == s) {
        unsigned long long c =
            atomic_load_explicit(&r->count[k], memory_order_relaxed);
        atomic_store_explicit(&r->count[k], c + 1, memory_order_relaxed);
        return;
    }
    /* Reuse the slot for a new second, seqlock style: a reader that sees
     * the new count also sees that the slot's second changed. */
    atomic_store_explicit(&r->sec[k], -1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&r->count[k], 1, memory_order_relaxed);
    atomic_store_explicit(&r->sec[k], s, memory_order_release);
}

/* slot_count returns the completions counted for second s, or 0 when the
 * ring holds another second there. */
static unsigned long long slot_count(const struct tm_rate *r, int64_t s)
{
    size_t k = (size_t)s & (TM_RATE_SLOTS - 1);
    if (atomic_load_explicit(&r->sec[k], memory_order_acquire) != s)
        return 0;
    unsigned long long c =
        atomic_load_explicit(&r->count[k], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&r->sec[k], memory_order_relaxed) != s)
        return 0;
    return c;
}

void tm_rate_copy(struct tm_rate *dst, const struct tm_rate *src)
{
    atomic_store_explicit(&dst->newest,
                          atomic_load_explicit(&src->newest,
                                               memory_order_relaxed),
                          memory_order_relaxed);
    for (size_t k = 0; k < TM_RATE_SLOTS; k++) {
        int64_t s = atomic_load_explicit(&src->sec[k], memory_order_acquire);
        /* slot_count reads the count of second s, or 0 when the slot
         * moved on (then it is copied as unused) */
        unsigned long long c = s >= 0 ? slot_count(src, s) : 0;
        atomic_store_explicit(&dst->sec[k], c > 0 ? s : -1,
                              memory_order_relaxed);
        atomic_store_explicit(&dst->count[k], c, memory_order_relaxed);
    }
}

void tm_rate_read(const struct tm_rate *r, int64_t now_ns, int64_t since_ns,
                  double *r1, double *r60)
{
    int64_t now_s = now_ns / NS_PER_S;
    int64_t span = now_s - since_ns / NS_PER_S;
    *r1 = 0;
    *r60 = 0;
    if (span <= 0)
        return;
    if (span > TM_RATE_WINDOW_S)
        span = TM_RATE_WINDOW_S;
    *r1 = (double)slot_count(r, now_s - 1);
    unsigned long long sum = 0;
    for (int64_t s = now_s - span; s < now_s; s++)
        sum += slot_count(r, s);
    *r60 = (double)sum / (double)span;
}

void tm_durwin_note(struct tm_durwin *w, int64_t dur_ns)
{
    unsigned long long us = dur_ns > 0 ? ((unsigned long long)dur_ns + 500)
                                             / 1000
                                       : 0;
    if (us > TM_DUR_MAX_US)
        us = TM_DUR_MAX_US;
    unsigned long long n = atomic_load_explicit(&w->n, memory_order_relaxed);
    atomic_store_explicit(&w->us[n & (TM_DUR_WINDOW - 1)], (unsigned)us,
                          memory_order_relaxed);
    atomic_store_explicit(&w->n, n + 1, memory_order_release);
}

void tm_durwin_copy(struct tm_durwin *dst, const struct tm_durwin *src)
{
    /* the acquire pairs with the writer's release of n: the samples below
     * n are at least as new as n says */
    unsigned long long n = atomic_load_explicit(&src->n,
                                                memory_order_acquire);
    for (size_t i = 0; i < TM_DUR_WINDOW; i++)
        atomic_store_explicit(
            &dst->us[i],
            atomic_load_explicit(&src->us[i], memory_order_relaxed),
            memory_order_relaxed);
    atomic_store_explicit(&dst->n, n, memory_order_relaxed);
}

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* rank returns the nearest-rank p-th percentile (0 < p <= 100) of the
 * sorted v[0..n), n > 0. */
static unsigned rank(const unsigned *v, size_t n, unsigned p)
{
    size_t k = (n * p + 99) / 100; /* ceil(n * p / 100) */
    if (k == 0)
        k = 1;
    return v[k - 1];
}

size_t tm_durwin_percentiles(const struct tm_durwin *w, double *p50_ms,
                             double *p99_ms)
{
    unsigned v[TM_DUR_WINDOW];
    unsigned long long n = atomic_load_explicit(&w->n, memory_order_acquire);
    size_t cnt = n < TM_DUR_WINDOW ? (size_t)n : TM_DUR_WINDOW;
    *p50_ms = 0;
    *p99_ms = 0;
    if (cnt == 0)
        return 0;
    for (size_t i = 0; i < cnt; i++)
        v[i] = atomic_load_explicit(&w->us[i], memory_order_relaxed);
    qsort(v, cnt, sizeof v[0], cmp_uint);
    *p50_ms = (double)rank(v, cnt, 50) / 1000.0;
    *p99_ms = (double)rank(v, cnt, 99) / 1000.0;
    return cnt;
}
