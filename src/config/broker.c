/* config/broker.c - the broker: section (URLs, password file, tls, redis, amqp). */
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

/* CFG_MAX_NODES bounds the URLs of broker.url. */
#define CFG_MAX_NODES 64

void tm_cfg_clear_nodes(struct tm_cfg *cfg)
{
    for (size_t i = 0; i < cfg->nnodes; i++)
        tm_url_clear(&cfg->nodes[i]);
    tm_free(cfg->nodes);
    cfg->nodes = NULL;
    cfg->nnodes = 0;
    tm_url_clear(&cfg->url);
}

/*
 * set_nodes parses the n URLs of broker.url (urls[i] written at at[i];
 * list tells whether they were a YAML sequence, for the error paths) into
 * cfg->nodes, cfg->url (a copy of the first) and cfg->broker_url (the
 * URLs joined by ", "). Every node must have the first one's scheme: the
 * nodes of one deployment, reached the same way. On error the nodes are
 * left empty.
 */
static int set_nodes(struct ctx *c, char *const *urls,
                     const struct tm_mark *at, size_t n, bool list)
{
    char why[256], path[CFG_PATH_LEN];
    struct tm_cfg *cfg = c->cfg;
    struct sbuf joined = {0};
    int rc = -1;
    assert(n >= 1 && n <= CFG_MAX_NODES);
    tm_cfg_clear_nodes(cfg);
    cfg->nodes = tm_calloc(n, sizeof *cfg->nodes);
    for (size_t i = 0; i < n; i++) {
        if (list)
            tm_snprintf(path, sizeof path, "broker.url[%zu]", i);
        else
            tm_snprintf(path, sizeof path, "broker.url");
        if (tm_url_parse(urls[i], &cfg->nodes[i], why, sizeof why) < 0) {
            tm_cfg_fail(c, at[i], "%s: %s", path, why);
            goto out;
        }
        cfg->nnodes = i + 1;
        if (strcmp(cfg->nodes[i].scheme, cfg->nodes[0].scheme) != 0) {
            tm_cfg_fail(c, at[i], "%s: scheme %s:// differs from the "
                     "first node's %s://; the URLs are the nodes of one "
                     "deployment, all of one scheme", path,
                     cfg->nodes[i].scheme, cfg->nodes[0].scheme);
            goto out;
        }
        if (joined.len > 0)
            tm_cfg_sb_adds(&joined, ", ");
        tm_cfg_sb_adds(&joined, urls[i]);
    }
    /* the first node again, so that url owns its strings */
    if (tm_url_parse(urls[0], &cfg->url, why, sizeof why) < 0) {
        tm_cfg_fail(c, at[0], "broker.url: %s", why);
        goto out;
    }
    cfg->url_at = at[0];
    tm_free(cfg->broker_url);
    cfg->broker_url = joined.p;
    joined.p = NULL;
    c->url_done = true;
    rc = 0;
out:
    if (rc < 0)
        tm_cfg_clear_nodes(cfg);
    tm_free(joined.p);
    return rc;
}

/* tm_cfg_set_url makes the single URL s the only node; errors are reported at
 * at. */
int tm_cfg_set_url(struct ctx *c, const char *s, struct tm_mark at)
{
    char *urls[1] = { (char *)s };
    return set_nodes(c, urls, &at, 1, false);
}

static int read_password(struct ctx *c, struct tm_mark at)
{
    char ebuf[TM_STRERRNO_BUF];
    struct tm_cfg *cfg = c->cfg;
    char *data = NULL;
    size_t len = 0;
    int opened;
    if (tm_cfg_read_file(cfg->password_file, CFG_MAX_SECRET, &data, &len,
                  &opened) < 0) {
        tm_cfg_fail(c, at, "broker.password_file: cannot read '%s': %s",
                 cfg->password_file, tm_strerror(errno, ebuf, sizeof ebuf));
        return -1;
    }
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r'))
        data[--len] = '\0';
    if (strlen(data) != len) {
        tm_cfg_fail(c, at, "broker.password_file: '%s' contains a NUL byte",
                 cfg->password_file);
        goto fail;
    }
    if (len == 0) {
        tm_cfg_fail(c, at, "broker.password_file: '%s' is empty",
                 cfg->password_file);
        goto fail;
    }
    /* one secret for every node of the deployment */
    for (size_t i = 0; i < cfg->nnodes; i++) {
        tm_free(cfg->nodes[i].password);
        cfg->nodes[i].password = tm_strdup(data);
    }
    tm_free(cfg->url.password);
    cfg->url.password = data;
    return 0;
fail:
    tm_free(data);
    return -1;
}

