/* topo.c - where a command goes: the node table, the cluster's slot map
 * (CLUSTER SLOTS), and links (one connection per node for one role) that
 * follow MOVED, ASK, TRYAGAIN and CLUSTERDOWN.
 *
 * Standalone and sentinel: every command of a link goes to its one
 * connection (index 0), opened by connect_master (the sentinels name
 * the master). Cluster: a key's slot names its node in the slot map, and
 * the link holds one connection per node it has used. A MOVED reply
 * updates the slot's entry at once and marks the map stale, so that the
 * next command routed reads it again from a node (CLUSTER SLOTS); so does
 * a lost connection. An ASK reply sends ASKING and the command to the
 * node named, leaving the map alone. TRYAGAIN and CLUSTERDOWN (a slot
 * being moved with a multi-key command, a failover in progress) are
 * tried again after a backoff, a few seconds at most in all.
 *
 * Sentinel: the master's address is asked of the sentinels (and checked
 * with ROLE) here, each time a link connects. Last, two commands on
 * links every layer above uses: a task's consumer group made sure of,
 * and the loss of the settle link. Connections themselves are conn.c's,
 * below this file. */
#include "redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "redis/arena.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* Redirects followed for one command before it counts as failed. */
#define TM_REDIS_MAX_HOPS 8
/* TRYAGAIN / CLUSTERDOWN: first wait, longest wait, and the total. */
#define TM_REDIS_BUSY_FIRST_MS 50
#define TM_REDIS_BUSY_MAX_MS 1000
#define TM_REDIS_BUSY_TOTAL_MS 4000
/* A stale map is read again at most this often. */
#define TM_REDIS_REFRESH_MIN_MS 200
/* Connect timeout of the connection that reads the slot map. */
#define TM_REDIS_MAP_TIMEOUT_MS 2000

size_t tm_redis_node_add(struct tm_redis *rb, const char *host, int port)
{
    size_t ni = TM_REDIS_NO_NODE;
    pthread_mutex_lock(&rb->topo_mu);
    size_t n = atomic_load(&rb->nnodes);
    for (size_t i = 0; i < n && ni == TM_REDIS_NO_NODE; i++)
        if (rb->nodes[i].port == port && strcmp(rb->nodes[i].host, host) == 0)
            ni = i;
    if (ni == TM_REDIS_NO_NODE && n < TM_REDIS_MAX_NODES) {
        struct tm_redis_node *nd = &rb->nodes[n];
        tm_snprintf(nd->host, sizeof nd->host, "%s", host);
        nd->port = port;
        tm_snprintf(nd->name, sizeof nd->name, "%s://%s:%d",
                    rb->base.cfg->url.tls ? "rediss" : "redis", host, port);
        atomic_store(&nd->master, 0);
        atomic_store(&nd->unreachable, 0);
        /* the entry is whole before readers can see it */
        atomic_store(&rb->nnodes, n + 1);
        ni = n;
    }
    pthread_mutex_unlock(&rb->topo_mu);
    return ni;
}

/* parse_slots reads a CLUSTER SLOTS reply into map (slot -> node
 * index), adding the masters it names to the node table; from_host is
 * the address of the node asked, for an entry with an empty host. */
static int parse_slots(struct tm_redis *rb, const redisReply *r,
                       const char *from_host, unsigned short *map)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        long long from = e->element[0]->integer, to = e->element[1]->integer;
        const char *host = e->element[2]->element[0]->str;
        if (host[0] == '\0' || strcmp(host, "?") == 0)
            host = from_host;
        size_t ni = tm_redis_node_add(rb, host,
                                      (int)e->element[2]->element[1]->integer);
        if (ni == TM_REDIS_NO_NODE || from < 0 || to >= TM_REDIS_SLOTS)
            continue;
        for (long long s = from; s <= to; s++)
            map[s] = (unsigned short)ni;
    }
    return 0;
}

