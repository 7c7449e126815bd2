/* amqp/adapter.c - the RabbitMQ adapter: its vtable and lifecycle. */
#include "amqp.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h> /* getenv */

#include "util/log.h"
#include "util/ssl_dl.h" /* tm_ssl_dl_open, for the check op */
#include "util/util.h"

static void ab_destroy(struct tm_broker *b);

/* The environment variables broker.tls replaced, and the key each one
 * became. They are no longer read; one left set would silently not do
 * what it did, so the adapter refuses to start instead. */
static const char *const replaced_env[][2] = {
    { "TASKMILL_AMQP_CACERT", "broker.tls.ca_file" },
    { "TASKMILL_AMQP_CERT", "broker.tls.cert_file" },
    { "TASKMILL_AMQP_KEY", "broker.tls.key_file" },
    { "TASKMILL_AMQP_TLS_VERIFY", "broker.tls.verify" },
};

static int check_env(const struct tm_cfg *cfg)
{
    int bad = 0;
    for (size_t i = 0; i < sizeof replaced_env / sizeof replaced_env[0];
         i++) {
        if (getenv(replaced_env[i][0]) == NULL)
            continue;
        tm_log_err(TM_AMQP_SRC, "%s is set, but no longer read: set %s in "
                   "%s instead, and unset %s", replaced_env[i][0],
                   replaced_env[i][1], cfg->path, replaced_env[i][0]);
        bad = 1;
    }
    if (cfg->url.tls && !cfg->tls.verify)
        tm_log_warn(TM_AMQP_SRC, "broker.tls.verify is false: the "
                    "broker's certificate is not checked; anyone on the "
                    "path can pose as the broker");
    return bad ? -1 : 0;
}

/* ab_check is the check op: rabbitmq-c, and OpenSSL for amqps://. */
static int ab_check(const struct tm_cfg *cfg, struct tm_cfg_errors *e)
{
    if (tm_broker_open_lib(cfg, e, tm_rmq_dl_open) < 0 ||
        (cfg->url.tls && tm_broker_open_lib(cfg, e, tm_ssl_dl_open) < 0))
        return -1;
    return 0;
}

static struct tm_broker *ab_create(const struct tm_cfg *cfg)
{
    if (check_env(cfg) < 0)
        return NULL;
    struct tm_amqp_broker *ab = tm_calloc(1, sizeof *ab);
    ab->base.ops = &tm_broker_amqp_ops;
    ab->base.cfg = cfg;
    ab->ntasks = cfg->ntasks;
    ab->tasks = tm_calloc(cfg->ntasks ? cfg->ntasks : 1, sizeof *ab->tasks);
    atomic_init(&ab->ndown, (int)cfg->ntasks);
    pthread_mutex_init(&ab->depth_mu, NULL);
    ab->nodes = cfg->nodes;
    ab->nnodes = cfg->nnodes;
    assert(ab->nnodes >= 1);
    atomic_init(&ab->base.node, (int)(tm_rand64() % ab->nnodes));
    tm_amqp_settle_init(ab);
    for (size_t i = 0; i < cfg->ntasks; i++) {
        struct tm_amqp_task *at = &ab->tasks[i];
        at->ab = ab;
        at->cfg = &cfg->tasks[i];
        at->index = i;
        at->counted_down = 1;
    }
    if (tm_amqp_intake_init(ab) != 0) {
        ab_destroy(&ab->base);
        return NULL;
    }
    return &ab->base;
}

static void ab_destroy(struct tm_broker *b)
{
    if (b == NULL)
        return;
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    tm_amqp_settle_close(ab);
    tm_amqp_intake_close(ab);
    for (size_t i = 0; i < ab->ntasks; i++) {
        struct tm_amqp_task *at = &ab->tasks[i];
        tm_free(at->acks.above);
        tm_free(at->acks.held);
        tm_free(at->tags);
    }
    tm_amqp_links_free(ab);
    tm_amqp_close(ab->pause_conn);
    pthread_mutex_lock(&ab->depth_mu);
    tm_amqp_close(ab->dconn);
    ab->dconn = NULL;
    pthread_mutex_unlock(&ab->depth_mu);
    pthread_mutex_destroy(&ab->depth_mu);
    tm_amqp_close(ab->cli);
    tm_free(ab->tasks);
    tm_free(ab);
}

/* ab_wake makes blocked fetch calls return, and cancels the consumers:
 * intake is stopping (shutdown, or a reload handing over to a new
 * configuration), and deliveries not handed over yet go back to RabbitMQ
 * at once. Running work is still settled afterwards. */
