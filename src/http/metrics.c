/* metrics.c - the Prometheus text exposition (format 0.0.4). */
#include "http/http_private.h"

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "broker/broker.h"
#include "daemon/daemon.h"
#include "fork/fork.h"
#include "otel/otel.h"
#include "schedule/schedule.h"
#include "daemon/fire.h"
#include "util/util.h"

struct mbuf {
    char *p;
    size_t len, cap;
};

static void mb_printf(struct mbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mb_printf(struct mbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = tm_realloc(b->p, b->cap);
    }
}

/* label escapes a label value: backslash, double quote and newline. */
static const char *label(const char *s, char *buf, size_t size)
{
    size_t k = 0;
    for (; *s != '\0' && k + 3 < size; s++) {
        if (*s == '\\' || *s == '"') {
            buf[k++] = '\\';
            buf[k++] = *s;
        } else if (*s == '\n') {
            buf[k++] = '\\';
            buf[k++] = 'n';
        } else {
            buf[k++] = *s;
        }
    }
    buf[k] = '\0';
    return buf;
}

static void family(struct mbuf *b, const char *name, const char *type,
                   const char *help)
{
    mb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* schedule_metrics writes the fires this process made and the last slot
 * fired (as it knows it) of each schedule of g's configuration;
 * the counts outlive reloads. */
static void schedule_metrics(struct tm_daemon *d, const struct tm_gen *g,
                             struct mbuf *b)
{
    const struct tm_cfg *cfg = g->cfg;
    char lb[256];
    if (cfg->nschedules == 0 || d->sched_stats == NULL)
        return;
    int64_t skew;
    if (tm_sched_skew_ms(&skew)) {
        family(b, "taskmill_clock_skew_seconds", "gauge",
               "This daemon's clock minus the broker's (Redis TIME), as "
               "last measured by the schedule firing thread.");
        mb_printf(b, "taskmill_clock_skew_seconds %.3f\n",
                  (double)skew / 1000.0);
    }
    family(b, "taskmill_schedule_fired_total", "counter",
           "Slots of the schedule this daemon published.");
    for (size_t i = 0; i < cfg->nschedules; i++) {
        unsigned long long fired;
        int64_t last;
        tm_sched_stats_get(d->sched_stats, cfg->schedules[i].name, &fired,
                           &last);
        mb_printf(b, "taskmill_schedule_fired_total{schedule=\"%s\"} %llu\n",
                  label(cfg->schedules[i].name, lb, sizeof lb), fired);
    }
    family(b, "taskmill_schedule_last_fired_timestamp_seconds", "gauge",
           "Slot time of the schedule's last fire by any daemon, as this "
           "daemon knows it.");
    for (size_t i = 0; i < cfg->nschedules; i++) {
        unsigned long long fired;
        int64_t last;
        tm_sched_stats_get(d->sched_stats, cfg->schedules[i].name, &fired,
                           &last);
        if (last >= 0)
            mb_printf(b, "taskmill_schedule_last_fired_timestamp_seconds{"
                      "schedule=\"%s\"} %.3f\n",
                      label(cfg->schedules[i].name, lb, sizeof lb),
                      (double)last / 1000.0);
    }
}

static void process_metrics(struct tm_daemon *d, struct mbuf *b)
{
    long page = sysconf(_SC_PAGESIZE);
    long ticks = sysconf(_SC_CLK_TCK);
    unsigned long long rss_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        unsigned long long size;
        if (fscanf(f, "%llu %llu", &size, &rss_pages) != 2)
            rss_pages = 0;
        fclose(f);
    }
    double cpu = 0;
    f = fopen("/proc/self/stat", "r");
    if (f != NULL) {
        char line[1024];
        if (fgets(line, sizeof line, f) != NULL) {
            /* fields after the command name, which is in parentheses */
            char *p = strrchr(line, ')');
            unsigned long ut = 0, st = 0;
            if (p != NULL &&
                sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                              "%lu %lu", &ut, &st) == 2 && ticks > 0)
                cpu = (double)(ut + st) / (double)ticks;
        }
        fclose(f);
    }
    long fds = 0;
    DIR *dir = opendir("/proc/self/fd");
    if (dir != NULL) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL)
            if (e->d_name[0] != '.')
                fds++;
        closedir(dir);
        fds--; /* the directory stream's own descriptor */
    }
    family(b, "process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.");
    mb_printf(b, "process_resident_memory_bytes %llu\n",
              rss_pages * (unsigned long long)page);
    family(b, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.");
    mb_printf(b, "process_cpu_seconds_total %.2f\n", cpu);
    family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
    mb_printf(b, "process_open_fds %ld\n", fds);
    family(b, "process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.");
    mb_printf(b, "process_start_time_seconds %.3f\n",
              (double)d->start_wall_ms / 1000.0);
}

