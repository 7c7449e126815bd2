/* conn.c - Redis connections, timeouts, error translation, stream ids. */
#include "redis/redis.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "redis/tls_private.h"
#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* tm_redis_reply_error describes a failed command: the reply's error
 * text, or the
 * context's I/O error. Returns 1 when the connection is unusable. */
int tm_redis_reply_error(struct tm_rconn *c, redisReply *r, char *buf,
                         size_t size)
{
    if (r == NULL) {
        tm_snprintf(buf, size, "%s",
                    c != NULL && c->err ? c->errstr : "connection lost");
        if (buf[0] == '\0')
            tm_snprintf(buf, size, "connection lost");
        return 1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        tm_snprintf(buf, size, "%s", r->str);
        return tm_redis_error_moves(r->str);
    }
    tm_snprintf(buf, size, "unexpected reply type %d", r->type);
    return 0;
}

int tm_redis_error_moves(const char *err)
{
    /* READONLY: a master turned replica; MASTERDOWN: a replica lost its
     * master; UNBLOCKED: a blocking read ended by a change of role, but
     * not one ended because its stream was deleted (TM_REDIS_KEY_GONE:
     * the connection is fine, see intake.c) */
    return strncmp(err, "READONLY", 8) == 0 ||
           strncmp(err, "MASTERDOWN", 10) == 0 ||
           (strncmp(err, "UNBLOCKED", 9) == 0 &&
            strstr(err, TM_REDIS_KEY_GONE) == NULL);
}

/* tm_redis_command runs one command given as argv and returns its reply, or
 * NULL with the reason in buf (and *dead = 1 when the connection is
 * unusable). An error reply is returned as NULL too. */
