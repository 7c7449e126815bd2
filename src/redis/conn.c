/* conn.c - one authenticated connection to one node: its transport
 * (TCP, or TLS for rediss://), AUTH and SELECT; commands on it, the
 * translation of their errors; the broker's up state. Below topo.c: it
 * knows no link, no slot map and no sentinel. */
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
     * the connection is fine, see read.c, tm_redis_group_lost) */
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