/* depth_metrics writes the counts the HTTP refresher last read from the
 * broker (never read here: a scrape costs the broker nothing). A task
 * whose counts were never read, or that the broker cannot tell, has no
 * sample. taskmill_queue_lag is taskmill_queue_depth under the name
 * autoscalers look for (docs/kubernetes.md): the same read. */
static void depth_metrics(const struct tm_gen *g, struct mbuf *b)
{
    static const struct {
        const char *name;
        const char *help;
        size_t offset;
        int ms; /* a duration in ms, shown in seconds */
    } fams[] = {
        {"taskmill_queue_depth",
         "Messages in the task's queue not yet delivered to a consumer, "
         "read from the broker every few seconds.",
         offsetof(struct tm_task_stats, queue_depth), 0},
        {"taskmill_queue_pending",
         "Messages delivered and not yet acknowledged, read from the "
         "broker every few seconds.",
         offsetof(struct tm_task_stats, queue_pending), 0},
        {"taskmill_dead_letter_depth",
         "Messages in the task's dead-letter queue, read from the broker "
         "every few seconds.",
         offsetof(struct tm_task_stats, dead_letter_depth), 0},
        {"taskmill_scheduled_depth",
         "Delayed messages waiting for their time (Redis: the scheduled "
         "set), read every few seconds; absent where the broker cannot "
         "tell cheaply (RabbitMQ).",
         offsetof(struct tm_task_stats, scheduled_depth), 0},
        {"taskmill_queue_lag",
         "Messages not yet delivered to the task's consumers (Redis: the "
         "group's lag; RabbitMQ: the queue's ready count), for "
         "autoscaling; read every few seconds.",
         offsetof(struct tm_task_stats, queue_depth), 0},
        {"taskmill_queue_oldest_age_seconds",
         "Age of the oldest message not yet delivered, by the broker's "
         "clock (0 when there is none), read every few seconds; absent "
         "where the broker cannot tell without taking it (RabbitMQ).",
         offsetof(struct tm_task_stats, oldest_age_ms), 1},
        {"taskmill_delayed_due",
         "Delayed messages whose time has come and that are not in the "
         "queue yet (Redis: the scheduled set), read every few seconds; "
         "absent where the broker cannot tell (RabbitMQ).",
         offsetof(struct tm_task_stats, delayed_due), 0},
    };
    char lb[256];
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        family(b, fams[f].name, "gauge", fams[f].help);
        for (size_t i = 0; i < g->ntasks; i++) {
            struct tm_task_stats *s = &g->tasks[i].stats;
            if (atomic_load(&s->depth_at_ms) == 0)
                continue;
            long long v = atomic_load(
                (atomic_llong *)((char *)s + fams[f].offset));
            if (v < 0)
                continue;
            label(g->tasks[i].cfg->name, lb, sizeof lb);
            if (fams[f].ms)
                mb_printf(b, "%s{task=\"%s\"} %.3f\n", fams[f].name, lb,
                          (double)v / 1000.0);
            else
                mb_printf(b, "%s{task=\"%s\"} %lld\n", fams[f].name, lb, v);
        }
    }
}

/* task_series writes a family with one sample per task, the counter at
 * offset in the task's stats: an atomic_ullong, or an atomic_llong when
 * sgn is set. */
static void task_series(struct mbuf *b, const struct tm_gen *g,
                        const char *name, const char *type, const char *help,
                        size_t offset, int sgn)
{
    char lb[256];
    family(b, name, type, help);
    for (size_t i = 0; i < g->ntasks; i++) {
        char *field = (char *)&g->tasks[i].stats + offset;
        label(g->tasks[i].cfg->name, lb, sizeof lb);
        if (sgn)
            mb_printf(b, "%s{task=\"%s\"} %lld\n", name, lb,
                      atomic_load((atomic_llong *)(void *)field));
        else
            mb_printf(b, "%s{task=\"%s\"} %llu\n", name, lb,
                      atomic_load((atomic_ullong *)(void *)field));
    }
}

