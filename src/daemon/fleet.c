/* fleet.c - the daemon in its fleet: a thread that announces this daemon
 * through the broker every TM_FLEET_ANNOUNCE_MS, withdraws it when the
 * daemon stops, and sends the tasks' history counts to a broker that
 * keeps them once a minute (docs/http.md, The fleet). It uses a broker
 * of its own, never intake's or settlement's, so nothing of the message
 * path waits for it. */
#include "daemon/daemon_private.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "util/log.h"
#include "util/util.h"

#define SRC "fleet"

/* How often a daemon announces itself, and sends its history; how often
 * the thread looks for a reload (fleet_release). */
#define TM_FLEET_ANNOUNCE_MS 5000
#define TM_FLEET_FLUSH_MS 60000
#define TM_FLEET_LOOK_MS 500
/* A failure is logged at most this often. */
#define TM_FLEET_LOG_MS 60000

struct tm_fleet {
    struct tm_daemon *d;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int leave;                 /* withdraw the announcement (under mu) */
    int stop;                  /* last flush, then end (under mu) */
    /* the fleet thread's own */
    struct tm_gen *gen;        /* whose configuration b borrows */
    struct tm_broker *b;
    int left;
    int64_t flushed_to;        /* the minute the last flush went up to
                                  (0: none yet) */
    struct tm_log_gate gate;   /* failures logged */
    char host[256];
};

/* fleet_log logs a failure, at most once per TM_FLEET_LOG_MS. */
static void fleet_log(struct tm_fleet *f, const char *what)
{
    unsigned long held = 0;
    if (tm_log_gate_pass(&f->gate, tm_now_ms(), &held))
        tm_log_warn(SRC, "%s: %s (%lu more failures since the last line)",
                    what, f->b != NULL ? f->b->errstr : "", held);
}

/* fleet_release drops the broker and the generation it borrows from
 * once another generation is current, so that the fleet thread never
 * keeps a retired one (its plugins, its memory) for long. */
static void fleet_release(struct tm_fleet *f)
{
    if (f->gen == NULL)
        return;
    pthread_rwlock_rdlock(&f->d->gen_lock);
    int stale = f->d->gen != f->gen;
    pthread_rwlock_unlock(&f->d->gen_lock);
    if (!stale)
        return;
    if (f->b != NULL)
        f->b->ops->destroy(f->b);
    f->b = NULL;
    tm_gen_unref(f->gen);
    f->gen = NULL;
}

/* fleet_broker makes f->b the current generation's broker of the fleet
 * thread (a new one after a reload). 0, or -1. */
static int fleet_broker(struct tm_fleet *f)
{
    struct tm_gen *g = tm_gen_current(f->d);
    if (g == f->gen && f->b != NULL) {
        tm_gen_unref(g);
        return 0;
    }
    if (f->b != NULL)
        f->b->ops->destroy(f->b);
    f->b = NULL;
    if (f->gen != NULL)
        tm_gen_unref(f->gen);
    f->gen = g;
    char err[512];
    f->b = tm_broker_new(g->cfg, err, sizeof err);
    if (f->b == NULL) {
        tm_log_warn(SRC, "no broker for the fleet: %s", err);
        return -1;
    }
    return 0;
}

/* announcement builds this daemon's announcement (docs/http.md, GET
 * /api/v1/daemons); the caller frees it with cJSON_free. */
static char *announcement(struct tm_fleet *f)
{
    struct tm_daemon *d = f->d;
    struct tm_gen *g = f->gen;
    const struct tm_cfg *cfg = g->cfg;
    char ts[64];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "instance", cfg->instance);
    cJSON_AddStringToObject(j, "host", f->host);
    cJSON_AddNumberToObject(j, "pid", (double)getpid());
    cJSON_AddStringToObject(j, "version", TM_VERSION);
    tm_rfc3339(d->start_wall_ms, ts, sizeof ts);
    cJSON_AddStringToObject(j, "started", ts);
    cJSON_AddNumberToObject(j, "config_generation",
                            (double)atomic_load(&d->config_generation));
    cJSON_AddStringToObject(j, "broker", f->b->ops->kind);
    cJSON *p = cJSON_AddObjectToObject(j, "pool");
    cJSON_AddStringToObject(p, "kind", g->pool->ops->kind);
    cJSON_AddNumberToObject(p, "size", (double)cfg->pool_size);
    cJSON_AddNumberToObject(p, "busy", (double)g->pool->ops->busy(g->pool));
    cJSON *t = cJSON_AddArrayToObject(j, "tasks");
    for (size_t i = 0; i < cfg->ntasks; i++)
        cJSON_AddItemToArray(t, cJSON_CreateString(cfg->tasks[i].name));
    tm_rfc3339(tm_wall_ms(), ts, sizeof ts);
    cJSON_AddStringToObject(j, "last_seen", ts);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return text;
}

