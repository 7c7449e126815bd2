/* depth.c - the queue depth refresher of taskmill_queue_depth and
 * friends (the autoscaling gauges taskmill_queue_lag,
 * taskmill_queue_oldest_age_seconds and taskmill_delayed_due among
 * them). */
#include "http/http_private.h"

#include <pthread.h>
#include <stdatomic.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "daemon/daemon.h"
#include "util/log.h"
#include "util/util.h"

#define SRC "http"

/* Queue depths are read from the broker when a scrape wants them, at
 * most this often (values younger than this are served as they are),
 * and retried this soon after a failed read or while the broker is down,
 * as long as scrapes keep coming. A scrape that finds older values waits
 * for the read it asked for this long at most, then serves what there
 * is. */
#define TM_DEPTH_REFRESH_MS 5000
#define TM_DEPTH_RETRY_MS 1000
#define TM_DEPTH_WAIT_MS 1000

/* one task's counts, as read from the broker */
struct depth_read {
    long long depth, pending, dlq, scheduled, oldest_age_ms, delayed_due;
    int64_t at_ms;
};

struct tm_http_depth {
    struct tm_daemon *d;
    pthread_t refresher;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* stop requested */
    int stop;                 /* under mu */
    int wanted;               /* under mu: a scrape asked for a read */
    uint64_t rounds;          /* under mu: reads finished (cv: done) */
    int64_t read_ms;          /* under mu: when the last good read began */
    struct depth_read *vals;  /* refresher only: one round's reads */
    size_t nvals;
};

/* ---- queue depth refresher ----------------------------------------------
 * Broker reads for taskmill_queue_depth and friends run here, through
 * the admin layer's depth reads (admin/depth.c: the adapter's own
 * monitoring connection, the one `dlq list` counts with), and only when a scrape (/metrics,
 * /status, /api/v1/tasks) finds the cached values older than
 * TM_DEPTH_REFRESH_MS: an idle daemon nobody scrapes reads no depths at
 * all, and a burst of scrapes costs the broker one read. */

/*
 * The refresher reads from the broker without gen_lock: a read may last
 * the adapter's command timeout for every task when the broker does not
 * answer, and a reload must not wait for that. It takes the current
 * generation with a reference of its own (tm_gen_current), which keeps
 * that generation's broker and tasks alive until it drops it, however
 * long the read: a reload meanwhile publishes the next generation, and
 * the one read from is freed by whichever holder drops the last
 * reference. One refresher per process (there is one HTTP server).
 */

/* the refresher running, for tm_http_depth_want (one HTTP server, so one
 * refresher per process); set and cleared under self_mu */
static pthread_mutex_t self_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tm_http_depth *self;

/* pick_gen returns d's current generation, with a reference, when its
 * broker can be read from (connected unless !need_up, with depth reads),
 * else NULL. */
static struct tm_gen *pick_gen(struct tm_daemon *d, int need_up)
{
    struct tm_gen *g = tm_gen_current(d);
    struct tm_broker *b = g->broker;
    if (b == NULL || !tm_admin_has_depth(b) ||
        (need_up && !atomic_load(&b->up))) {
        tm_gen_unref(g);
        return NULL;
    }
    return g;
}

/* refresh_depths reads every task's counts. Returns 0, 1 when the broker
 * is not connected or has no depth reads, or -1 when it could not be read
 * (the last values are kept). */
