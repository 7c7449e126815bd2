/* saturation.c - the pool's saturation over the last minute: busy over
 * size, sampled once a second by the main loop. */
#include "daemon/daemon.h"

#include "util/util.h"

void tm_saturation_sample(struct tm_daemon *d)
{
    struct tm_saturation *s = &d->saturation;
    int64_t now = tm_now_ms();
    if (now < s->next_ms)
        return;
    /* one a second; a late round (a reload) takes one, not the missed */
    s->next_ms = s->next_ms == 0 || now - s->next_ms >= 1000
                     ? now + 1000
                     : s->next_ms + 1000;
    /* the main thread publishes generations: d->gen is its own to read */
    struct tm_gen *g = d->gen;
    if (g == NULL || g->pool == NULL || g->pool->size == 0)
        return;
    unsigned busy = g->pool->ops->busy(g->pool);
    unsigned long long ppm = (unsigned long long)busy * 1000000ULL /
                             g->pool->size;
    unsigned k = atomic_load(&s->taken);
    atomic_store(&s->ppm[k % TM_SATURATION_SAMPLES], (unsigned)ppm);
    atomic_store(&s->taken, k + 1);
}

double tm_daemon_pool_saturation(struct tm_daemon *d)
{
    struct tm_saturation *s = &d->saturation;
    unsigned k = atomic_load(&s->taken);
    if (k == 0)
        return -1;
    unsigned n = k < TM_SATURATION_SAMPLES ? k : TM_SATURATION_SAMPLES;
    unsigned long long sum = 0;
    for (unsigned i = 0; i < n; i++)
        sum += atomic_load(&s->ppm[i]);
    return (double)sum / n / 1e6;
}