/* ask_slots asks one node for the slot map; 0 and map filled, or -1. */
static int ask_slots(struct tm_redis *rb, const char *host, int port,
                     const char *name, unsigned short *map, char *buf,
                     size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    struct tm_rconn *c = tm_redis_open_node(rb, &cfg->url, host, port, name,
                                            0, TM_REDIS_MAP_TIMEOUT_MS, buf,
                                            size);
    if (c == NULL)
        return -1;
    const char *argv[] = {"CLUSTER", "SLOTS"};
    int dead;
    redisReply *r = tm_redis_command(c, 2, argv, NULL, buf, size, &dead);
    tm_rconn_close(c);
    if (r == NULL)
        return -1;
    for (size_t s = 0; s < TM_REDIS_SLOTS; s++)
        map[s] = TM_REDIS_NO_NODE;
    int rc = parse_slots(rb, r, host, map);
    freeReplyObject(r);
    if (rc != 0)
        tm_snprintf(buf, size, "%s: unexpected CLUSTER SLOTS reply", name);
    return rc;
}

int tm_redis_topo_refresh(struct tm_redis *rb, int force, char *buf,
                          size_t size)
{
    const struct tm_cfg *cfg = rb->base.cfg;
    int rc = -1;
    pthread_mutex_lock(&rb->refresh_mu);
    int64_t now = tm_now_ms();
    if (!force &&
        now - atomic_load(&rb->map_at_ms) < TM_REDIS_REFRESH_MIN_MS) {
        /* read a moment ago (maybe by another thread while this one
         * waited for the lock): that map serves */
        rc = 0;
        goto out;
    }
    unsigned short *map = tm_malloc(TM_REDIS_SLOTS * sizeof *map);
    char eb[300] = "no node";
    /* the nodes known, masters first, then the seeds of broker.url */
    size_t n = atomic_load(&rb->nnodes);
    int done = 0;
    for (int pass = 0; pass < 2 && !done; pass++)
        for (size_t i = 0; i < n && !done; i++) {
            struct tm_redis_node *nd = &rb->nodes[i];
            int m = atomic_load(&nd->master) &&
                    !atomic_load(&nd->unreachable);
            if (m != (pass == 0))
                continue;
            done = ask_slots(rb, nd->host, nd->port, nd->name, map, eb,
                             sizeof eb) == 0;
        }
    for (size_t i = 0; i < cfg->nnodes && !done; i++)
        done = ask_slots(rb, cfg->nodes[i].host, cfg->nodes[i].port,
                         cfg->nodes[i].redacted, map, eb, sizeof eb) == 0;
    if (done) {
        size_t nn = atomic_load(&rb->nnodes);
        unsigned char serves[TM_REDIS_MAX_NODES] = {0};
        for (size_t s = 0; s < TM_REDIS_SLOTS; s++) {
            atomic_store_explicit(&rb->slot_node[s], map[s],
                                  memory_order_relaxed);
            if (map[s] != TM_REDIS_NO_NODE)
                serves[map[s]] = 1;
        }
        for (size_t i = 0; i < nn; i++)
            atomic_store(&rb->nodes[i].master, serves[i]);
        atomic_store(&rb->map_stale, 0);
        rc = 0;
    } else {
        tm_snprintf(buf, size, "cannot read the cluster's slot map: %s", eb);
    }
    /* a failed round also waits its turn: no storm against dead nodes */
    atomic_store(&rb->map_at_ms, now);
    tm_free(map);
out:
    pthread_mutex_unlock(&rb->refresh_mu);
    return rc;
}

size_t tm_redis_slot_node(struct tm_redis *rb, unsigned slot, char *buf,
                          size_t size)
{
    if (!rb->cluster)
        return 0;
    char eb[400];
    size_t ni = atomic_load_explicit(&rb->slot_node[slot],
                                     memory_order_relaxed);
    if (atomic_load(&rb->map_stale) || ni == TM_REDIS_NO_NODE) {
        if (tm_redis_topo_refresh(rb, 0, eb, sizeof eb) != 0 &&
            ni == TM_REDIS_NO_NODE) {
            tm_snprintf(buf, size, "%s", eb);
            return TM_REDIS_NO_NODE;
        }
        ni = atomic_load_explicit(&rb->slot_node[slot], memory_order_relaxed);
    }
    if (ni == TM_REDIS_NO_NODE)
        tm_snprintf(buf, size, "no node of the cluster serves slot %u",
                    slot);
    return ni;
}

/* node_mark records host:port as the node connected to outside a
 * cluster (the sentinels' master). */