static int refresh_depths(struct tm_http_depth *h)
{
    struct tm_gen *g = pick_gen(h->d, /* need_up = */ 1);
    if (g == NULL)
        return 1;
    struct tm_broker *b = g->broker;
    size_t n = g->ntasks;
    if (n > h->nvals) {
        h->vals = tm_realloc(h->vals, n * sizeof *h->vals);
        h->nvals = n;
    }
    int rc = 0;
    size_t got = 0;
    for (; got < n; got++) {
        struct depth_read *v = &h->vals[got];
        struct tm_admin_depth c;
        if (tm_admin_depth(b, got, &c) != 0) {
            rc = -1;
            break;
        }
        v->depth = c.depth;
        v->pending = c.pending;
        v->dlq = c.dlq;
        v->oldest_age_ms = c.oldest_age_ms;
        v->delayed_due = c.delayed_due;
        /* delayed messages: a count the adapter keeps, or -1 */
        v->scheduled = tm_admin_scheduled(b, got);
        v->at_ms = tm_now_ms();
    }
    /* stored in the generation read from, current or not: a replaced
     * one's values are read by no scrape that came after the reload, and
     * the reference keeps its tasks alive until here */
    for (size_t i = 0; i < got; i++) {
        struct tm_task_stats *s = &g->tasks[i].stats;
        atomic_store(&s->queue_depth, h->vals[i].depth);
        atomic_store(&s->queue_pending, h->vals[i].pending);
        atomic_store(&s->dead_letter_depth, h->vals[i].dlq);
        atomic_store(&s->scheduled_depth, h->vals[i].scheduled);
        atomic_store(&s->oldest_age_ms, h->vals[i].oldest_age_ms);
        atomic_store(&s->delayed_due, h->vals[i].delayed_due);
        atomic_store(&s->depth_at_ms, h->vals[i].at_ms);
    }
    tm_gen_unref(g);
    return rc;
}

static void *refresher_main(void *arg)
{
    struct tm_http_depth *h = arg;
    int64_t retry_at = 0; /* a failed read is retried then, if wanted */
    int failing = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->stop && !h->wanted)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->stop)
            break;
        /* after a failure, not sooner than TM_DEPTH_RETRY_MS */
        int64_t until = retry_at * 1000000LL, now;
        while (!h->stop && (now = tm_now_ns()) < until)
            tm_cond_wait_ns(&h->cv, &h->mu, until - now);
        if (h->stop)
            break;
        h->wanted = 0;
        pthread_mutex_unlock(&h->mu);
        int64_t began = tm_now_ms();
        int rc = refresh_depths(h);
        retry_at = rc == 0 ? 0 : tm_now_ms() + TM_DEPTH_RETRY_MS;
        if (rc < 0 && !failing)
            tm_log_debug(SRC, "cannot read queue depths; keeping the last "
                         "values");
        else if (rc == 0 && failing)
            tm_log_debug(SRC, "queue depths readable again");
        failing = rc < 0;
        pthread_mutex_lock(&h->mu);
        if (rc == 0)
            h->read_ms = began;
        h->rounds++;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    struct tm_gen *g = pick_gen(h->d, /* need_up = */ 0);
    if (g != NULL) {
        tm_admin_depth_close(g->broker);
        tm_gen_unref(g);
    }
    return NULL;
}

void tm_http_depth_want(void)
{
    pthread_mutex_lock(&self_mu);
    struct tm_http_depth *h = self;
    if (h == NULL) {
        pthread_mutex_unlock(&self_mu);
        return;
    }
    /* self_mu is held until the wait ends: tm_http_depth_stop clears
     * self under it before it frees h */
    pthread_mutex_lock(&h->mu);
    int64_t now = tm_now_ms();
    if (h->read_ms == 0 || now - h->read_ms >= TM_DEPTH_REFRESH_MS) {
        h->wanted = 1;
        pthread_cond_broadcast(&h->cv);
        uint64_t want = h->rounds + 1;
        int64_t until = tm_now_ns() + TM_DEPTH_WAIT_MS * 1000000LL, t;
        while (!h->stop && h->rounds < want && (t = tm_now_ns()) < until)
            tm_cond_wait_ns(&h->cv, &h->mu, until - t);
    }
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_unlock(&self_mu);
}

struct tm_http_depth *tm_http_depth_start(struct tm_daemon *d)
{
    struct tm_http_depth *h = tm_calloc(1, sizeof *h);
    h->d = d;
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->refresher, NULL, refresher_main, h) != 0) {
        tm_log_warn(SRC, "cannot start the queue depth refresher; "
                    "taskmill_queue_depth and friends stay absent");
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        tm_free(h);
        return NULL;
    }
    pthread_mutex_lock(&self_mu);
    self = h;
    pthread_mutex_unlock(&self_mu);
    return h;
}

void tm_http_depth_stop(struct tm_http_depth *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&self_mu);
    if (self == h)
        self = NULL;
    pthread_mutex_unlock(&self_mu);
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->refresher, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    tm_free(h->vals);
    tm_free(h);
}


