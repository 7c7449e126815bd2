/* redis.c - the Redis Streams adapter: lifecycle and vtable. */
#include "redis/redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "redis/arena.h"
#include "util/ssl_dl.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* rb_check is the check op: OpenSSL for rediss://, and in a cluster the
 * one-slot rule for every task and schedule (keys.c). */
static int rb_check(const struct tm_cfg *cfg, struct tm_cfg_errors *e)
{
    if (cfg->url.tls && tm_broker_open_lib(cfg, e, tm_ssl_dl_open) < 0)
        return -1;
    return tm_redis_cfg_slots_check(cfg, e);
}

static struct tm_broker *rb_create(const struct tm_cfg *cfg)
{
    struct tm_redis *rb = tm_calloc(1, sizeof *rb);
    rb->base.ops = &tm_broker_redis_ops;
    rb->base.cfg = cfg;
    rb->ntasks = cfg->ntasks;
    rb->consumer = cfg->instance;
    rb->tasks = tm_calloc(cfg->ntasks ? cfg->ntasks : 1, sizeof *rb->tasks);
    rb->cluster = cfg->redis_mode == TM_REDIS_CLUSTER;
    pthread_mutex_init(&rb->topo_mu, NULL);
    pthread_mutex_init(&rb->refresh_mu, NULL);
    for (size_t s = 0; s < TM_REDIS_SLOTS; s++)
        atomic_init(&rb->slot_node[s], TM_REDIS_NO_NODE);
    atomic_init(&rb->map_stale, 1);
    atomic_init(&rb->master_node, -1);
    if (cfg->redis_mode == TM_REDIS_STANDALONE) {
        /* the one server, named as broker.url names it */
        size_t ni = tm_redis_node_add(rb, cfg->url.host, cfg->url.port);
        tm_snprintf(rb->nodes[ni].name, sizeof rb->nodes[ni].name, "%s",
                    cfg->url.redacted);
        atomic_store(&rb->master_node, (int)ni);
    }
    tm_redis_link_init(&rb->settle, TM_REDIS_COMMAND_TIMEOUT_MS);
    tm_redis_link_init(&rb->wake, 1000);
    if (cfg->url.tls && !cfg->tls.verify)
        tm_log_warn(SRC, "%s: broker.tls.verify is false: the server's "
                    "certificate and name are not checked; anyone on the "
                    "path can read and change the traffic",
                    cfg->url.redacted);
    for (size_t i = 0; i < cfg->ntasks; i++) {
        struct tm_redis_task *rt = &rb->tasks[i];
        rt->cfg = &cfg->tasks[i];
        rt->retry_key = tm_redis_retry_key(rt->cfg);
        rt->slot = tm_redis_key_slot(rt->cfg->queue, strlen(rt->cfg->queue));
        rt->lane_key = rb->cluster ? rt->slot : 0;
        rt->due_key = tm_redis_due_key(rb->cluster, rt->slot);
        rt->rate_key = tm_redis_rate_key(rt->cfg);
        rt->pause_key = tm_redis_pause_key(rt->cfg);
        atomic_store(&rt->retry_hint_ms, 0); /* look at the set at once */
        pthread_mutex_init(&rt->held_mu, NULL);
        tm_log_gate_init(&rt->reply_gate, TM_REPLY_LOG_BURST,
                         TM_REPLY_LOG_MS);
    }
    tm_log_gate_init(&rb->refused_gate, 1, TM_REDIS_REFUSED_LOG_MS);
    pthread_mutex_init(&rb->wake_mu, NULL);
    tm_redis_lanes_init(rb);
    rb->sched = tm_redis_sched_new(rb);
    return &rb->base;
}

static int rb_connect_all(struct tm_broker *b)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[512];
    int dead;
    if (rb->cluster && tm_redis_topo_refresh(rb, 1, eb, sizeof eb) != 0) {
        tm_redis_mark_down(rb);
        tm_broker_set_error(b, ECONNREFUSED, "%s", eb);
        return -1;
    }
    if (!rb->cluster &&
        tm_redis_link_get(rb, &rb->settle, 0, eb, sizeof eb) == NULL) {
        tm_redis_mark_down(rb);
        tm_broker_set_error(b, ECONNREFUSED, "%s", eb);
        return -1;
    }
    for (size_t i = 0; i < rb->ntasks; i++) {
        if (tm_redis_ensure_group(rb, &rb->settle, &rb->tasks[i], eb,
                                  sizeof eb, &dead) < 0) {
            tm_broker_set_error(b, dead ? ECONNREFUSED : EIO,
                                "task '%s': XGROUP CREATE %s %s: %s",
                                rb->tasks[i].cfg->name,
                                rb->tasks[i].cfg->queue,
                                rb->tasks[i].cfg->group, eb);
            if (dead)
                tm_redis_wc_lost(rb, "connect", eb);
            return -1;
        }
    }
    rb->wc_was_up = 1;
    tm_redis_mark_up(rb);
    return 0;
}