/* broker: where keys were, for the checks after the walk */
struct broker_marks {
    struct tm_mark url_at, pw_at, tls_at, redis_at, amqp_at;
    struct tm_mark cert_at, key_at, mode_at, master_at;
    bool has_redis, has_amqp;
};

static const struct choice redis_mode_choices[] = {
    { "standalone", TM_REDIS_STANDALONE, 1 },
    { "sentinel", TM_REDIS_SENTINEL, 1 },
    { "cluster", TM_REDIS_CLUSTER, 1 },
};

static const struct choice queue_type_choices[] = {
    { "classic", TM_AMQP_CLASSIC, 1 },
    { "quorum", TM_AMQP_QUORUM, 1 },
};

/* parse_url_list reads broker.url: one URL, or a sequence of them. */
static int parse_url_list(struct ctx *c, const yaml_node_t *key,
                          const yaml_node_t *val, struct broker_marks *bm)
{
    char *urls[CFG_MAX_NODES];
    struct tm_mark at[CFG_MAX_NODES];
    char path[CFG_PATH_LEN];
    size_t n = 0;
    int rc = -1;
    bm->url_at = tm_cfg_mark_of(val);
    if (val->type != YAML_SEQUENCE_NODE) {
        char *one = NULL;
        if (tm_cfg_get_string(c, key, val, "broker.url", &one) < 0)
            return -1;
        rc = tm_cfg_set_url(c, one, bm->url_at);
        tm_free(one);
        return rc;
    }
    size_t count = (size_t)(val->data.sequence.items.top -
                            val->data.sequence.items.start);
    if (count == 0) {
        tm_cfg_fail(c, bm->url_at, "broker.url: an empty list; give one URL "
                 "or the nodes' URLs");
        return -1;
    }
    if (count > CFG_MAX_NODES) {
        tm_cfg_fail(c, bm->url_at, "broker.url: %zu URLs; at most %d",
                 count, CFG_MAX_NODES);
        return -1;
    }
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top; it++) {
        const yaml_node_t *item = tm_cfg_node_at(c, *it);
        urls[n] = NULL;
        tm_snprintf(path, sizeof path, "broker.url[%zu]", n);
        if (tm_cfg_get_string(c, item, item, path, &urls[n]) < 0)
            goto out;
        at[n++] = tm_cfg_mark_of(item);
    }
    rc = set_nodes(c, urls, at, n, true);
out:
    for (size_t i = 0; i < n; i++)
        tm_free(urls[i]);
    return rc;
}

/* get_path reads an optional file name, resolved against the config
 * file's directory; null or empty means not set. */
static int get_path(struct ctx *c, const yaml_node_t *key,
                    const yaml_node_t *val, const char *path, char **out)
{
    if (tm_cfg_is_null(val))
        return 0;
    char *s = tm_cfg_get_scalar(c, key, val, path);
    if (s == NULL)
        return -1;
    tm_free(*out);
    *out = *s != '\0' ? tm_cfg_path_join(c->cfg->dir, s) : NULL;
    tm_free(s);
    return 0;
}