static void node_mark(struct tm_redis *rb, const char *host, int port)
{
    size_t ni = tm_redis_node_add(rb, host, port);
    if (ni != TM_REDIS_NO_NODE)
        atomic_store(&rb->master_node, (int)ni);
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

/* connect_master opens one authenticated connection whose commands time
 * out after timeout_ms outside a cluster: to the server, or to the master
 * the sentinels name (recorded as the node connected to, for /status);
 * NULL with the reason in buf. */
static struct tm_rconn *connect_master(struct tm_redis *rb,
                                       int64_t timeout_ms, char *buf,
                                       size_t size)
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
        node_mark(rb, host, port);
    return c;
}

void tm_redis_link_init(struct tm_rlink *lk, int64_t timeout_ms)
{
    memset(lk, 0, sizeof *lk);
    lk->timeout_ms = timeout_ms;
}

struct tm_rconn *tm_redis_link_get(struct tm_redis *rb, struct tm_rlink *lk,
                                   size_t ni, char *buf, size_t size)
{
    if (ni >= TM_REDIS_MAX_NODES) {
        tm_snprintf(buf, size, "no such node");
        return NULL;
    }
    if (lk->c[ni] != NULL)
        return lk->c[ni];
    struct tm_rconn *c;
    if (!rb->cluster) {
        c = connect_master(rb, lk->timeout_ms, buf, size);
    } else {
        struct tm_redis_node *nd = &rb->nodes[ni];
        c = tm_redis_open_node(rb, &rb->base.cfg->url, nd->host, nd->port,
                               nd->name, 0, lk->timeout_ms, buf, size);
        atomic_store(&nd->unreachable, c == NULL);
        if (c == NULL)
            atomic_store(&rb->map_stale, 1);
    }
    if (c == NULL)
        return NULL;
    lk->c[ni] = c;
    lk->client_id[ni] = 0;
    lk->gen++;
    return c;
}

void tm_redis_link_drop(struct tm_redis *rb, struct tm_rlink *lk, size_t ni)
{
    if (ni >= TM_REDIS_MAX_NODES || lk->c[ni] == NULL)
        return;
    lk->dropped_err = lk->c[ni]->err;
    tm_rconn_close(lk->c[ni]);
    lk->c[ni] = NULL;
    lk->client_id[ni] = 0;
    if (rb->cluster)
        atomic_store(&rb->map_stale, 1);
}

void tm_redis_link_close(struct tm_redis *rb, struct tm_rlink *lk)
{
    for (size_t i = 0; i < TM_REDIS_MAX_NODES; i++)
        tm_redis_link_drop(rb, lk, i);
}

int tm_redis_link_up(const struct tm_rlink *lk)
{
    for (size_t i = 0; i < TM_REDIS_MAX_NODES; i++)
        if (lk->c[i] != NULL)
            return 1;
    return 0;
}

enum tm_redis_redirect tm_redis_redirect_of(const char *err, unsigned *slot,
                                            char *host, size_t hostlen,
                                            int *port)
{
    enum tm_redis_redirect kind;
    const char *rest;
    if (strncmp(err, "MOVED ", 6) == 0) {
        kind = TM_REDIS_MOVED;
        rest = err + 6;
    } else if (strncmp(err, "ASK ", 4) == 0) {
        kind = TM_REDIS_ASK;
        rest = err + 4;
    } else if (strncmp(err, "TRYAGAIN", 8) == 0 ||
               strncmp(err, "CLUSTERDOWN", 11) == 0) {
        return TM_REDIS_BUSY;
    } else {
        return TM_REDIS_NO_REDIRECT;
    }
    /* "<slot> <host>:<port>", the host maybe an IPv6 address */
    char *end;
    unsigned long s = strtoul(rest, &end, 10);
    if (end == rest || *end != ' ' || s >= TM_REDIS_SLOTS)
        return TM_REDIS_NO_REDIRECT;
    const char *addr = end + 1;
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= hostlen)
        return TM_REDIS_NO_REDIRECT;
    long p = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || p <= 0 || p > 65535)
        return TM_REDIS_NO_REDIRECT;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *slot = (unsigned)s;
    *port = (int)p;
    return kind;
}

