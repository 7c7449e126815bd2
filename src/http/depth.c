/* depth.c - the queue depth refresher of taskmill_queue_depth and
 * friends. */
#include "http/http_private.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "broker.h"
#include "daemon.h"
#include "log.h"
#include "util.h"

#define SRC "http"

/* Queue depths are read from the broker this often while it is up, and
 * retried this soon after a failed read or while it is down. */
#define TM_DEPTH_REFRESH_MS 5000
#define TM_DEPTH_RETRY_MS 1000

struct tm_http_depth {
    struct tm_daemon *d;
    pthread_t refresher;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                 /* under mu */
};

/* ---- queue depth refresher ----------------------------------------------
 * Broker reads for taskmill_queue_depth and friends run here, every few
 * seconds, on the adapter's own monitoring connection: a scrape only reads
 * the cached values, so no burst of scrapes reaches the broker and no
 * handler waits for it. */

/* locked_refresh reads every task's counts; gen_lock is held. Returns 0,
 * 1 when the broker is not connected or has no depth reads, or -1 when
 * it could not be read (the last values are kept). */
static int locked_refresh(struct tm_daemon *d)
{
    struct tm_broker *b = d->broker;
    if (b == NULL || b->ops->depth == NULL || !atomic_load(&b->up))
        return 1;
    for (size_t i = 0; i < d->ntasks; i++) {
        long long depth, pending, dlq;
        if (b->ops->depth(b, i, &depth, &pending, &dlq) != 0)
            return -1;
        struct tm_task_stats *s = &d->tasks[i].stats;
        atomic_store(&s->queue_depth, depth);
        atomic_store(&s->queue_pending, pending);
        atomic_store(&s->dead_letter_depth, dlq);
        atomic_store(&s->depth_at_ms, tm_now_ms());
    }
    return 0;
}

/* refresh_depths runs one round under gen_lock: a reload waits for one
 * round at most (bounded by the adapter's command timeout). */
static int refresh_depths(struct tm_daemon *d)
{
    pthread_rwlock_rdlock(&d->gen_lock);
    int rc = locked_refresh(d);
    pthread_rwlock_unlock(&d->gen_lock);
    return rc;
}

static void *refresher_main(void *arg)
{
    struct tm_http_depth *h = arg;
    struct tm_daemon *d = h->d;
    int64_t wait_ms = 0;
    int failing = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(wait_ms / 1000);
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!h->stop &&
               pthread_cond_timedwait(&h->cv, &h->mu, &ts) != ETIMEDOUT)
            ;
        if (h->stop)
            break;
        pthread_mutex_unlock(&h->mu);
        int rc = refresh_depths(d);
        wait_ms = rc == 0 ? TM_DEPTH_REFRESH_MS : TM_DEPTH_RETRY_MS;
        if (rc < 0 && !failing)
            tm_log_debug(SRC, "cannot read queue depths; keeping the last "
                         "values");
        else if (rc == 0 && failing)
            tm_log_debug(SRC, "queue depths readable again");
        failing = rc < 0;
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    pthread_rwlock_rdlock(&d->gen_lock);
    if (d->broker != NULL && d->broker->ops->depth != NULL) {
        long long x;
        d->broker->ops->depth(d->broker, TM_BROKER_DEPTH_CLOSE, &x, &x, &x);
    }
    pthread_rwlock_unlock(&d->gen_lock);
    return NULL;
}

struct tm_http_depth *tm_http_depth_start(struct tm_daemon *d)
{
    struct tm_http_depth *h = tm_calloc(1, sizeof *h);
    h->d = d;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->refresher, NULL, refresher_main, h) != 0) {
        tm_log_warn(SRC, "cannot start the queue depth refresher; "
                    "taskmill_queue_depth and friends stay absent");
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        tm_free(h);
        return NULL;
    }
    return h;
}

void tm_http_depth_stop(struct tm_http_depth *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->refresher, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    tm_free(h);
}

