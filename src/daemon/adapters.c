/* adapters.c - the adapters this build has: the broker adapter for a URL
 * kind and the pool for a pool kind, and the load of a config the chosen
 * adapter has checked. The one place that names every adapter, above
 * them all, so that the seams (broker/, pool/) know none. */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>

#include "broker/broker.h"
#include "pool/pool.h"
#include "util/util.h"

const struct tm_broker_ops *tm_broker_ops_for(enum tm_broker_kind kind)
{
    switch (kind) {
    case TM_BROKER_REDIS:
        return &tm_broker_redis_ops;
    case TM_BROKER_AMQP:
        return &tm_broker_amqp_ops;
    }
    return NULL;
}

struct tm_broker *tm_broker_new(const struct tm_cfg *cfg, char *err,
                                size_t errlen)
{
    const struct tm_broker_ops *ops = tm_broker_ops_for(cfg->url.kind);
    if (ops == NULL) {
        tm_snprintf(err, errlen, "%s: broker '%s' is not supported by this "
                    "build", cfg->url.redacted, cfg->url.scheme);
        return NULL;
    }
    struct tm_broker *b = ops->create(cfg);
    if (b == NULL)
        tm_snprintf(err, errlen, "%s: cannot create the broker adapter",
                    cfg->url.redacted);
    return b;
}

struct tm_cfg *tm_broker_load_config(const char *path, size_t max_errors,
                                     char *err, size_t errlen,
                                     size_t *nerrors)
{
    struct tm_cfg *cfg =
        tm_cfg_load_all(path, max_errors, err, errlen, nerrors);
    if (cfg == NULL)
        return NULL;
    const struct tm_broker_ops *ops = tm_broker_ops_for(cfg->url.kind);
    if (ops == NULL || ops->check == NULL)
        return cfg; /* tm_broker_new says what is not supported */
    struct tm_cfg_errors e;
    tm_cfg_errors_init(&e, path, max_errors, err, errlen);
    int rc = ops->check(cfg, &e);
    if (rc == 0 && !e.failed)
        return cfg;
    if (e.nerrors == 0) {
        /* every refusal reports its reason; this is a safety net */
        struct tm_mark none = { 0, 0 };
        tm_cfg_error(&e, none, "refused by the %s adapter", ops->kind);
    }
    if (nerrors != NULL)
        *nerrors = e.nerrors;
    tm_cfg_free(cfg);
    return NULL;
}

const struct tm_pool_ops *tm_pool_ops_for(enum tm_pool_kind kind)
{
    switch (kind) {
    case TM_POOL_THREAD:
        return &tm_pool_thread_ops;
    case TM_POOL_FORK:
        return &tm_pool_fork_ops;
    }
    return NULL;
}
