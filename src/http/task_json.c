/* task_json.c - the daemon's tasks as JSON: one builder for a task's
 * entry, shared by /status (endpoints.c) and GET /api/v1/tasks (api.c),
 * and the broker and pool members they both carry. */
#include "http/http_private.h"

#include <cjson/cJSON.h>

#include "broker/broker.h"
#include "daemon/daemon.h"
#include "util/util.h"

/* round3 rounds to three decimals, so that JSON shows 12.345, not
 * 12.345000000000001. */
static double round3(double v)
{
    double x = v * 1000.0;
    return (double)(long long)(x + (x >= 0 ? 0.5 : -0.5)) / 1000.0;
}

void tm_http_add_broker_pool(struct cJSON *j, const struct tm_gen *g)
{
    cJSON *b = cJSON_AddObjectToObject(j, "broker");
    cJSON_AddStringToObject(b, "kind", g->broker != NULL
                                           ? g->broker->ops->kind
                                           : g->cfg->url.scheme);
    cJSON_AddStringToObject(b, "url", g->cfg->url.redacted);
    cJSON_AddBoolToObject(b, "connected",
                          g->broker != NULL && atomic_load(&g->broker->up));
    /* the nodes (broker.url's list, or those the adapter found: a Redis
     * cluster's masters, the sentinels' master) with their state; node:
     * the first one up, null while not connected */
    struct tm_broker_node *nodes = tm_calloc(TM_BROKER_NODES_MAX,
                                             sizeof *nodes);
    size_t nn = tm_broker_nodes(g->cfg, g->broker, nodes,
                                TM_BROKER_NODES_MAX);
    int connected = g->broker != NULL && atomic_load(&g->broker->up);
    size_t first = 0;
    while (first < nn && !nodes[first].up)
        first++;
    if (connected && first < nn)
        cJSON_AddStringToObject(b, "node", nodes[first].name);
    else
        cJSON_AddNullToObject(b, "node");
    cJSON *na = cJSON_AddArrayToObject(b, "nodes");
    for (size_t i = 0; i < nn; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "node", nodes[i].name);
        cJSON_AddBoolToObject(o, "up", nodes[i].up);
        cJSON_AddItemToArray(na, o);
    }
    tm_free(nodes);
    cJSON *p = cJSON_AddObjectToObject(j, "pool");
    cJSON_AddStringToObject(p, "kind", g->cfg->pool_kind == TM_POOL_FORK
                                           ? "fork"
                                           : "thread");
    cJSON_AddNumberToObject(p, "size", g->pool != NULL ? g->pool->size
                                                       : g->cfg->pool_size);
    cJSON_AddNumberToObject(p, "busy", g->pool != NULL
                                           ? g->pool->ops->busy(g->pool)
                                           : 0);
    /* busy/size over the last minute; null before the first sample */
    double sat = tm_daemon_pool_saturation(g->d);
    if (sat >= 0)
        cJSON_AddNumberToObject(p, "saturation", round3(sat));
    else
        cJSON_AddNullToObject(p, "saturation");
    /* runs settled at their deadline whose code never returned */
    struct tm_pool_stuck *st;
    size_t ns = tm_pool_stuck_runs(g->pool, &st);
    int64_t now_ns = tm_now_ns();
    cJSON *sa = cJSON_AddArrayToObject(p, "stuck");
    for (size_t i = 0; i < ns; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "task",
                                st[i].task_index < g->ntasks
                                    ? g->tasks[st[i].task_index].cfg->name
                                    : "");
        cJSON_AddStringToObject(o, "id", st[i].id);
        cJSON_AddNumberToObject(
            o, "past_deadline_ms",
            (double)((now_ns - st[i].deadline_ns) / 1000000));
        cJSON_AddItemToArray(sa, o);
    }
    tm_free(st);
}

/* add_count adds v, or null when the broker could not tell (v < 0) or
 * was never read. */
static void add_count(cJSON *o, const char *name, long long v, int read)
{
    if (read && v >= 0)
        cJSON_AddNumberToObject(o, name, (double)v);
    else
        cJSON_AddNullToObject(o, name);
}

