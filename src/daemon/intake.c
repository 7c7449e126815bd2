/* intake.c - the intake threads: one per task, reading from the broker
 * and handing messages to the pool. */
#include "daemon_private.h"

#include "log.h"
#include "util.h"

/* How long one blocking broker read may wait before intake looks at its
 * stop flag again. */
#define TM_FETCH_BLOCK_MS 250

/* wait_ms waits until ms pass, the generation stops, or room is made. */
static void wait_ms(struct tm_gen *g, int64_t ms)
{
    pthread_mutex_lock(&g->mu);
    if (!atomic_load(&g->stopping))
        tm_cond_wait_ns(&g->cv, &g->mu, ms * 1000000LL);
    pthread_mutex_unlock(&g->mu);
}

int64_t tm_backoff_jitter(int64_t ms)
{
    return ms + (int64_t)(tm_rand64() % (uint64_t)(ms / 2 + 1));
}

/* tm_backoff_next doubles a reconnect delay up to its cap. */
int64_t tm_backoff_next(int64_t ms)
{
    return ms * 2 > TM_RECONNECT_MAX_MS ? TM_RECONNECT_MAX_MS : ms * 2;
}

static void *intake_main(void *arg)
{
    struct tm_task *t = arg;
    struct tm_gen *g = t->gen;
    struct tm_broker *b = g->broker;
    int64_t backoff = TM_RECONNECT_MIN_MS;
    long prefetch = (long)t->cfg->prefetch;

    while (!atomic_load(&g->stopping)) {
        long room = prefetch - (long)atomic_load(&t->stats.inflight);
        if (room <= 0) {
            atomic_store(&t->waiting_room, 1);
            room = prefetch - (long)atomic_load(&t->stats.inflight);
            if (room <= 0)
                wait_ms(g, 100);
            atomic_store(&t->waiting_room, 0);
            continue;
        }
        /* an open circuit breaker holds the task's messages in the broker */
        int64_t hold = tm_circuit_gate(&t->circuit, t->cfg,
                                       atomic_load(&t->stats.inflight), &room);
        if (hold > 0) {
            wait_ms(g, hold);
            continue;
        }
        struct tm_batch *batch = NULL;
        int n = b->ops->fetch(b, t->index, (size_t)room, TM_FETCH_BLOCK_MS,
                              &batch);
        if (n < 0) {
            atomic_store(&t->subscribed, 0);
            wait_ms(g, tm_backoff_jitter(backoff));
            backoff = tm_backoff_next(backoff);
            continue;
        }
        backoff = TM_RECONNECT_MIN_MS;
        atomic_store(&t->subscribed, 1);
        if (n == 0 || batch == NULL)
            continue;
        for (size_t i = 0; i < batch->n; i++)
            batch->msgs[i].task = t;
        size_t total = batch->n;
        atomic_fetch_add(&t->stats.inflight, (long long)total);
        size_t acc = g->pool->ops->submit(g->pool, batch->msgs, total);
        for (size_t i = acc; i < total; i++) {
            /* the pool is draining: leave these unacknowledged */
            atomic_fetch_sub(&t->stats.inflight, 1);
            tm_msg_release(&batch->msgs[i]);
        }
    }
    return NULL;
}

void tm_intake_start(struct tm_gen *g)
{
    atomic_store(&g->stopping, 0);
    for (size_t i = 0; i < g->ntasks; i++) {
        if (pthread_create(&g->tasks[i].intake, NULL, intake_main,
                           &g->tasks[i]) == 0)
            g->tasks[i].intake_started = 1;
        else
            tm_log_err(TM_DAEMON_SRC, "task '%s': cannot start its intake thread",
                       g->tasks[i].cfg->name);
    }
}

/* tm_intake_stop stops reading new messages; what was read runs on. */
void tm_intake_stop(struct tm_gen *g)
{
    atomic_store(&g->stopping, 1);
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    g->broker->ops->wake(g->broker);
    for (size_t i = 0; i < g->ntasks; i++)
        if (g->tasks[i].intake_started) {
            pthread_join(g->tasks[i].intake, NULL);
            g->tasks[i].intake_started = 0;
        }
}

