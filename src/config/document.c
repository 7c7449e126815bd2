/* config/document.c - the document as a whole: top-level keys and checks across sections. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif

#include "config/config_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "taskmill.h" /* TM_LOG_* levels */
#include "util/util.h"

/* in the order of tm_cfg_sec_top (keys.c) */
enum top_key {
    K_BROKER, K_POOL, K_PLUGIN_DIR, K_PLUGIN_WATCH, K_INSTANCE, K_HTTP,
    K_SHUTDOWN_TIMEOUT, K_LOG, K_TASKS, K_SCHEDULES, K_TELEMETRY
};

int tm_cfg_parse_top(struct ctx *c, const yaml_node_t *root)
{
    struct tm_cfg *cfg = c->cfg;
    uint32_t seen = 0;
    int bad = 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
         p < root->data.mapping.pairs.top && !(bad && tm_cfg_stop(c)); p++) {
        const yaml_node_t *key = tm_cfg_node_at(c, p->key);
        const yaml_node_t *val = tm_cfg_node_at(c, p->value);
        int i = tm_cfg_key_index(c, key, NULL, &tm_cfg_sec_top, &seen);
        if (i < 0) {
            bad = 1;
            continue;
        }
        const char *path = tm_cfg_sec_top.keys[i].name;
        int r = 0;
        switch ((enum top_key)i) {
        case K_BROKER:
            r = tm_cfg_parse_broker(c, key, val);
            break;
        case K_POOL:
            r = tm_cfg_parse_pool(c, key, val);
            break;
        case K_PLUGIN_DIR: {
            char *s = NULL;
            r = tm_cfg_get_string(c, key, val, path, &s);
            if (r == 0) {
                tm_free(cfg->plugin_dir);
                cfg->plugin_dir = tm_cfg_path_join(cfg->dir, s);
                tm_cfg_trim_slashes(cfg->plugin_dir);
            }
            tm_free(s);
            break;
        }
        case K_PLUGIN_WATCH:
            r = tm_cfg_get_bool(c, key, val, path, &cfg->plugin_watch);
            break;
        case K_INSTANCE: {
            /* Empty (e.g. ${TASKMILL_INSTANCE:-}) means the default. */
            char *s = tm_cfg_is_null(val) ? tm_strdup("") :
                tm_cfg_get_scalar(c, key, val, path);
            r = s == NULL ? -1 : 0;
            tm_free(cfg->instance);
            cfg->instance = s != NULL && *s != '\0' ? s : NULL;
            if (cfg->instance == NULL)
                tm_free(s);
            break;
        }
        case K_HTTP:
            r = tm_cfg_parse_http(c, key, val);
            break;
        case K_SHUTDOWN_TIMEOUT:
            r = tm_cfg_get_duration(c, key, val, path, 0,
                             &cfg->shutdown_timeout_ms);
            break;
        case K_LOG:
            r = tm_cfg_parse_log(c, key, val);
            break;
        case K_TASKS:
            r = tm_cfg_parse_tasks(c, key, val);
            break;
        case K_SCHEDULES:
            r = tm_cfg_parse_schedules(c, key, val);
            break;
        case K_TELEMETRY:
            r = tm_cfg_parse_telemetry(c, key, val);
            break;
        }
        if (r < 0)
            bad = 1;
    }
    return bad ? -1 : 0;
}

/* tm_cfg_check_whole runs the checks that need the whole document. A task that
 * had errors of its own, and checks that need the broker kind when
 * broker.url is bad, are skipped: their errors would only repeat. */