static int cb_tls_key(struct ctx *c, int i, const yaml_node_t *key,
                      const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_tls *tls = &c->cfg->tls;
    struct broker_marks *bm = arg;
    switch (i) {
    case 0:
        return get_path(c, key, val, path, &tls->ca_file);
    case 1:
        bm->cert_at = tm_cfg_mark_of(key);
        return get_path(c, key, val, path, &tls->cert_file);
    case 2:
        bm->key_at = tm_cfg_mark_of(key);
        return get_path(c, key, val, path, &tls->key_file);
    case 3:
        return tm_cfg_get_string(c, key, val, path, &tls->server_name);
    default:
        return tm_cfg_get_bool(c, key, val, path, &tls->verify);
    }
}

static int cb_redis_key(struct ctx *c, int i, const yaml_node_t *key,
                        const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    struct broker_marks *bm = arg;
    int e = 0;
    if (i == 0) {
        bm->mode_at = tm_cfg_mark_of(val);
        if (tm_cfg_get_enum(c, key, val, path, redis_mode_choices,
                     NELEM(redis_mode_choices), &e) < 0)
            return -1;
        cfg->redis_mode = (enum tm_redis_mode)e;
        return 0;
    }
    bm->master_at = tm_cfg_mark_of(key);
    return tm_cfg_get_string(c, key, val, path, &cfg->redis_master);
}