/* link_io_lost drops a connection whose reply was lost; in a cluster the
 * node counts as unreachable until a connect to it works again. */
static void link_io_lost(struct tm_redis *rb, struct tm_rlink *lk, size_t ni)
{
    tm_redis_link_drop(rb, lk, ni);
    if (rb->cluster)
        atomic_store(&rb->nodes[ni].unreachable, 1);
}

redisReply *tm_redis_link_run(struct tm_redis *rb, struct tm_rlink *lk,
                              unsigned slot, int argc, const char **argv,
                              const size_t *lens, size_t cap,
                              int64_t timeout_ms, char *buf, size_t size,
                              int *dead)
{
    return tm_redis_link_run_in(rb, lk, slot, argc, argv, lens, cap, NULL,
                                timeout_ms, buf, size, dead);
}

redisReply *tm_redis_link_run_in(struct tm_redis *rb, struct tm_rlink *lk,
                                 unsigned slot, int argc, const char **argv,
                                 const size_t *lens, size_t cap,
                                 struct tm_rarena *arena, int64_t timeout_ms,
                                 char *buf, size_t size, int *dead)
{
    size_t ni = TM_REDIS_NO_NODE;
    int asking = 0;
    int64_t wait = TM_REDIS_BUSY_FIRST_MS, waited = 0;
    *dead = 0;
    for (int hop = 0;; hop++) {
        if (!asking)
            ni = tm_redis_slot_node(rb, slot, buf, size);
        if (ni == TM_REDIS_NO_NODE) {
            *dead = 1;
            return NULL;
        }
        struct tm_rconn *c = tm_redis_link_get(rb, lk, ni, buf, size);
        if (c == NULL) {
            *dead = 1;
            return NULL;
        }
        if (timeout_ms > 0)
            tm_rconn_set_timeout(c, timeout_ms);
        redisReply *r = NULL;
        int ok = 1;
        if (asking) {
            /* ASKING and its +OK first, alone: a capped read starts at
             * a reply boundary with nothing buffered */
            r = tm_rconn_command(c, "ASKING");
            ok = r != NULL;
            if (r != NULL)
                freeReplyObject(r);
            r = NULL;
        }
        ok = ok && tm_rconn_append_argv(c, argc, argv, lens) == 0;
        if (ok)
            ok = tm_rconn_get_reply_in(c, cap, arena, &r) == 0;
        if (timeout_ms > 0 && ok)
            tm_rconn_set_timeout(c, lk->timeout_ms);
        if (!ok) {
            tm_redis_reply_error(c, NULL, buf, size);
            link_io_lost(rb, lk, ni);
            *dead = 1;
            return NULL;
        }
        if (r->type != REDIS_REPLY_ERROR)
            return r;
        char host[256];
        int port = 0;
        unsigned s = 0;
        enum tm_redis_redirect kind =
            rb->cluster && hop < TM_REDIS_MAX_HOPS
                ? tm_redis_redirect_of(r->str, &s, host, sizeof host, &port)
                : TM_REDIS_NO_REDIRECT;
        if (kind == TM_REDIS_MOVED || kind == TM_REDIS_ASK) {
            size_t to = tm_redis_node_add(rb, host, port);
            if (to != TM_REDIS_NO_NODE) {
                tm_rarena_reply_free(r, arena);
                asking = kind == TM_REDIS_ASK;
                if (asking) {
                    ni = to;
                } else {
                    /* the slot's entry now, the whole map soon */
                    atomic_store_explicit(&rb->slot_node[s],
                                          (unsigned short)to,
                                          memory_order_relaxed);
                    atomic_store(&rb->map_stale, 1);
                }
                continue;
            }
        } else if (kind == TM_REDIS_BUSY &&
                   waited + wait <= TM_REDIS_BUSY_TOTAL_MS) {
            tm_rarena_reply_free(r, arena);
            tm_sleep_ms(wait);
            waited += wait;
            wait = wait * 2 < TM_REDIS_BUSY_MAX_MS ? wait * 2
                                                   : TM_REDIS_BUSY_MAX_MS;
            asking = 0;
            /* the map may have changed (a failover ends CLUSTERDOWN) */
            atomic_store(&rb->map_stale, 1);
            continue;
        }
        *dead = tm_redis_reply_error(c, r, buf, size);
        tm_rarena_reply_free(r, arena);
        if (*dead)
            tm_redis_link_drop(rb, lk, ni);
        return NULL;
    }
}