static void announce(struct tm_fleet *f)
{
    char *text = announcement(f);
    if (text == NULL)
        return;
    size_t len = strlen(text);
    /* 500 task names fit; far more are cut from the announcement rather
     * than refused by every reader */
    if (len > TM_FLEET_ANNOUNCE_MAX) {
        tm_log_warn(SRC, "announcement of %zu bytes over %d: not sent",
                    len, TM_FLEET_ANNOUNCE_MAX);
    } else if (f->b->ops->fleet->announce(f->b, f->gen->cfg->instance, text,
                                          len) != 0) {
        fleet_log(f, "announce");
    }
    cJSON_free(text);
}

/*
 * flush sends every history count of the minutes since the last flush
 * that the broker does not have yet, in one call (Redis: one pipeline),
 * and marks them sent once it worked. Commands grow with the (task,
 * minute) buckets that counted something, never with idle tasks.
 */
static void flush(struct tm_fleet *f)
{
    if (f->b->ops->fleet->hist_flush == NULL)
        return;
    int64_t now_min = tm_wall_ms() / 60000;
    int64_t from = f->flushed_to > 0 ? f->flushed_to
                                     : f->d->start_wall_ms / 60000;
    if (from < now_min - (TM_HIST_SHADOW - 2))
        from = now_min - (TM_HIST_SHADOW - 2);
    size_t nh = 0;
    struct tm_hist **hv = tm_hist_snapshot(&f->d->hist, &nh);
    size_t cap = 16, n = 0;
    struct tm_fleet_count *c = tm_calloc(cap, sizeof *c);
    unsigned (*cur)[TM_HK_N] = tm_calloc(cap, sizeof *cur);
    struct tm_hist **of = tm_calloc(cap, sizeof *of);
    for (size_t i = 0; i < nh; i++) {
        if (atomic_load_explicit(&hv[i]->ring, memory_order_acquire) == NULL)
            continue;
        for (int64_t m = from; m <= now_min; m++) {
            unsigned d[TM_HK_N], w[TM_HK_N];
            tm_hist_unsent(hv[i], m, d, w);
            if ((d[0] | d[1] | d[2] | d[3]) == 0)
                continue;
            if (n == cap) {
                cap *= 2;
                c = tm_realloc(c, cap * sizeof *c);
                cur = tm_realloc(cur, cap * sizeof *cur);
                of = tm_realloc(of, cap * sizeof *of);
            }
            c[n].task = hv[i]->name;
            c[n].minute = m;
            memcpy(c[n].n, d, sizeof d);
            memcpy(cur[n], w, sizeof w);
            of[n] = hv[i];
            n++;
        }
    }
    if (n == 0 || f->b->ops->fleet->hist_flush(f->b, c, n) == 0) {
        for (size_t i = 0; i < n; i++)
            tm_hist_sent(of[i], c[i].minute, cur[i]);
        f->flushed_to = now_min;
    } else {
        fleet_log(f, "history");
    }
    tm_free(c);
    tm_free(cur);
    tm_free(of);
    tm_free(hv);
}

/* cb_answer adds this daemon's counts of task (NULL: every task) to out:
 * its answer to another daemon's history request (serve). */