static int cb_amqp_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8];
    int e = 0;
    int64_t ms = 0;
    (void)arg;
    if (i == 0) {
        if (tm_cfg_get_enum(c, key, val, path, queue_type_choices,
                     NELEM(queue_type_choices), &e) < 0)
            return -1;
        cfg->amqp_queue_type = (enum tm_amqp_queue_type)e;
        return 0;
    }
    if (tm_cfg_get_duration(c, key, val, path, 0, &ms) < 0)
        return -1;
    /* AMQP negotiates the heartbeat in whole seconds, 16 bits */
    if (ms % 1000 != 0 || ms > 65535 * INT64_C(1000)) {
        char *s = tm_cfg_get_scalar(c, key, val, path);
        tm_cfg_fail(c, tm_cfg_mark_of(val), "%s: expected whole seconds from 0 (off) "
                 "to 65535s, got '%s'", path,
                 tm_cfg_clip(s != NULL ? s : "", shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    cfg->amqp_heartbeat_ms = ms;
    return 0;
}

/* in the order of tm_cfg_sec_broker (keys.c) */
enum broker_key { B_URL, B_PASSWORD_FILE, B_TLS, B_REDIS, B_AMQP };

static int cb_broker_key(struct ctx *c, int i, const yaml_node_t *key,
                         const yaml_node_t *val, const char *path,
                         void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    struct broker_marks *bm = arg;
    switch ((enum broker_key)i) {
    case B_URL:
        /* until it parses, checks that need the broker kind are skipped */
        c->url_bad = true;
        if (parse_url_list(c, key, val, bm) < 0)
            return -1;
        c->url_bad = false;
        return 0;
    case B_PASSWORD_FILE:
        bm->pw_at = tm_cfg_mark_of(val);
        return get_path(c, key, val, path, &cfg->password_file);
    case B_TLS:
        bm->tls_at = tm_cfg_mark_of(key);
        cfg->has_tls = !tm_cfg_is_null(val);
        return tm_cfg_walk_section(c, key, val, path, &tm_cfg_sec_tls,
                            cb_tls_key, bm);
    case B_REDIS:
        bm->redis_at = tm_cfg_mark_of(key);
        bm->has_redis = !tm_cfg_is_null(val);
        return tm_cfg_walk_section(c, key, val, path, &tm_cfg_sec_redis,
                            cb_redis_key, bm);
    case B_AMQP:
        bm->amqp_at = tm_cfg_mark_of(key);
        bm->has_amqp = !tm_cfg_is_null(val);
        return tm_cfg_walk_section(c, key, val, path, &tm_cfg_sec_amqp,
                            cb_amqp_key, bm);
    }
    return -1;
}

/* check_broker runs the checks between broker keys, once the section is
 * read and its URLs parsed. */
static int check_broker(struct ctx *c, const struct broker_marks *bm)
{
    struct tm_cfg *cfg = c->cfg;
    const struct tm_tls *tls = &cfg->tls;
    int bad = 0;
    if (tls->cert_file != NULL && tls->key_file == NULL) {
        tm_cfg_fail(c, bm->cert_at, "broker.tls.cert_file: given without "
                 "broker.tls.key_file (the client certificate's key)");
        bad = 1;
    } else if (tls->key_file != NULL && tls->cert_file == NULL) {
        tm_cfg_fail(c, bm->key_at, "broker.tls.key_file: given without "
                 "broker.tls.cert_file (the client certificate)");
        bad = 1;
    }
    /* the rest needs the broker kind */
    if (!c->url_done)
        return bad ? -1 : 0;
    bool redis = cfg->url.kind == TM_BROKER_REDIS;
    /* An error, not a warning: a plain connection where the file asks for
     * certificates would send the password in clear. */
    if (cfg->has_tls && !cfg->url.tls) {
        tm_cfg_fail(c, bm->tls_at, "broker.tls: TLS settings with a plain "
                 "%s:// URL; use %s:// or remove broker.tls",
                 cfg->url.scheme, redis ? "rediss" : "amqps");
        bad = 1;
    }
    if (bm->has_redis && !redis) {
        tm_cfg_fail(c, bm->redis_at, "broker.redis: Redis settings with an "
                 "%s:// URL; remove them or use a redis:// URL",
                 cfg->url.scheme);
        return -1;
    }
    if (bm->has_amqp && redis) {
        tm_cfg_fail(c, bm->amqp_at, "broker.amqp: RabbitMQ settings with a "
                 "%s:// URL; remove them or use an amqp:// URL",
                 cfg->url.scheme);
        return -1;
    }
    if (!redis)
        return bad ? -1 : 0;
    if (cfg->redis_mode == TM_REDIS_SENTINEL && cfg->redis_master == NULL) {
        tm_cfg_fail(c, bm->mode_at, "broker.redis.mode: sentinel needs "
                 "broker.redis.master (the monitored master's name)");
        bad = 1;
    } else if (cfg->redis_mode != TM_REDIS_SENTINEL &&
               cfg->redis_master != NULL) {
        tm_cfg_fail(c, bm->master_at, "broker.redis.master: only used with "
                 "broker.redis.mode: sentinel");
        bad = 1;
    }
    if (cfg->redis_mode == TM_REDIS_STANDALONE && cfg->nnodes > 1) {
        tm_cfg_fail(c, bm->url_at, "broker.url: %zu URLs with "
                 "broker.redis.mode: standalone (one server); use mode: "
                 "sentinel (the URLs are the sentinels) or cluster (the "
                 "URLs are seed nodes)", cfg->nnodes);
        bad = 1;
    }
    if (cfg->redis_mode == TM_REDIS_CLUSTER) {
        /* Redis Cluster has database 0 only: SELECT would be refused by
         * every node at connect time */
        for (size_t i = 0; i < cfg->nnodes; i++) {
            if (cfg->nodes[i].db != 0) {
                tm_cfg_fail(c, bm->url_at, "broker.url: database %d in "
                         "'%s'; a Redis Cluster has database 0 only (drop "
                         "the /%d)", cfg->nodes[i].db,
                         cfg->nodes[i].redacted, cfg->nodes[i].db);
                bad = 1;
                break;
            }
        }
    }
    return bad ? -1 : 0;
}

int tm_cfg_parse_broker(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v)
{
    struct broker_marks bm;
    memset(&bm, 0, sizeof bm);
    if (tm_cfg_walk_section(c, k, v, "broker", &tm_cfg_sec_broker, cb_broker_key,
                     &bm) < 0)
        return -1;
    if (!c->url_done && tm_cfg_set_url(c, c->cfg->broker_url, bm.url_at) < 0)
        return -1;
    if (check_broker(c, &bm) < 0)
        return -1;
    if (c->cfg->password_file != NULL && read_password(c, bm.pw_at) < 0)
        return -1;
    return 0;
}
