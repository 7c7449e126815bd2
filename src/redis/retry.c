/* retry.c - the Redis adapter's retry schedule. */
#include "redis/redis.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

void tm_redis_retry_push(struct tm_redis_task *rt, const struct tm_redis_retry *e)
{
    pthread_mutex_lock(&rt->mu);
    if (rt->nheap == rt->capheap) {
        rt->capheap = rt->capheap ? rt->capheap * 2 : 16;
        rt->heap = tm_realloc(rt->heap, rt->capheap * sizeof *rt->heap);
    }
    size_t i = rt->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (rt->heap[parent].due_ms <= e->due_ms)
            break;
        rt->heap[i] = rt->heap[parent];
        i = parent;
    }
    rt->heap[i] = *e;
    pthread_mutex_unlock(&rt->mu);
}

/* tm_redis_retry_pop_due moves up to max due entries into out; returns the count,
 * and the due time of the next entry in *next_ms (0 when none). */
size_t tm_redis_retry_pop_due(struct tm_redis_task *rt, int64_t now, size_t max,
                           struct tm_redis_retry *out, int64_t *next_ms)
{
    size_t n = 0;
    pthread_mutex_lock(&rt->mu);
    while (n < max && rt->nheap > 0 && rt->heap[0].due_ms <= now) {
        out[n++] = rt->heap[0];
        struct tm_redis_retry last = rt->heap[--rt->nheap];
        size_t i = 0;
        for (;;) {
            size_t l = 2 * i + 1, s = i;
            if (l >= rt->nheap)
                break;
            s = l;
            if (l + 1 < rt->nheap &&
                rt->heap[l + 1].due_ms < rt->heap[l].due_ms)
                s = l + 1;
            if (last.due_ms <= rt->heap[s].due_ms)
                break;
            rt->heap[i] = rt->heap[s];
            i = s;
        }
        if (rt->nheap > 0)
            rt->heap[i] = last;
    }
    *next_ms = rt->nheap > 0 ? rt->heap[0].due_ms : 0;
    pthread_mutex_unlock(&rt->mu);
    return n;
}