static void cb_answer(void *ctx, const char *task, int hourly, int64_t first,
                      size_t n, uint64_t (*out)[TM_HK_N])
{
    struct tm_daemon *d = ctx;
    if (task != NULL) {
        struct tm_hist *h = tm_hist_find(&d->hist, task);
        if (h != NULL)
            tm_hist_read(h, hourly, first, n, out);
        return;
    }
    size_t nh = 0;
    struct tm_hist **hv = tm_hist_snapshot(&d->hist, &nh);
    for (size_t i = 0; i < nh; i++)
        tm_hist_read(hv[i], hourly, first, n, out);
    tm_free(hv);
}

static void *fleet_main(void *arg)
{
    struct tm_fleet *f = arg;
    int64_t next_announce = 0;
    int64_t next_flush = tm_now_ms() + TM_FLEET_FLUSH_MS;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        int stop = f->stop, leave = f->leave;
        int64_t now = tm_now_ms();
        int64_t next = next_flush < next_announce ? next_flush
                                                  : next_announce;
        if (!stop && !(leave && !f->left) && now < next) {
            int64_t wait = next - now < TM_FLEET_LOOK_MS ? next - now
                                                         : TM_FLEET_LOOK_MS;
            if (f->left || f->b == NULL || f->b->ops->fleet->serve == NULL) {
                tm_cond_wait_ns(&f->cv, &f->mu, wait * 1000000LL);
                pthread_mutex_unlock(&f->mu);
            } else {
                /* the broker's messages are read meanwhile (RabbitMQ) */
                pthread_mutex_unlock(&f->mu);
                if (f->b->ops->fleet->serve(f->b, f->gen->cfg->instance,
                                            wait, cb_answer, f->d) != 0) {
                    fleet_log(f, "reading the fleet");
                    tm_sleep_ms(wait);
                }
            }
            fleet_release(f);
            pthread_mutex_lock(&f->mu);
            continue;
        }
        pthread_mutex_unlock(&f->mu);
        if (fleet_broker(f) == 0) {
            if ((leave || stop) && !f->left) {
                if (f->b->ops->fleet->leave(f->b, f->gen->cfg->instance) != 0)
                    fleet_log(f, "leave");
                f->left = 1;
            } else if (!f->left && now >= next_announce) {
                announce(f);
            }
            if (stop || now >= next_flush)
                flush(f);
        }
        if (now >= next_announce)
            next_announce = now + TM_FLEET_ANNOUNCE_MS;
        if (now >= next_flush)
            next_flush = now + TM_FLEET_FLUSH_MS;
        pthread_mutex_lock(&f->mu);
        if (stop)
            break;
    }
    pthread_mutex_unlock(&f->mu);
    if (f->b != NULL)
        f->b->ops->destroy(f->b);
    if (f->gen != NULL)
        tm_gen_unref(f->gen);
    f->b = NULL;
    f->gen = NULL;
    return NULL;
}

void tm_fleet_start(struct tm_daemon *d)
{
    struct tm_gen *g = tm_gen_current(d);
    int has = g->broker->ops->fleet != NULL;
    tm_gen_unref(g);
    if (!has)
        return;
    struct tm_fleet *f = tm_calloc(1, sizeof *f);
    f->d = d;
    tm_log_gate_init(&f->gate, 1, TM_FLEET_LOG_MS);
    if (gethostname(f->host, sizeof f->host - 1) != 0)
        tm_snprintf(f->host, sizeof f->host, "unknown");
    pthread_mutex_init(&f->mu, NULL);
    tm_cond_init(&f->cv);
    if (pthread_create(&f->thread, NULL, fleet_main, f) != 0) {
        tm_log_warn(SRC, "cannot start the fleet thread: this daemon is "
                    "not announced");
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        tm_free(f);
        return;
    }
    d->fleet = f;
}

/* poke sets *flag (a field of f's under mu) and wakes the thread. */
static void poke(struct tm_fleet *f, int *flag)
{
    pthread_mutex_lock(&f->mu);
    *flag = 1;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

void tm_fleet_leave(struct tm_daemon *d)
{
    if (d->fleet != NULL)
        poke(d->fleet, &d->fleet->leave);
}

void tm_fleet_stop(struct tm_daemon *d)
{
    struct tm_fleet *f = d->fleet;
    if (f == NULL)
        return;
    poke(f, &f->stop);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    d->fleet = NULL;
    tm_free(f);
}