static void ab_wake(struct tm_broker *b)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    atomic_fetch_add(&ab->wake_seq, 1);
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        tm_amqp_signal_intake(l);
        pthread_mutex_lock(&l->io_mu);
        for (size_t k = 0; k < l->ntasks && l->conn != NULL; k++) {
            struct tm_amqp_task *at = l->tasks[k];
            if (at->conn != NULL && tm_amqp_stop_consuming(at) != 0)
                tm_amqp_conn_lost(at, "stop");
        }
        pthread_mutex_unlock(&l->io_mu);
    }
}

/* The settle thread's upkeep runs every 250 ms: it also takes the
 * deliveries intake parked (x-not-before ahead, delay.c), and a delayed
 * message that comes back from its last delay queue a little early waits
 * for that before it is parked for the rest, so this bounds how late it
 * runs (docs/delivery.md: within 1 s after its time). */
static int64_t ab_tick_ms(struct tm_broker *b)
{
    (void)b;
    return 250;
}

/* connect_link connects link l and opens the channel of each of its
 * tasks down; -1 with b's error set when either cannot be done (io_mu
 * held). */
static int connect_link(struct tm_broker *b, struct tm_amqp_link *l)
{
    int perm = 0;
    if (l->conn != NULL)
        tm_amqp_serve(l, "connect"); /* still alive? */
    if (l->conn == NULL && tm_amqp_link_connect(l, &perm) != 0) {
        tm_broker_set_error(b, perm ? EINVAL : ECONNREFUSED, "%s",
                            l->errstr);
        return -1;
    }
    for (size_t k = 0; k < l->ntasks; k++) {
        struct tm_amqp_task *at = l->tasks[k];
        int dead = 0;
        if (at->conn != NULL)
            continue;
        /* a channel refused while the link opened is tried once more
         * now, so that its refusal is the one reported */
        if (tm_amqp_task_open(at, &perm, &dead) != 0) {
            tm_broker_set_error(b, perm ? EINVAL : ECONNREFUSED, "%s",
                                at->errstr);
            if (dead)
                tm_amqp_conn_lost(at, "connect");
            return -1;
        }
    }
    return 0;
}

static int ab_connect_all(struct tm_broker *b)
{
    struct tm_amqp_broker *ab = (struct tm_amqp_broker *)b;
    for (size_t li = 0; li < ab->nlinks; li++) {
        struct tm_amqp_link *l = &ab->links[li];
        pthread_mutex_lock(&l->io_mu);
        int rc = connect_link(b, l);
        pthread_mutex_unlock(&l->io_mu);
        if (rc != 0)
            return -1;
    }
    /* the publishing connection: dead letters, retries, replies */
    if (ab->ntasks > 0 && tm_amqp_publisher_connect(&ab->pub) != 0) {
        tm_broker_set_error(b, ECONNREFUSED, "%s", ab->pub.errstr);
        return -1;
    }
    if (ab->ntasks == 0) {
        atomic_store(&ab->base.up, 1);
        atomic_store(&ab->ever_up, 1);
    }
    return 0;
}

static const struct tm_broker_consume_ops amqp_consume = {
    .connect = ab_connect_all,
    .lanes = tm_amqp_lanes,
    .lane_of = tm_amqp_lane_of,
    .fetch_lane = tm_amqp_fetch_lane,
    .room_made = tm_amqp_room_made,
    .settle = tm_amqp_settle,
    .wake = ab_wake,
    .tick = tm_amqp_tick,
    .tick_ms = ab_tick_ms,
};

static const struct tm_broker_produce_ops amqp_produce = {
    .publish = tm_amqp_publish,
    .publish_at = tm_amqp_publish_at,
    .request = tm_amqp_request,
};

static const struct tm_broker_admin_ops amqp_admin = {
    .dlq_list = tm_amqp_dlq_list,
    .dlq_browse = tm_amqp_dlq_browse,
    .dlq_replay = tm_amqp_dlq_replay,
    .dlq_purge = tm_amqp_dlq_purge,
    .delayed_browse = tm_amqp_delayed_browse,
    .delayed_take = tm_amqp_delayed_take,
    .depth = tm_amqp_depth,
};

static const struct tm_broker_pause_ops amqp_pause = {
    .pause_set = tm_amqp_pause_set,
    .paused = tm_amqp_paused,
    .pause_note = tm_amqp_pause_note,
};

static const struct tm_broker_sched_ops amqp_sched = {
    .sched_open = tm_amqp_sched_open,
    .sched_fire = tm_amqp_sched_fire,
    .sched_last = tm_amqp_sched_last,
    .sched_serve = tm_amqp_sched_serve,
    .sched_close = tm_amqp_sched_close,
};

const struct tm_broker_ops tm_broker_amqp_ops = {
    .kind = "amqp",
    .check = ab_check,
    .create = ab_create,
    .destroy = ab_destroy,
    .consume = &amqp_consume,
    .produce = &amqp_produce,
    .admin = &amqp_admin,
    .pause = &amqp_pause,
    .sched = &amqp_sched,
};