static void rb_destroy(struct tm_broker *b)
{
    if (b == NULL)
        return;
    struct tm_redis *rb = (struct tm_redis *)b;
    tm_redis_sched_free(rb->sched);
    /* a read sent ahead is readahead.c's, above the lanes: its reply is
     * taken off each lane's connection before lane.c closes it */
    for (size_t i = 0; i < rb->nlanes; i++)
        tm_redis_ahead_end(rb, &rb->lanes[i]);
    tm_redis_lanes_free(rb);
    tm_redis_link_close(rb, &rb->wake);
    pthread_mutex_destroy(&rb->wake_mu);
    for (size_t i = 0; i < rb->ntasks; i++) {
        tm_redis_collect(&rb->tasks[i]);
        pthread_mutex_destroy(&rb->tasks[i].held_mu);
        tm_free(rb->tasks[i].retry_key);
        tm_free(rb->tasks[i].due_key);
        tm_free(rb->tasks[i].rate_key);
        tm_free(rb->tasks[i].pause_key);
        tm_free(rb->tasks[i].own_ids);
    }
    /* the blocks of the arenas just freed, kept for reads to come */
    tm_rarena_trim();
    tm_redis_link_close(rb, &rb->settle);
    pthread_mutex_destroy(&rb->topo_mu);
    pthread_mutex_destroy(&rb->refresh_mu);
    tm_free(rb->tasks);
    tm_free(rb->argv);
    tm_free(rb->argvlen);
    tm_free(rb->order);
    tm_free(rb->keys);
    tm_free(rb->spans);
    tm_free(rb->done);
    tm_free(rb->kinds);
    tm_free(rb->redo);
    tm_free(rb->ids);
    tm_free(rb);
}

static const struct tm_broker_consume_ops redis_consume = {
    .connect = rb_connect_all,
    .lanes = tm_redis_nlanes,
    .lane_of = tm_redis_lane_of,
    .fetch_lane = tm_redis_fetch_lane,
    .room_made = tm_redis_room_made,
    .settle = tm_redis_settle,
    .wake = tm_redis_wake,
    .tick = tm_redis_tick,
    .tick_ms = tm_redis_tick_ms,
    .rate_take = tm_redis_rate_take,
};

static const struct tm_broker_produce_ops redis_produce = {
    .publish = tm_redis_publish,
    .publish_at = tm_redis_publish_at,
    .request = tm_redis_request,
};

static const struct tm_broker_admin_ops redis_admin = {
    .dlq_list = tm_redis_dlq_list,
    .dlq_browse = tm_redis_dlq_browse,
    .dlq_replay = tm_redis_dlq_replay,
    .dlq_purge = tm_redis_dlq_purge,
    .delayed_browse = tm_redis_delayed_browse,
    .delayed_take = tm_redis_delayed_take,
    .depth = tm_redis_depth,
    .scheduled = tm_redis_scheduled,
    .nodes = tm_redis_nodes,
};

static const struct tm_broker_pause_ops redis_pause = {
    .pause_set = tm_redis_pause_set,
    .paused = tm_redis_paused,
    .pause_note = tm_redis_pause_note,
};

static const struct tm_broker_sched_ops redis_sched = {
    .sched_open = tm_redis_sched_open,
    .sched_fire = tm_redis_sched_fire,
    .sched_last = tm_redis_sched_last,
    .sched_clock = tm_redis_sched_clock,
    .sched_close = tm_redis_sched_close,
};

const struct tm_broker_ops tm_broker_redis_ops = {
    .kind = "redis",
    .check = rb_check,
    .create = rb_create,
    .destroy = rb_destroy,
    .consume = &redis_consume,
    .produce = &redis_produce,
    .admin = &redis_admin,
    .pause = &redis_pause,
    .sched = &redis_sched,
};