cJSON *tm_http_task_json(const struct tm_gen *g, size_t i, int64_t now_ns,
                         int api)
{
    const struct tm_task *t = &g->tasks[i];
    const struct tm_cfg_task *c = t->cfg;
    const struct tm_task_stats *s = &t->stats;
    cJSON *o = cJSON_CreateObject();
    if (api)
        cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "queue", c->queue);
    if (api)
        cJSON_AddStringToObject(o, "dead_letter", c->dead_letter);
    cJSON_AddNumberToObject(o, "inflight", (double)atomic_load(&s->inflight));
    cJSON *oc = cJSON_AddObjectToObject(o, "outcomes");
    for (int k = 1; k < TM_OUT_COUNT; k++)
        cJSON_AddNumberToObject(oc, tm_outcome_label((enum tm_outcome)k),
                                (double)atomic_load_explicit(
                                    &s->outcomes[k], memory_order_relaxed));
    cJSON_AddNumberToObject(o, "retries", (double)atomic_load(&s->retries));
    cJSON_AddNumberToObject(o, "dead_lettered",
                            (double)atomic_load(&s->dead_lettered));
    double r1, r60, p50, p99;
    tm_rate_read(&s->win->rate, now_ns, g->d->start_mono_ms * 1000000LL,
                 &r1, &r60);
    tm_durwin_percentiles(&s->win->durs, &p50, &p99);
    cJSON_AddNumberToObject(o, "rate_1s", round3(r1));
    cJSON_AddNumberToObject(o, "rate_60s", round3(r60));
    cJSON_AddNumberToObject(o, "p50_ms", round3(p50));
    cJSON_AddNumberToObject(o, "p99_ms", round3(p99));
    cJSON_AddStringToObject(o, "circuit",
                            tm_circuit_state_name(tm_circuit_state(
                                &t->circuit, now_ns / 1000000LL)));
    cJSON_AddBoolToObject(o, "paused", tm_broker_paused(g->broker, i));
    /* the depth refresher's last reads (depth.c); null when never read
     * or the broker cannot tell */
    int read = atomic_load(&s->depth_at_ms) != 0;
    if (api) {
        add_count(o, "queue_depth", atomic_load(&s->queue_depth), read);
        add_count(o, "pending", atomic_load(&s->queue_pending), read);
        add_count(o, "dead_letters", atomic_load(&s->dead_letter_depth),
                  read);
    }
    /* delayed messages waiting */
    add_count(o, "scheduled", atomic_load(&s->scheduled_depth), read);
    /* the autoscaling figures (docs/kubernetes.md): queue_lag is
     * queue_depth under the scalers' name */
    add_count(o, "queue_lag", atomic_load(&s->queue_depth), read);
    long long age = atomic_load(&s->oldest_age_ms);
    if (read && age >= 0)
        cJSON_AddNumberToObject(o, "oldest_age_seconds",
                                round3((double)age / 1000.0));
    else
        cJSON_AddNullToObject(o, "oldest_age_seconds");
    add_count(o, "delayed_due", atomic_load(&s->delayed_due), read);
    if (!api)
        return o;
    cJSON *l = cJSON_AddObjectToObject(o, "limits");
    cJSON_AddNumberToObject(l, "prefetch", c->prefetch);
    cJSON_AddNumberToObject(l, "timeout_ms", (double)c->timeout_ms);
    cJSON_AddNumberToObject(l, "max_retries", c->max_retries);
    cJSON_AddNumberToObject(l, "backoff_ms", (double)c->backoff_ms);
    cJSON_AddNumberToObject(l, "max_backoff_ms", (double)c->max_backoff_ms);
    cJSON_AddNumberToObject(l, "max_payload", (double)c->max_payload);
    cJSON_AddStringToObject(l, "on_error", c->on_error == TM_ON_ERROR_REJECT
                                               ? "reject"
                                               : "requeue");
    return o;
}