redisReply *tm_redis_command(struct tm_rconn *c, int argc,
                             const char **argv, const size_t *lens,
                             char *buf, size_t size, int *dead)
{
    redisReply *r = tm_rconn_command_argv(c, argc, argv, lens);
    *dead = 0;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = tm_redis_reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* auth_select sends AUTH (when u has a password) and SELECT (when u
 * names a database other than 0) on a new connection. A sentinel that
 * has no password answers AUTH with an error that is ignored (sentinel
 * set: auth where they have it). */
static int auth_select(struct tm_rconn *c, const struct tm_url *u,
                       const char *name, int sentinel, char *buf,
                       size_t size)
{
    char eb[200];
    int dead;
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", NULL, NULL};
        int argc = 1;
        if (u->user != NULL && u->user[0] != '\0')
            argv[argc++] = u->user;
        argv[argc++] = u->password;
        redisReply *r = tm_redis_command(c, argc, argv, NULL, eb, sizeof eb,
                                         &dead);
        if (r == NULL && !(sentinel && !dead &&
                           strstr(eb, "without any password") != NULL)) {
            tm_snprintf(buf, size, "%s: AUTH failed: %s", name, eb);
            return -1;
        }
        if (r != NULL)
            freeReplyObject(r);
    }
    if (!sentinel && u->db != 0) {
        char db[16];
        tm_snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        redisReply *r = tm_redis_command(c, 2, argv, NULL, eb, sizeof eb,
                                         &dead);
        if (r == NULL) {
            tm_snprintf(buf, size, "%s: SELECT %d failed: %s", name, u->db,
                        eb);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

struct tm_rconn *tm_redis_open_node(struct tm_redis *rb,
                                    const struct tm_url *u, const char *host,
                                    int port, const char *name, int sentinel,
                                    int64_t timeout_ms, char *buf,
                                    size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    struct tm_rconn_opts o = {
        .host = host,
        .port = port,
        .connect_timeout_ms = TM_REDIS_CONNECT_TIMEOUT_MS,
        .timeout_ms = timeout_ms,
        /* the transport: TLS for a rediss:// broker only */
        .fns = u->tls ? &tm_rtls_fns : &tm_rconn_tcp,
        .ca_file = cfg->tls.ca_file,
        .cert_file = cfg->tls.cert_file,
        .key_file = cfg->tls.key_file,
        .server_name = cfg->tls.server_name,
        .verify = cfg->tls.verify,
    };
    char why[256];
    struct tm_rconn *c = tm_rconn_open(&o, why, sizeof why);
    if (c == NULL) {
        tm_snprintf(buf, size, "cannot connect to %s: %s", name, why);
        return NULL;
    }
    if (auth_select(c, u, name, sentinel, buf, size) != 0) {
        tm_rconn_close(c);
        return NULL;
    }
    return c;
}

/* ask_sentinels finds the master's address: each sentinel of broker.url
 * in turn, from the one that answered last, is asked SENTINEL
 * get-master-addr-by-name; the first answer is taken. */
static int ask_sentinels(struct tm_redis *rb, char *host, size_t hostlen,
                         int *port, char *buf, size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    char eb[300] = "no sentinel";
    for (size_t k = 0; k < cfg->nnodes; k++) {
        size_t i = (atomic_load(&rb->sentinel_next) + k) % cfg->nnodes;
        const struct tm_url *s = &cfg->nodes[i];
        struct tm_rconn *c = tm_redis_open_node(rb, s, s->host, s->port,
                                                s->redacted, 1,
                                                TM_REDIS_CONNECT_TIMEOUT_MS,
                                                eb, sizeof eb);
        if (c == NULL)
            continue;
        const char *argv[] = {"SENTINEL", "get-master-addr-by-name",
                              cfg->redis_master};
        int dead;
        redisReply *r = tm_redis_command(c, 3, argv, NULL, eb, sizeof eb,
                                         &dead);
        tm_rconn_close(c);
        if (r == NULL)
            continue;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            tm_snprintf(host, hostlen, "%s", r->element[0]->str);
            *port = atoi(r->element[1]->str);
            freeReplyObject(r);
            atomic_store(&rb->sentinel_next, i);
            return 0;
        }
        freeReplyObject(r);
        tm_snprintf(eb, sizeof eb, "%s does not know master '%s'",
                    s->redacted, cfg->redis_master);
    }
    tm_snprintf(buf, size, "sentinels: cannot learn the address of master "
                "'%s': %s", cfg->redis_master, eb);
    return -1;
}

/* is_master checks with ROLE that c is a master: a sentinel's answer may
 * be older than a failover. */
static int is_master(struct tm_rconn *c, const char *name, char *buf,
                     size_t size)
{
    char eb[200];
    int dead;
    const char *argv[] = {"ROLE"};
    redisReply *r = tm_redis_command(c, 1, argv, NULL, eb, sizeof eb, &dead);
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[0]->str, "master") == 0;
    if (!ok)
        tm_snprintf(buf, size, "%s is not the master (ROLE: %s)", name,
                    r == NULL ? eb
                    : r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                            r->element[0]->type == REDIS_REPLY_STRING
                        ? r->element[0]->str
                        : "unexpected reply");
    if (r != NULL)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

struct tm_rconn *tm_redis_connect(struct tm_redis *rb, int64_t timeout_ms,
                                  char *buf, size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    const struct tm_url *u = &cfg->url;
    if (cfg->redis_mode != TM_REDIS_SENTINEL)
        return tm_redis_open_node(rb, u, u->host, u->port, u->redacted, 0,
                                  timeout_ms, buf, size);
    /* sentinel: the master the sentinels name, with the credentials and
     * database of the first URL (password_file applies to all) */
    char host[256], name[300];
    int port = 0;
    if (ask_sentinels(rb, host, sizeof host, &port, buf, size) != 0)
        return NULL;
    tm_snprintf(name, sizeof name, "master '%s' at %s:%d", cfg->redis_master,
                host, port);
    struct tm_rconn *c = tm_redis_open_node(rb, u, host, port, name, 0,
                                            timeout_ms, buf, size);
    if (c != NULL && is_master(c, name, buf, size) != 0) {
        tm_rconn_close(c);
        c = NULL;
    }
    if (c != NULL)
        tm_redis_node_mark(rb, host, port);
    return c;
}

void tm_redis_mark_up(struct tm_redis *rb)
{
    if (atomic_exchange(&rb->base.up, 1) == 0 && atomic_load(&rb->ever_up))
        atomic_fetch_add(&rb->base.reconnects, 1);
    atomic_store(&rb->ever_up, 1);
}

void tm_redis_mark_down(struct tm_redis *rb)
{
    atomic_store(&rb->base.up, 0);
}

/* tm_redis_ensure_group creates the task's consumer group at the start of
 * the stream (creating the stream too; 1); an existing group is used as
 * is (0). */
int tm_redis_ensure_group(struct tm_redis *rb, struct tm_rlink *lk,
                          const struct tm_redis_task *rt, char *buf,
                          size_t size, int *dead)
{
    const struct tm_cfg_task *t = rt->cfg;
    const char *argv[] = {"XGROUP", "CREATE", t->queue, t->group, "0",
                          "MKSTREAM"};
    char eb[256];
    redisReply *r = tm_redis_link_run(rb, lk, rt->slot, 6, argv, NULL, 0, 0,
                                      eb, sizeof eb, dead);
    if (r != NULL) {
        freeReplyObject(r);
        return 1;
    }
    if (!*dead && strncmp(eb, "BUSYGROUP", 9) == 0)
        return 0;
    tm_snprintf(buf, size, "%s", eb);
    return -1;
}

void tm_redis_wc_lost(struct tm_redis *rb, const char *what, const char *why)
{
    /* A server that restarted closed every connection of the daemon. The
     * intake finds that first, mostly (its blocking read ends), and marks
     * the broker down until it has reconnected; the settle link finds it
     * on its next use, later. So a link that worked and found its peer
     * gone reconnects at once, and the broker is marked down only when
     * that fails: otherwise /ping would turn 503 again for a moment after
     * it came back, and one outage would count twice. A link that timed
     * out (a hung or cut-off server) is marked down at once: a reconnect
     * would wait as long again. The commands that failed stay unsettled
     * and are sent again in the next round. */
    char eb[256];
    if (!rb->cluster && rb->wc_was_up &&
        rb->settle.dropped_err == REDIS_ERR_EOF) {
        rb->settle.dropped_err = 0;
        if (tm_redis_link_get(rb, &rb->settle, 0, eb, sizeof eb) != NULL) {
            tm_log_info(SRC, "%s: %s; reconnected", what, why);
            return;
        }
    }
    if (rb->wc_was_up)
        tm_log_warn(SRC, "%s: %s; reconnecting", what, why);
    rb->wc_was_up = 0;
    tm_redis_mark_down(rb);
}

/* tm_redis_reply_field finds key in a flat [key, value, ...] array. */
const redisReply *tm_redis_reply_field(const redisReply *a, const char *key)
{
    if (a == NULL || a->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(a->element[i]->str, key) == 0)
            return a->element[i + 1];
    return NULL;
}