int tm_cfg_check_whole(struct ctx *c, const yaml_node_t *root)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    if (!c->has_tasks) {
        tm_cfg_fail(c, tm_cfg_mark_of(root), "missing required key 'tasks' (a "
                 "mapping of task names to their settings)");
        return -1;
    }
    if (!c->url_done && !c->url_bad) {
        struct tm_mark none = { 1, 1 };
        if (tm_cfg_set_url(c, cfg->broker_url, none) < 0)
            return -1;
    }
    if (cfg->plugin_dir == NULL)
        cfg->plugin_dir = tm_cfg_path_join(cfg->dir, "plugins");
    for (size_t i = 0; i < cfg->ntasks && !(bad && tm_cfg_stop(c)); i++) {
        struct tm_cfg_task *t = &cfg->tasks[i];
        const struct task_marks *m = &c->marks[i];
        char where[CFG_PATH_LEN];
        if (!m->ok)
            continue;
        tm_cfg_join_path(where, "tasks", t->name);
        t->plugin_path = tm_cfg_path_join(cfg->plugin_dir, t->plugin);
        t->queue_at = m->has_queue ? m->queue_at : t->at;
        if (c->url_done && cfg->url.kind == TM_BROKER_REDIS &&
            (t->has_priority || t->has_max_priority)) {
            bool pri_first = t->has_priority &&
                (!t->has_max_priority ||
                 m->priority_at.line < m->max_priority_at.line ||
                 (m->priority_at.line == m->max_priority_at.line &&
                  m->priority_at.col < m->max_priority_at.col));
            tm_cfg_fail(c, pri_first ? m->priority_at : m->max_priority_at,
                     "%s.%s: priorities are not supported on Redis streams "
                     "(RabbitMQ only)", where,
                     pri_first ? "priority" : "max_priority");
            bad = 1;
            continue;
        }
        if (t->priority > t->max_priority) {
            tm_cfg_fail(c, m->priority_val_at, "%s.priority: %d is above "
                     "max_priority (%d); expected an integer from 0 to %d",
                     where, t->priority, t->max_priority, t->max_priority);
            bad = 1;
            continue;
        }
        if (c->url_done && cfg->url.kind == TM_BROKER_AMQP &&
            t->dedup_ttl_ms > 0) {
            /* the keys that succeeded must be seen by every daemon of the
             * queue, and RabbitMQ has no store to keep them in */
            tm_cfg_fail(c, m->dedup_ttl_at, "%s.dedup_ttl: deduplication "
                     "needs a store shared by every daemon of the queue, "
                     "which RabbitMQ does not have; it is supported on "
                     "Redis only (remove dedup_ttl or set it to 0)", where);
            bad = 1;
            continue;
        }
        if (c->url_done && cfg->url.kind == TM_BROKER_AMQP) {
            /* RabbitMQ 3.10 has no priorities on quorum queues */
            if (cfg->amqp_queue_type == TM_AMQP_QUORUM &&
                t->has_max_priority && t->max_priority > 0) {
                tm_cfg_fail(c, m->max_priority_at, "%s.max_priority: "
                         "priorities are not supported on quorum queues "
                         "(broker.amqp.queue_type: quorum); remove it or "
                         "use queue_type: classic", where);
                bad = 1;
                continue;
            }
            if (strlen(t->queue) > AMQP_NAME_MAX) {
                tm_cfg_fail(c, m->has_queue ? m->queue_at : t->at,
                         "%s.queue: longer than %d bytes, the RabbitMQ "
                         "limit", where, AMQP_NAME_MAX);
                bad = 1;
                continue;
            }
            if (strlen(t->dead_letter) > AMQP_NAME_MAX) {
                tm_cfg_fail(c, m->has_dead_letter ? m->dead_letter_at : t->at,
                         "%s.dead_letter: longer than %d bytes, the "
                         "RabbitMQ limit", where, AMQP_NAME_MAX);
                bad = 1;
                continue;
            }
        }
    }
    if (!(bad && tm_cfg_stop(c)) && tm_cfg_check_schedules(c) < 0)
        bad = 1;
    if (bad)
        return -1;
    if (cfg->instance == NULL) {
        char host[256];
        if (gethostname(host, sizeof host) < 0 || host[0] == '\0')
            tm_snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        cfg->instance = tm_asprintf("%s-%ld", host, (long)getpid());
    }
    return 0;
}