size_t tm_redis_nodes(struct tm_broker *b, struct tm_broker_node *out,
                      size_t max)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    int up = atomic_load(&rb->base.up);
    size_t n = atomic_load(&rb->nnodes), k = 0;
    for (size_t i = 0; i < n && k < max; i++) {
        const struct tm_redis_node *nd = &rb->nodes[i];
        int on;
        if (rb->cluster)
            on = atomic_load(&nd->master) && !atomic_load(&nd->unreachable);
        else
            on = up && atomic_load(&rb->master_node) == (int)i;
        tm_snprintf(out[k].name, sizeof out[k].name, "%s", nd->name);
        out[k].up = on;
        k++;
    }
    return k;
}

int tm_redis_link_pipe(struct tm_redis *rb, struct tm_rlink *lk,
                       struct tm_redis_cmd *cmds, size_t n, char *buf,
                       size_t size)
{
    /* where each command went: a node, NO_NODE (not sent), or REDO (a
     * redirect: run again alone) */
    enum { REDO = TM_REDIS_NO_NODE + 1 };
    unsigned char broken[TM_REDIS_MAX_NODES] = {0};
    unsigned char moved[TM_REDIS_MAX_NODES] = {0};
    size_t *to = tm_malloc((n ? n : 1) * sizeof *to);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        struct tm_redis_cmd *cm = &cmds[i];
        cm->reply = NULL;
        size_t ni = tm_redis_slot_node(rb, cm->slot, buf, size);
        struct tm_rconn *c =
            ni == TM_REDIS_NO_NODE || broken[ni]
                ? NULL
                : tm_redis_link_get(rb, lk, ni, buf, size);
        if (c == NULL || tm_rconn_append_argv(c, cm->argc, cm->argv,
                                              cm->lens) != 0) {
            if (ni != TM_REDIS_NO_NODE)
                broken[ni] = 1;
            to[i] = TM_REDIS_NO_NODE;
            rc = -1;
            continue;
        }
        to[i] = ni;
    }
    /* each connection's replies come in the order of its commands; all
     * are read, so that a connection kept stays in step */
    for (size_t i = 0; i < n; i++) {
        size_t ni = to[i];
        if (ni == TM_REDIS_NO_NODE || broken[ni])
            continue;
        struct tm_rconn *c = lk->c[ni];
        redisReply *r = NULL;
        if (tm_rconn_get_reply(c, &r) != 0) {
            tm_redis_reply_error(c, NULL, buf, size);
            broken[ni] = 1;
            rc = -1;
            continue;
        }
        unsigned s;
        char host[256];
        int port;
        if (r->type == REDIS_REPLY_ERROR && rb->cluster &&
            tm_redis_redirect_of(r->str, &s, host, sizeof host, &port) !=
                TM_REDIS_NO_REDIRECT) {
            freeReplyObject(r);
            to[i] = REDO;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR && tm_redis_error_moves(r->str)) {
            /* no longer the master: the connection goes after this */
            tm_snprintf(buf, size, "%s", r->str);
            moved[ni] = 1;
            rc = -1;
        }
        cmds[i].reply = r;
    }
    for (size_t ni = 0; ni < TM_REDIS_MAX_NODES; ni++) {
        if (broken[ni] && lk->c[ni] != NULL)
            link_io_lost(rb, lk, ni);
        else if (moved[ni])
            tm_redis_link_drop(rb, lk, ni);
    }
    /* redirected commands, each alone now, following the redirect */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (to[i] != REDO)
            continue;
        int dead = 0;
        struct tm_redis_cmd *cm = &cmds[i];
        cm->reply = tm_redis_link_run(rb, lk, cm->slot, cm->argc, cm->argv,
                                      cm->lens, 0, 0, buf, size, &dead);
        if (dead)
            rc = -1;
    }
    tm_free(to);
    return rc;
}

void tm_redis_cmds_free(struct tm_redis_cmd *cmds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (cmds[i].reply != NULL)
            freeReplyObject(cmds[i].reply);
        cmds[i].reply = NULL;
    }
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