char *tm_metrics_render(struct tm_daemon *d, const struct tm_gen *g,
                        size_t *len)
{
    struct mbuf b = {.cap = 8192};
    b.p = tm_malloc(b.cap);
    char lb[256];
    static const double bounds[] = {
#define TM_HIST_VALUE(v) v,
        TM_HIST_BOUNDS(TM_HIST_VALUE)
#undef TM_HIST_VALUE
    };

    family(&b, "taskmill_build_info", "gauge",
           "Build information; the value is always 1.");
    mb_printf(&b, "taskmill_build_info{version=\"%s\"} 1\n", TM_VERSION);
    family(&b, "taskmill_config_generation", "gauge",
           "Number of the running configuration: 1 at start, one more per "
           "reload that took effect.");
    mb_printf(&b, "taskmill_config_generation %u\n",
              atomic_load(&d->config_generation));
    family(&b, "taskmill_config_last_reload_successful", "gauge",
           "Whether the last configuration reload attempt took effect.");
    mb_printf(&b, "taskmill_config_last_reload_successful %d\n",
              atomic_load(&d->last_reload_ok));
    family(&b, "taskmill_config_last_reload_success_timestamp_seconds",
           "gauge", "Time the running configuration took effect.");
    mb_printf(&b, "taskmill_config_last_reload_success_timestamp_seconds "
              "%.3f\n",
              (double)atomic_load(&d->last_reload_ok_wall_ms) / 1000.0);

    family(&b, "taskmill_tasks_total", "counter",
           "Task attempts by how they ended.");
    for (size_t i = 0; i < g->ntasks; i++) {
        const struct tm_task *t = &g->tasks[i];
        label(t->cfg->name, lb, sizeof lb);
        for (int o = 1; o < TM_OUT_COUNT; o++)
            mb_printf(&b, "taskmill_tasks_total{task=\"%s\",outcome=\"%s\"} "
                      "%llu\n", lb, tm_outcome_label((enum tm_outcome)o),
                      atomic_load_explicit(&t->stats.outcomes[o],
                                           memory_order_relaxed));
    }
    task_series(&b, g, "taskmill_retries_total", "counter",
                "Attempts scheduled for retry.",
                offsetof(struct tm_task_stats, retries), 0);
    task_series(&b, g, "taskmill_dead_letter_total", "counter",
                "Messages dead-lettered.",
                offsetof(struct tm_task_stats, dead_lettered), 0);
    task_series(&b, g, "taskmill_replies_refused_total", "counter",
                "Answers not written because the request's reply_to names "
                "a key that is not a reply stream (Redis).",
                offsetof(struct tm_task_stats, replies_refused), 0);
    task_series(&b, g, "taskmill_rate_limited_total", "counter",
                "Waits of the task's intake held back by rate_limit or "
                "concurrency.",
                offsetof(struct tm_task_stats, rate_limited), 0);
    task_series(&b, g, "taskmill_tasks_inflight", "gauge",
                "Messages received and not yet settled.",
                offsetof(struct tm_task_stats, inflight), 1);
    family(&b, "taskmill_task_circuit_open", "gauge",
           "1 while the task's circuit breaker holds its intake back "
           "(open or half-open) after crashes or timeouts.");
    for (size_t i = 0; i < g->ntasks; i++) {
        label(g->tasks[i].cfg->name, lb, sizeof lb);
        mb_printf(&b, "taskmill_task_circuit_open{task=\"%s\"} %d\n", lb,
                  tm_circuit_state(&g->tasks[i].circuit, tm_now_ms()) !=
                      TM_CIRCUIT_CLOSED);
    }
    family(&b, "taskmill_task_paused", "gauge",
           "1 while the task is paused (taskmill pause): its intake reads "
           "nothing, its messages wait in the broker.");
    for (size_t i = 0; i < g->ntasks; i++) {
        label(g->tasks[i].cfg->name, lb, sizeof lb);
        mb_printf(&b, "taskmill_task_paused{task=\"%s\"} %d\n", lb,
                  tm_broker_paused(g->broker, i));
    }
    family(&b, "taskmill_task_duration_seconds", "histogram",
           "Time spent running a task.");
    for (size_t i = 0; i < g->ntasks; i++) {
        const struct tm_task_stats *s = &g->tasks[i].stats;
        label(g->tasks[i].cfg->name, lb, sizeof lb);
        unsigned long long cum = 0;
        for (size_t k = 0; k < TM_HIST_N; k++) {
            cum += atomic_load_explicit(&s->hist[k], memory_order_relaxed);
            mb_printf(&b, "taskmill_task_duration_seconds_bucket{task=\"%s\","
                      "le=\"%g\"} %llu\n", lb, bounds[k], cum);
        }
        cum += atomic_load_explicit(&s->hist[TM_HIST_N],
                                    memory_order_relaxed);
        mb_printf(&b, "taskmill_task_duration_seconds_bucket{task=\"%s\","
                  "le=\"+Inf\"} %llu\n", lb, cum);
        mb_printf(&b, "taskmill_task_duration_seconds_sum{task=\"%s\"} "
                  "%.6f\n", lb,
                  (double)atomic_load(&s->dur_sum_us) / 1e6);
        mb_printf(&b, "taskmill_task_duration_seconds_count{task=\"%s\"} "
                  "%llu\n", lb, cum);
    }
    /* a pool is there once the daemon runs; counts read without locks */
    unsigned psize = g->pool != NULL ? g->pool->size : 0;
    unsigned pbusy = g->pool != NULL ? g->pool->ops->busy(g->pool) : 0;
    unsigned long restarts =
        atomic_load(&d->restarts_before) +
        (g->pool != NULL ? atomic_load(&g->pool->restarts) : 0UL);
    family(&b, "taskmill_pool_size", "gauge", "Workers in the pool.");
    mb_printf(&b, "taskmill_pool_size %u\n", psize);
    family(&b, "taskmill_pool_busy", "gauge",
           "Workers running a task now.");
    mb_printf(&b, "taskmill_pool_busy %u\n", pbusy);
    /* sampled by the main loop (daemon/saturation.c): no I/O here */
    double sat = tm_daemon_pool_saturation(d);
    family(&b, "taskmill_pool_saturation", "gauge",
           "Busy workers over the pool's size, sampled each second and "
           "averaged over the last 60 s.");
    if (sat >= 0)
        mb_printf(&b, "taskmill_pool_saturation %.4f\n", sat);
    {
        /* per task, counted from the pool's list: empty but for runs
         * that never returned */
        struct tm_pool_stuck *st;
        size_t ns = tm_pool_stuck_runs(g->pool, &st);
        family(&b, "taskmill_runs_stuck", "gauge",
               "Runs settled at their deadline as a timeout whose code "
               "has not returned (thread pool); each holds a thread "
               "beside the pool's workers.");
        for (size_t i = 0; i < g->ntasks; i++) {
            unsigned n = 0;
            for (size_t k = 0; k < ns; k++)
                n += st[k].task_index == i;
            label(g->tasks[i].cfg->name, lb, sizeof lb);
            mb_printf(&b, "taskmill_runs_stuck{task=\"%s\"} %u\n", lb, n);
        }
        tm_free(st);
    }
    family(&b, "taskmill_worker_restarts_total", "counter",
           "Workers replaced after a crash, timeout or recycling.");
    mb_printf(&b, "taskmill_worker_restarts_total %lu\n", restarts);
    if (g->cfg->pool_kind == TM_POOL_FORK) {
        family(&b, "taskmill_zygote_restarts_total", "counter",
               "Fork pool: worker zygotes started again after one died.");
        mb_printf(&b, "taskmill_zygote_restarts_total %lu\n",
                  tm_zygote_restarts());
    }
    family(&b, "taskmill_broker_up", "gauge",
           "1 while the broker connection is up.");
    mb_printf(&b, "taskmill_broker_up %d\n",
              g->broker != NULL ? atomic_load(&g->broker->up) : 0);
    family(&b, "taskmill_broker_node_up", "gauge",
           "1 for each broker node the daemon uses and reaches.");
    {
        struct tm_broker_node *nodes = tm_calloc(TM_BROKER_NODES_MAX,
                                                 sizeof *nodes);
        size_t nn = tm_broker_nodes(g->cfg, g->broker, nodes,
                                    TM_BROKER_NODES_MAX);
        char nb[1100];
        for (size_t i = 0; i < nn; i++)
            mb_printf(&b, "taskmill_broker_node_up{node=\"%s\"} %d\n",
                      label(nodes[i].name, nb, sizeof nb), nodes[i].up);
        tm_free(nodes);
    }
    family(&b, "taskmill_broker_reconnects_total", "counter",
           "Reconnections to the broker after a loss.");
    mb_printf(&b, "taskmill_broker_reconnects_total %lu\n",
              atomic_load(&d->reconnects_before) +
                  (g->broker != NULL ? atomic_load(&g->broker->reconnects)
                                     : 0UL));
    family(&b, "taskmill_broker_lowat_batches_total", "counter",
           "RabbitMQ: batches of deliveries read while the consuming "
           "socket's low-water mark was on.");
    mb_printf(&b, "taskmill_broker_lowat_batches_total %lu\n",
              atomic_load(&tm_broker_lowat_batches));
    {
        struct tm_otel_stats os;
        tm_otel_stats(d->otel, &os);
        family(&b, "taskmill_spans_exported_total", "counter",
               "Spans the trace collector accepted.");
        mb_printf(&b, "taskmill_spans_exported_total %llu\n",
                  (unsigned long long)os.exported);
        family(&b, "taskmill_spans_dropped_total", "counter",
               "Spans dropped: the export queue full, a batch refused or "
               "its retries given up.");
        mb_printf(&b, "taskmill_spans_dropped_total %llu\n",
                  (unsigned long long)os.dropped);
    }
    depth_metrics(g, &b);
    schedule_metrics(d, g, &b);
    process_metrics(d, &b);
    *len = b.len;
    return b.p;
}
