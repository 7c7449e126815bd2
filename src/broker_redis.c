/* broker_redis.c - the Redis Streams adapter, on hiredis. */
#include "broker.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "log.h"
#include "util.h"

#define SRC "broker:redis"

/* Connect timeout, and the timeout of ordinary commands. */
#define RB_CONNECT_TIMEOUT_MS 5000
#define RB_COMMAND_TIMEOUT_MS 10000
/* A blocking read gets this much on top of its BLOCK time. */
#define RB_BLOCK_SLACK_MS 5000
/* Longest Redis stream id: two 20-digit numbers and a dash. */
#define RB_ID_MAX 48
/* Entries per XACK command and per dlq page. */
#define RB_ACK_CHUNK 1024
#define RB_PAGE 100

/* Dead-letter one entry atomically: XADD to the dead-letter stream, then
 * XACK the original. If XADD fails the script stops before XACK, so the
 * entry stays pending rather than being lost; if the daemon dies after
 * the script, nothing is duplicated.
 * KEYS: stream, dlq. ARGV: group, id, then field/value pairs. */
static const char dead_script[] =
    "local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "return id\n";

/* Replay one dead-letter entry: XADD the body to the stream, XDEL it
 * from the dead-letter stream. KEYS: stream, dlq. ARGV: dlq id, body. */
static const char replay_script[] =
    "local id = redis.call('XADD', KEYS[1], '*', 'body', ARGV[2])\n"
    "redis.call('XDEL', KEYS[2], ARGV[1])\n"
    "return id\n";

/* struct rb_retry is an entry kept pending on this consumer until its
 * retry time, then claimed again (XCLAIM) and run with attempt. */
struct rb_retry {
    int64_t due_ms;
    unsigned attempt;
    char id[RB_ID_MAX];
};

struct rb_task {
    const struct tm_cfg_task *cfg;
    redisContext *rc;          /* intake connection: blocking reads */
    int group_ready;
    int history_done;          /* own pending entries read again */
    char history_from[RB_ID_MAX]; /* next history read starts after it */
    int was_up;
    atomic_llong client_id;    /* CLIENT ID of rc, 0 when unknown */
    _Atomic(struct tm_msg *) garbage; /* settled batches, to free here */
    int64_t next_maint_ms;     /* intake: next reclaim round */
    int64_t next_tick_ms;      /* settle thread: next upkeep round */
    unsigned tick_rounds;
    char claim_cursor[RB_ID_MAX]; /* XAUTOCLAIM scan position */
    pthread_mutex_t mu;        /* guards the retry heap */
    struct rb_retry *heap;     /* min-heap by due_ms */
    size_t nheap, capheap;
    char errstr[256];
};

struct rb_broker {
    struct tm_broker base;
    redisContext *wc;          /* settle connection: acks, dead letters */
    struct rb_task *tasks;
    size_t ntasks;
    const char *consumer;
    atomic_int ever_up;
    int wc_was_up;
    /* settle scratch (settle thread only) */
    const char **argv;
    size_t *argvlen;
    size_t argcap;
};

/* ---- connections ---------------------------------------------------- */

static struct timeval tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* reply_error describes a failed command: the reply's error text, or the
 * context's I/O error. Returns 1 when the connection is unusable. */
static int reply_error(redisContext *c, redisReply *r, char *buf,
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
        return 0;
    }
    tm_snprintf(buf, size, "unexpected reply type %d", r->type);
    return 0;
}

/* rb_command runs one command given as argv and returns its reply, or
 * NULL with the reason in buf (and *dead = 1 when the connection is
 * unusable). An error reply is returned as NULL too. */
static redisReply *rb_command(redisContext *c, int argc, const char **argv,
                              const size_t *lens, char *buf, size_t size,
                              int *dead)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    *dead = 0;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

static redisContext *rb_connect(struct rb_broker *rb, int64_t timeout_ms,
                                char *buf, size_t size)
{
    const struct tm_url *u = &rb->base.cfg->url;
    redisContext *c = redisConnectWithTimeout(
        u->host, u->port, tv_ms(RB_CONNECT_TIMEOUT_MS));
    if (c == NULL) {
        tm_snprintf(buf, size, "cannot connect to %s: out of memory",
                    u->redacted);
        return NULL;
    }
    if (c->err) {
        tm_snprintf(buf, size, "cannot connect to %s: %s", u->redacted,
                    c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv_ms(timeout_ms));
    redisEnableKeepAlive(c);
    char eb[200];
    int dead;
    if (u->password != NULL) {
        const char *argv[3] = {"AUTH", NULL, NULL};
        int argc = 1;
        if (u->user != NULL && u->user[0] != '\0')
            argv[argc++] = u->user;
        argv[argc++] = u->password;
        redisReply *r = rb_command(c, argc, argv, NULL, eb, sizeof eb, &dead);
        if (r == NULL) {
            tm_snprintf(buf, size, "%s: AUTH failed: %s", u->redacted, eb);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    if (u->db != 0) {
        char db[16];
        tm_snprintf(db, sizeof db, "%d", u->db);
        const char *argv[2] = {"SELECT", db};
        redisReply *r = rb_command(c, 2, argv, NULL, eb, sizeof eb, &dead);
        if (r == NULL) {
            tm_snprintf(buf, size, "%s: SELECT %d failed: %s", u->redacted,
                        u->db, eb);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* close_conn shuts the socket down before freeing the context: a child of
 * the fork pool holds a copy of every descriptor, which would otherwise
 * keep the connection open on the server. */
static void close_conn(redisContext *c)
{
    if (c->fd >= 0)
        shutdown(c->fd, SHUT_RDWR);
    redisFree(c);
}

static void mark_up(struct rb_broker *rb)
{
    if (atomic_exchange(&rb->base.up, 1) == 0 && atomic_load(&rb->ever_up))
        atomic_fetch_add(&rb->base.reconnects, 1);
    atomic_store(&rb->ever_up, 1);
}

static void mark_down(struct rb_broker *rb)
{
    atomic_store(&rb->base.up, 0);
}

/* ensure_group creates the task's consumer group at the start of the
 * stream (creating the stream too); an existing group is used as is. */
static int ensure_group(redisContext *c, const struct tm_cfg_task *t,
                        char *buf, size_t size, int *dead)
{
    const char *argv[] = {"XGROUP", "CREATE", t->queue, t->group, "0",
                          "MKSTREAM"};
    redisReply *r = redisCommandArgv(c, 6, argv, NULL);
    *dead = 0;
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        strncmp(r->str, "BUSYGROUP", 9) == 0) {
        freeReplyObject(r);
        return 0;
    }
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        *dead = reply_error(c, r, buf, size);
        if (r != NULL)
            freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/* ---- retry heap (settle thread pushes, intake thread pops) ----------- */

static void heap_push(struct rb_task *rt, const struct rb_retry *e)
{
    pthread_mutex_lock(&rt->mu);
    if (rt->nheap == rt->capheap) {
        rt->capheap = rt->capheap ? rt->capheap * 2 : 16;
        rt->heap = tm_realloc(rt->heap, rt->capheap * sizeof *rt->heap);
    }
    size_t i = rt->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (rt->heap[parent].due_ms <= e->due_ms)
            break;
        rt->heap[i] = rt->heap[parent];
        i = parent;
    }
    rt->heap[i] = *e;
    pthread_mutex_unlock(&rt->mu);
}

/* heap_pop_due moves up to max due entries into out; returns the count,
 * and the due time of the next entry in *next_ms (0 when none). */
static size_t heap_pop_due(struct rb_task *rt, int64_t now, size_t max,
                           struct rb_retry *out, int64_t *next_ms)
{
    size_t n = 0;
    pthread_mutex_lock(&rt->mu);
    while (n < max && rt->nheap > 0 && rt->heap[0].due_ms <= now) {
        out[n++] = rt->heap[0];
        struct rb_retry last = rt->heap[--rt->nheap];
        size_t i = 0;
        for (;;) {
            size_t l = 2 * i + 1, s = i;
            if (l >= rt->nheap)
                break;
            s = l;
            if (l + 1 < rt->nheap &&
                rt->heap[l + 1].due_ms < rt->heap[l].due_ms)
                s = l + 1;
            if (last.due_ms <= rt->heap[s].due_ms)
                break;
            rt->heap[i] = rt->heap[s];
            i = s;
        }
        if (rt->nheap > 0)
            rt->heap[i] = last;
    }
    *next_ms = rt->nheap > 0 ? rt->heap[0].due_ms : 0;
    pthread_mutex_unlock(&rt->mu);
    return n;
}

/* ---- intake --------------------------------------------------------- */

static void free_batch(struct tm_batch *b)
{
    freeReplyObject(b->owner);
    tm_free(b);
}

/* cb_release_reply runs on whichever thread settles a batch's last
 * message (the settle thread, mostly). The reply tree was allocated by the
 * task's intake thread, entry by entry; freeing it there again is much
 * cheaper for malloc than freeing it across threads, so the batch goes on
 * the task's garbage stack, which the intake empties before its next
 * read. The stack links batches through their first message. */
static void cb_release_reply(struct tm_batch *b)
{
    struct rb_task *rt = b->msgs[0].bctx;
    struct tm_msg *head = &b->msgs[0];
    struct tm_msg *old = atomic_load_explicit(&rt->garbage,
                                              memory_order_relaxed);
    do {
        head->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &rt->garbage, &old, head, memory_order_release,
        memory_order_relaxed));
}

/* collect frees the batches settled since the last read. */
static void collect(struct rb_task *rt)
{
    struct tm_msg *m = atomic_exchange_explicit(&rt->garbage, NULL,
                                                memory_order_acquire);
    while (m != NULL) {
        struct tm_msg *next = m->next;
        free_batch(m->batch);
        m = next;
    }
}

/* fill_msg points m at one stream entry [id, [field, value, ...]]. */
static int fill_msg(struct tm_msg *m, const redisReply *e)
{
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    m->id = e->element[0]->str;
    m->id_len = e->element[0]->len;
    const redisReply *f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY) {
        m->invalid = "the entry has no fields";
        return 0;
    }
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && k->len == 4 &&
            memcmp(k->str, "body", 4) == 0 && v->type == REDIS_REPLY_STRING) {
            m->body = v->str;
            m->body_len = v->len;
            return 0;
        }
    }
    m->invalid = "the entry has no body field";
    return 0;
}

/* entries_batch makes a batch of the entries array, owning reply. Entries
 * that are not well-formed are skipped. attempts, when given, holds the
 * attempt of each entry by id. Returns NULL (reply freed) when empty. */
static struct tm_batch *entries_batch(struct rb_task *rt,
                                      redisReply *reply,
                                      const redisReply *entries,
                                      size_t task_index,
                                      const struct rb_retry *retries,
                                      size_t nretries)
{
    size_t n = 0;
    for (size_t i = 0; i < entries->elements; i++)
        if (entries->element[i]->type == REDIS_REPLY_ARRAY)
            n++;
    if (n == 0) {
        freeReplyObject(reply);
        return NULL;
    }
    struct tm_batch *b = tm_batch_new(n);
    b->owner = reply;
    b->release = cb_release_reply;
    size_t k = 0;
    int64_t now = tm_now_ns();
    for (size_t i = 0; i < entries->elements && k < n; i++) {
        struct tm_msg *m = &b->msgs[k];
        if (fill_msg(m, entries->element[i]) != 0)
            continue;
        m->task_index = task_index;
        m->bctx = rt;
        m->attempt = 1;
        m->t_recv_ns = now;
        for (size_t r = 0; r < nretries; r++) {
            if (strcmp(retries[r].id, m->id) == 0) {
                m->attempt = retries[r].attempt;
                break;
            }
        }
        k++;
    }
    if (k < n) {
        /* malformed entries were skipped: shrink the count */
        atomic_store(&b->refs, (unsigned)k);
        b->n = k;
        if (k == 0) {
            free_batch(b);
            return NULL;
        }
    }
    return b;
}

/* id_cmp orders two stream ids "ms-seq" numerically. */
static int id_cmp(const char *a, const char *b)
{
    unsigned long long ams = strtoull(a, (char **)&a, 10);
    unsigned long long bms = strtoull(b, (char **)&b, 10);
    if (ams != bms)
        return ams < bms ? -1 : 1;
    unsigned long long aseq = *a == '-' ? strtoull(a + 1, NULL, 10) : 0;
    unsigned long long bseq = *b == '-' ? strtoull(b + 1, NULL, 10) : 0;
    return aseq < bseq ? -1 : aseq > bseq ? 1 : 0;
}

/* id_next writes the id right after id (seq + 1) into buf. */
static void id_next(const char *id, char *buf, size_t size)
{
    char *end;
    unsigned long long ms = strtoull(id, &end, 10);
    unsigned long long seq = *end == '-' ? strtoull(end + 1, NULL, 10) : 0;
    tm_snprintf(buf, size, "%llu-%llu", ms, seq + 1);
}

/* set_attempts sets each message's attempt to its delivery count, read
 * with one XPENDING over the batch's id range. Redis counts every
 * delivery (XREADGROUP, history reads, XCLAIM, XAUTOCLAIM; not JUSTID
 * claims), so the count is the number of this run, across crashes and
 * consumers. Returns 1 when the connection failed, else 0. */
static int set_attempts(struct rb_broker *rb, struct rb_task *rt,
                        struct tm_batch *b)
{
    if (b == NULL || b->n == 0)
        return 0;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", (size_t)RB_ACK_CHUNK * 4);
    const char *argv[] = {"XPENDING", rt->cfg->queue, rt->cfg->group,
                          b->msgs[0].id, b->msgs[b->n - 1].id, count,
                          rb->consumer};
    redisReply *r = redisCommandArgv(rt->rc, 7, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    size_t j = 0;
    for (size_t i = 0; i < r->elements && j < b->n; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            continue;
        while (j < b->n && id_cmp(b->msgs[j].id, e->element[0]->str) < 0)
            j++;
        if (j < b->n && strcmp(b->msgs[j].id, e->element[0]->str) == 0 &&
            e->element[3]->type == REDIS_REPLY_INTEGER)
            b->msgs[j].attempt = (unsigned)e->element[3]->integer;
    }
    freeReplyObject(r);
    return 0;
}

/* claim_period is how often a task's entries are checked: a quarter of
 * claim_idle, between 50 ms and 5 s. */
static int64_t claim_period(const struct tm_cfg_task *t)
{
    int64_t p = t->claim_idle_ms / 4;
    return p < 50 ? 50 : p > 5000 ? 5000 : p;
}

/* refresh_own resets the idle time of this consumer's entries that have
 * been pending for half the claim time (running long, queued, or waiting
 * for a retry), so that no other consumer reclaims live work. XCLAIM with
 * JUSTID does not count as a delivery. Returns 1 on connection loss. */
static int refresh_own(struct rb_broker *rb, struct rb_task *rt,
                       redisContext *c, char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    char idle[24], count[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)(t->claim_idle_ms / 2));
    tm_snprintf(count, sizeof count, "%d", RB_ACK_CHUNK);
    const char *argv[] = {"XPENDING", t->queue, t->group, "IDLE", idle,
                          "-", "+", count, rb->consumer};
    redisReply *r = redisCommandArgv(c, 9, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = reply_error(c, r, eb, ebsize);
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    if (r->elements == 0) {
        freeReplyObject(r);
        return 0;
    }
    const char **cargv = tm_calloc(r->elements + 6, sizeof *cargv);
    size_t argc = 0;
    cargv[argc++] = "XCLAIM";
    cargv[argc++] = t->queue;
    cargv[argc++] = t->group;
    cargv[argc++] = rb->consumer;
    cargv[argc++] = "0";
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1 &&
            e->element[0]->type == REDIS_REPLY_STRING)
            cargv[argc++] = e->element[0]->str;
    }
    cargv[argc++] = "JUSTID";
    redisReply *x = redisCommandArgv(c, (int)argc, cargv, NULL);
    int dead = 0;
    if (x == NULL || x->type == REDIS_REPLY_ERROR)
        dead = reply_error(c, x, eb, ebsize);
    else
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                     "kept %zu long-pending entries from being reclaimed",
                     argc - 6);
    if (x != NULL)
        freeReplyObject(x);
    tm_free(cargv);
    freeReplyObject(r);
    return dead;
}

/* reclaim claims entries idle past claim_idle on other (dead) consumers
 * with XAUTOCLAIM, continuing its scan where the last round stopped. */
static int reclaim(struct rb_broker *rb, struct rb_task *rt, size_t ti,
                   size_t max, struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    char idle[24], count[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)t->claim_idle_ms);
    tm_snprintf(count, sizeof count, "%zu", max);
    if (rt->claim_cursor[0] == '\0')
        tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "0-0");
    const char *argv[] = {"XAUTOCLAIM", t->queue, t->group, rb->consumer,
                          idle, rt->claim_cursor, "COUNT", count};
    redisReply *r = redisCommandArgv(rt->rc, 8, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        int dead = reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "%s",
                r->element[0]->str);
    struct tm_batch *b = entries_batch(rt, r, r->element[1], ti, NULL, 0);
    if (b == NULL)
        return 0;
    tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                 "reclaimed %zu entries pending over %lld ms on other "
                 "consumers", b->n, (long long)t->claim_idle_ms);
    if (set_attempts(rb, rt, b) != 0) {
        /* they are ours now; they will come back by the history read */
        for (size_t i = 0; i < b->n; i++)
            tm_msg_release(&b->msgs[i]);
        return 1;
    }
    *out = b;
    return 0;
}

/* reply_field finds key in a flat [key, value, ...] array. */
static const redisReply *reply_field(const redisReply *a, const char *key)
{
    if (a == NULL || a->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < a->elements; i += 2)
        if (a->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(a->element[i]->str, key) == 0)
            return a->element[i + 1];
    return NULL;
}

/* trim caps the stream at maxlen entries, but never removes an entry that
 * some group has not yet read or acknowledged: it trims (XTRIM MINID) up
 * to the oldest such entry at most. Work per round is bounded. */
static int trim(struct rb_broker *rb, struct rb_task *rt, redisContext *c,
                char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    (void)rb;
    redisReply *len = redisCommand(c, "XLEN %s", t->queue);
    if (len == NULL || len->type != REDIS_REPLY_INTEGER) {
        dead = reply_error(c, len, eb, ebsize);
        goto out_len;
    }
    long long excess = len->integer - t->maxlen;
    if (excess <= 0)
        goto out_len;
    /* the oldest entry any group still needs */
    char safe[RB_ID_MAX] = "";
    redisReply *groups = redisCommand(c, "XINFO GROUPS %s", t->queue);
    if (groups == NULL || groups->type != REDIS_REPLY_ARRAY) {
        dead = reply_error(c, groups, eb, ebsize);
        goto out_groups;
    }
    for (size_t i = 0; i < groups->elements; i++) {
        const redisReply *g = groups->element[i];
        const redisReply *name = reply_field(g, "name");
        const redisReply *pend = reply_field(g, "pending");
        const redisReply *last = reply_field(g, "last-delivered-id");
        if (name == NULL || pend == NULL || last == NULL)
            continue;
        char cand[RB_ID_MAX];
        if (pend->integer > 0) {
            redisReply *p = redisCommand(c, "XPENDING %s %s", t->queue,
                                         name->str);
            if (p == NULL) {
                dead = reply_error(c, p, eb, ebsize);
                goto out_groups;
            }
            if (p->type != REDIS_REPLY_ARRAY || p->elements < 2 ||
                p->element[1]->type != REDIS_REPLY_STRING) {
                freeReplyObject(p);
                continue;
            }
            tm_snprintf(cand, sizeof cand, "%s", p->element[1]->str);
            freeReplyObject(p);
        } else {
            id_next(last->str, cand, sizeof cand);
        }
        if (safe[0] == '\0' || id_cmp(cand, safe) < 0)
            tm_snprintf(safe, sizeof safe, "%s", cand);
    }
    if (safe[0] == '\0')
        goto out_groups;
    /* the newest entry over the cap, looking at 10000 at most */
    long long k = excess < 10000 ? excess : 10000;
    redisReply *range = redisCommand(c, "XRANGE %s - + COUNT %lld",
                                     t->queue, k);
    if (range == NULL || range->type != REDIS_REPLY_ARRAY ||
        range->elements == 0) {
        dead = range == NULL ? reply_error(c, range, eb,
                                           ebsize)
                             : 0;
        goto out_range;
    }
    const redisReply *lastover = range->element[range->elements - 1];
    char minid[RB_ID_MAX];
    id_next(lastover->element[0]->str, minid, sizeof minid);
    if (id_cmp(safe, minid) < 0)
        tm_snprintf(minid, sizeof minid, "%s", safe);
    redisReply *x = redisCommand(c, "XTRIM %s MINID %s", t->queue,
                                 minid);
    if (x == NULL || x->type == REDIS_REPLY_ERROR)
        dead = reply_error(c, x, eb, ebsize);
    else if (x->type == REDIS_REPLY_INTEGER && x->integer > 0)
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                     "trimmed %lld entries (maxlen %lld)", x->integer,
                     (long long)t->maxlen);
    if (x != NULL)
        freeReplyObject(x);
out_range:
    if (range != NULL)
        freeReplyObject(range);
out_groups:
    if (groups != NULL)
        freeReplyObject(groups);
out_len:
    if (len != NULL)
        freeReplyObject(len);
    return dead;
}

/* sweep_consumers removes consumers of the group that hold nothing and
 * have been idle long (daemons that stopped), so that groups do not fill
 * with dead names. Redis 7.0 counts idle time from the last delivery, so
 * a live consumer on a quiet stream looks idle too: the limit is long
 * (an hour at least), and one removed anyway is created again by its
 * next read, having nothing pending to lose. */
static int sweep_consumers(struct rb_broker *rb, struct rb_task *rt,
                           redisContext *c, char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    long long limit = t->claim_idle_ms * 10;
    if (limit < 3600000)
        limit = 3600000;
    redisReply *r = redisCommand(c, "XINFO CONSUMERS %s %s", t->queue,
                                 t->group);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = reply_error(c, r, eb, ebsize);
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    int dead = 0;
    for (size_t i = 0; i < r->elements && !dead; i++) {
        const redisReply *e = r->element[i];
        const redisReply *name = reply_field(e, "name");
        const redisReply *pend = reply_field(e, "pending");
        const redisReply *idle = reply_field(e, "idle");
        if (name == NULL || pend == NULL || idle == NULL ||
            name->type != REDIS_REPLY_STRING ||
            strcmp(name->str, rb->consumer) == 0 || pend->integer != 0 ||
            idle->integer < limit)
            continue;
        redisReply *d = redisCommand(c, "XGROUP DELCONSUMER %s %s %s",
                                     t->queue, t->group, name->str);
        if (d == NULL) {
            dead = reply_error(c, d, eb, ebsize);
        } else {
            if (d->type == REDIS_REPLY_INTEGER)
                tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                             "removed consumer '%s' (idle %lld s, nothing "
                             "pending)", name->str, idle->integer / 1000);
            freeReplyObject(d);
        }
    }
    freeReplyObject(r);
    return dead;
}

/* maintain reclaims, at most every quarter of claim_idle, entries of dead
 * consumers for this task's intake; a reclaimed batch is returned in
 * *out. Returns -1 when the connection was lost. */
static int maintain(struct rb_broker *rb, struct rb_task *rt, size_t ti,
                    size_t max, struct tm_batch **out)
{
    int64_t now = tm_now_ms();
    if (now < rt->next_maint_ms)
        return 0;
    rt->next_maint_ms = now + claim_period(rt->cfg);
    return reclaim(rb, rt, ti, max, out) != 0 ? -1 : 0;
}

static void intake_failed(struct rb_broker *rb, struct rb_task *rt,
                          const char *what)
{
    if (rt->was_up || atomic_load(&rb->base.up))
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "%s: %s; reconnecting", what, rt->errstr);
    rt->was_up = 0;
    mark_down(rb);
    atomic_store(&rt->client_id, 0);
    if (rt->rc != NULL) {
        close_conn(rt->rc);
        rt->rc = NULL;
    }
}

/* read_failed handles a failed XREADGROUP: a deleted stream or group is
 * created again on the next call (0); anything else is a lost connection
 * (-1). */
static int read_failed(struct rb_broker *rb, struct rb_task *rt, int dead)
{
    if (!dead && strncmp(rt->errstr, "NOGROUP", 7) == 0) {
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "group '%s' is gone from '%s'; creating it again",
                     rt->cfg->group, rt->cfg->queue);
        rt->group_ready = 0;
        return 0;
    }
    intake_failed(rb, rt, "XREADGROUP");
    return -1;
}

/* read_history reads this consumer's own pending entries (a restart with
 * the same instance), a page of max at a time, without blocking; once
 * none are left it sets history_done. */
static int read_history(struct rb_broker *rb, struct rb_task *rt, size_t ti,
                        size_t max, struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *hargv[] = {"XREADGROUP", "GROUP", t->group, rb->consumer,
                           "COUNT", count, "STREAMS", t->queue,
                           rt->history_from[0] ? rt->history_from : "0"};
    redisReply *r = redisCommandArgv(rt->rc, 9, hargv, NULL);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        dead = reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
        if (r != NULL)
            freeReplyObject(r);
        return read_failed(rb, rt, dead);
    }
    const redisReply *entries = NULL;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[0]->elements == 2)
        entries = r->element[0]->element[1];
    if (entries == NULL || entries->type != REDIS_REPLY_ARRAY ||
        entries->elements == 0) {
        freeReplyObject(r);
        rt->history_done = 1;
        return 0;
    }
    /* entries deleted while pending come back without fields: ack
     * them, there is nothing left to run */
    for (size_t i = 0; i < entries->elements; i++) {
        const redisReply *e = entries->element[i];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 2 &&
            e->element[1]->type != REDIS_REPLY_ARRAY) {
            const char *aargv[] = {"XACK", t->queue, t->group,
                                   e->element[0]->str};
            redisReply *a = redisCommandArgv(rt->rc, 4, aargv, NULL);
            if (a != NULL)
                freeReplyObject(a);
        }
    }
    const redisReply *last = entries->element[entries->elements - 1];
    if (last->type == REDIS_REPLY_ARRAY && last->elements >= 1 &&
        last->element[0]->type == REDIS_REPLY_STRING)
        tm_snprintf(rt->history_from, sizeof rt->history_from, "%s",
                    last->element[0]->str);
    if (entries->elements < max)
        rt->history_done = 1;
    struct tm_batch *batch = entries_batch(rt, r, entries, ti, NULL, 0);
    if (batch == NULL) {
        rt->history_done = 1;
        return 0;
    }
    /* a restarted consumer runs its pending entries again; the
     * history read counted as one more delivery */
    if (set_attempts(rb, rt, batch) != 0) {
        for (size_t i = 0; i < batch->n; i++)
            tm_msg_release(&batch->msgs[i]);
        intake_failed(rb, rt, "XPENDING");
        return -1;
    }
    *out = batch;
    return (int)batch->n;
}

static int rb_fetch(struct tm_broker *b, size_t ti, size_t max,
                    int timeout_ms, struct tm_batch **out)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    struct rb_task *rt = &rb->tasks[ti];
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    *out = NULL;
    collect(rt);
    if (max == 0)
        return 0;
    if (max > RB_ACK_CHUNK)
        max = RB_ACK_CHUNK;

    if (rt->rc == NULL) {
        rt->rc = rb_connect(rb, (int64_t)timeout_ms + RB_BLOCK_SLACK_MS,
                            rt->errstr, sizeof rt->errstr);
        if (rt->rc == NULL) {
            intake_failed(rb, rt, "connect");
            return -1;
        }
        rt->group_ready = 0;
        /* remember the connection's id: wake() unblocks it by that */
        redisReply *id = redisCommand(rt->rc, "CLIENT ID");
        atomic_store(&rt->client_id, id != NULL &&
                                         id->type == REDIS_REPLY_INTEGER
                                     ? id->integer
                                     : 0);
        if (id != NULL)
            freeReplyObject(id);
    }
    if (!rt->group_ready) {
        if (ensure_group(rt->rc, t, rt->errstr, sizeof rt->errstr,
                         &dead) != 0) {
            intake_failed(rb, rt, "XGROUP CREATE");
            return -1;
        }
        rt->group_ready = 1;
        if (!rt->was_up)
            tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                         "consuming stream '%s' as %s/%s", t->queue,
                         t->group, rb->consumer);
        rt->was_up = 1;
        mark_up(rb);
    }

    /* 1. retries that are due: claim them back (delivery count + 1) */
    struct rb_retry due[64];
    int64_t next_ms = 0;
    size_t nd = heap_pop_due(rt, tm_now_ms(), max < 64 ? max : 64, due,
                             &next_ms);
    if (nd > 0) {
        const char *argv[5 + 64];
        argv[0] = "XCLAIM";
        argv[1] = t->queue;
        argv[2] = t->group;
        argv[3] = rb->consumer;
        argv[4] = "0";
        for (size_t i = 0; i < nd; i++)
            argv[5 + i] = due[i].id;
        redisReply *r = redisCommandArgv(rt->rc, (int)(5 + nd), argv, NULL);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            dead = reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
            if (r != NULL)
                freeReplyObject(r);
            /* keep the retries for after the reconnect */
            for (size_t i = 0; i < nd; i++)
                heap_push(rt, &due[i]);
            if (dead) {
                intake_failed(rb, rt, "XCLAIM");
                return -1;
            }
            tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                         "XCLAIM: %s", rt->errstr);
            return 0;
        }
        struct tm_batch *batch = entries_batch(rt, r, r, ti, due, nd);
        if (batch == NULL)
            return 0;
        *out = batch;
        return (int)batch->n;
    }

    /* 2. periodic work: keep own entries, reclaim dead consumers' */
    if (rt->history_done) {
        struct tm_batch *rec = NULL;
        if (maintain(rb, rt, ti, max, &rec) != 0) {
            intake_failed(rb, rt, "maintenance");
            return -1;
        }
        if (rec != NULL) {
            *out = rec;
            return (int)rec->n;
        }
    }

    /* 3. this consumer's own pending entries, once after start (not
     * after a reload: the previous configuration is still running them) */
    if (b->resumed)
        rt->history_done = 1;
    if (!rt->history_done)
        return read_history(rb, rt, ti, max, out);

    /* 4. new entries, blocking until the next retry is due at most */
    char count[24], block[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    int64_t bl = timeout_ms > 0 ? timeout_ms : 1;
    if (next_ms > 0) {
        int64_t until = next_ms - tm_now_ms();
        if (until < bl)
            bl = until > 1 ? until : 1;
    }
    tm_snprintf(block, sizeof block, "%lld", (long long)bl);
    const char *argv[] = {"XREADGROUP", "GROUP", t->group, rb->consumer,
                          "COUNT", count, "BLOCK", block, "STREAMS",
                          t->queue, ">"};
    redisReply *r = redisCommandArgv(rt->rc, 11, argv, NULL);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        dead = reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
        if (r != NULL)
            freeReplyObject(r);
        return read_failed(rb, rt, dead);
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
        r->element[0]->type != REDIS_REPLY_ARRAY ||
        r->element[0]->elements != 2 ||
        r->element[0]->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r); /* nil: the block timed out */
        return 0;
    }
    struct tm_batch *batch =
        entries_batch(rt, r, r->element[0]->element[1], ti, NULL, 0);
    if (batch == NULL)
        return 0;
    *out = batch;
    return (int)batch->n;
}

/* ---- settlement ----------------------------------------------------- */

static void argv_reserve(struct rb_broker *rb, size_t n)
{
    if (n <= rb->argcap)
        return;
    size_t cap = rb->argcap ? rb->argcap : 64;
    while (cap < n)
        cap *= 2;
    rb->argv = tm_realloc(rb->argv, cap * sizeof *rb->argv);
    rb->argvlen = tm_realloc(rb->argvlen, cap * sizeof *rb->argvlen);
    rb->argcap = cap;
}

static int wc_ready(struct rb_broker *rb, char *buf, size_t size)
{
    if (rb->wc != NULL)
        return 0;
    rb->wc = rb_connect(rb, RB_COMMAND_TIMEOUT_MS, buf, size);
    if (rb->wc == NULL) {
        mark_down(rb);
        return -1;
    }
    return 0;
}

static void wc_lost(struct rb_broker *rb, const char *what, const char *why)
{
    if (rb->wc_was_up)
        tm_log_warn(SRC, "%s: %s; reconnecting", what, why);
    rb->wc_was_up = 0;
    mark_down(rb);
    if (rb->wc != NULL) {
        close_conn(rb->wc);
        rb->wc = NULL;
    }
}

/* append_dead queues the dead-letter script for m. */
static void append_dead(struct rb_broker *rb, struct tm_msg *m)
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    char attempts[24], failed_at[24];
    tm_snprintf(attempts, sizeof attempts, "%u",
                m->outcome == TM_OUT_INVALID ? 0u : m->attempt);
    tm_snprintf(failed_at, sizeof failed_at, "%lld",
                (long long)tm_wall_ms());
    const char *err = m->error != NULL ? m->error : "";
    const char *argv[] = {"EVAL", dead_script, "2", t->queue, t->dead_letter,
                          t->group, m->id,
                          "body", m->body != NULL ? m->body : "",
                          "task", t->name,
                          "error", err,
                          "attempts", attempts,
                          "failed_at", failed_at,
                          "origin_id", m->id};
    size_t lens[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
        lens[i] = strlen(argv[i]);
    lens[8] = m->body != NULL ? m->body_len : 0;
    redisAppendCommandArgv(rb->wc, (int)(sizeof argv / sizeof argv[0]),
                           argv, lens);
}

static size_t rb_settle(struct tm_broker *b, struct tm_msg **msgs,
                        size_t n)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    char eb[256];

    /* retries need no command: the entry stays pending on this consumer
     * and is claimed again when due (see rb_fetch). The messages that do
     * (acks, dead letters) move to the front; replies are matched to them
     * by position. */
    size_t work = 0;
    for (size_t i = 0; i < n; i++) {
        struct tm_msg *m = msgs[i];
        if (m->settle == TM_SETTLE_RETRY) {
            struct rb_retry e = {.due_ms = tm_now_ms() + m->retry_delay_ms,
                                 .attempt = m->attempt + 1};
            tm_snprintf(e.id, sizeof e.id, "%s", m->id);
            heap_push(&rb->tasks[m->task_index], &e);
        } else if (m->settle == TM_SETTLE_ACK ||
                   m->settle == TM_SETTLE_DEAD) {
            msgs[i] = msgs[work];
            msgs[work++] = m;
        }
    }
    if (work == 0)
        return 0;
    if (wc_ready(rb, eb, sizeof eb) != 0)
        goto lost;

    /* one pipeline: dead letters, then one XACK per task per chunk */
    size_t ncmds = 0;
    for (size_t i = 0; i < work; i++) {
        if (msgs[i]->settle == TM_SETTLE_DEAD) {
            append_dead(rb, msgs[i]);
            ncmds++;
        }
    }
    size_t ndead = ncmds;
    for (size_t ti = 0; ti < rb->ntasks; ti++) {
        const struct tm_cfg_task *t = rb->tasks[ti].cfg;
        size_t argc = 0;
        argv_reserve(rb, 3 + RB_ACK_CHUNK);
        for (size_t i = 0; i <= work; i++) {
            int flush = i == work || argc == 3 + RB_ACK_CHUNK;
            if (flush && argc > 3) {
                redisAppendCommandArgv(rb->wc, (int)argc, rb->argv,
                                       rb->argvlen);
                ncmds++;
                argc = 0;
            }
            if (i == work)
                break;
            struct tm_msg *m = msgs[i];
            if (m->task_index != ti || m->settle != TM_SETTLE_ACK)
                continue;
            if (argc == 0) {
                rb->argv[0] = "XACK";
                rb->argvlen[0] = 4;
                rb->argv[1] = t->queue;
                rb->argvlen[1] = strlen(t->queue);
                rb->argv[2] = t->group;
                rb->argvlen[2] = strlen(t->group);
                argc = 3;
            }
            rb->argv[argc] = m->id;
            rb->argvlen[argc] = m->id_len;
            argc++;
        }
    }

    /* replies come in the order of the commands: the dead letters first,
     * in the order of msgs, then the acks */
    size_t next_dead = 0;
    for (size_t c = 0; c < ncmds; c++) {
        void *vr = NULL;
        if (redisGetReply(rb->wc, &vr) != REDIS_OK) {
            tm_snprintf(eb, sizeof eb, "%s", rb->wc->errstr);
            goto lost;
        }
        redisReply *r = vr;
        struct tm_msg *m = NULL;
        if (c < ndead) {
            while (msgs[next_dead]->settle != TM_SETTLE_DEAD)
                next_dead++;
            m = msgs[next_dead++];
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* a dead letter the broker refused stays pending, to be
             * claimed again; an XACK error is only logged */
            tm_log_write(TM_LOG_ERR, SRC,
                         m != NULL ? rb->tasks[m->task_index].cfg->name
                                   : NULL,
                         m != NULL ? m->id : NULL, "%s failed: %s",
                         m != NULL ? "dead-letter" : "XACK", r->str);
        }
        freeReplyObject(r);
    }
    if (!rb->wc_was_up) {
        rb->wc_was_up = 1;
        mark_up(rb);
    }
    return 0;

lost:
    wc_lost(rb, "settle", eb);
    return work; /* msgs[0..work): none confirmed */
}

/* rb_tick is the settle thread's periodic upkeep, on its own connection
 * so that a busy intake (blocked on a full pool) cannot delay it: keep
 * this consumer's long-pending entries from being reclaimed, trim capped
 * streams, sweep dead consumers. */
static void rb_tick(struct tm_broker *b)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    char eb[256];
    int64_t now = tm_now_ms();
    for (size_t i = 0; i < rb->ntasks; i++) {
        struct rb_task *rt = &rb->tasks[i];
        if (now < rt->next_tick_ms)
            continue;
        if (wc_ready(rb, eb, sizeof eb) != 0)
            return;
        rt->next_tick_ms = now + claim_period(rt->cfg);
        rt->tick_rounds++;
        int dead = refresh_own(rb, rt, rb->wc, eb, sizeof eb);
        if (!dead && rt->cfg->maxlen > 0 && rt->tick_rounds % 4 == 1)
            dead = trim(rb, rt, rb->wc, eb, sizeof eb);
        if (!dead && rt->tick_rounds % 64 == 1)
            dead = sweep_consumers(rb, rt, rb->wc, eb, sizeof eb);
        if (dead) {
            wc_lost(rb, "upkeep", eb);
            return;
        }
    }
}

/* rb_tick_ms is how often rb_tick wants to run. */
static int64_t rb_tick_ms(struct tm_broker *b)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    int64_t ms = 1000;
    for (size_t i = 0; i < rb->ntasks; i++) {
        int64_t p = claim_period(rb->tasks[i].cfg);
        if (p < ms)
            ms = p;
    }
    return ms;
}

/* ---- monitoring: queue depths ---------------------------------------- */

/* Command timeout of the depth connection: a slow answer only delays the
 * next refresh of /metrics, never a task. */
#define RB_DEPTH_TIMEOUT_MS 2000

/* The depth connection is separate from the intake and settle ones, so
 * that monitoring reads never queue behind them or delay them. One per
 * process (struct rb_broker has no room for it), opened on first use by
 * the broker that uses it; the mutex serves one caller at a time. */
static struct {
    pthread_mutex_t mu;
    redisContext *c;
    const struct rb_broker *owner;
} rb_depth_conn = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL};

/* group_counts finds the task's group in an XINFO GROUPS reply and sets
 * *depth from its lag (entries not yet delivered to the group; Redis 7.0
 * and later, nil when Redis cannot compute it) and *pending. Returns 0
 * when the group is not there. */
static int group_counts(const redisReply *groups, const char *group,
                        long long *depth, long long *pending)
{
    for (size_t i = 0; i < groups->elements; i++) {
        const redisReply *name = reply_field(groups->element[i], "name");
        if (name == NULL || name->type != REDIS_REPLY_STRING ||
            strcmp(name->str, group) != 0)
            continue;
        const redisReply *lag = reply_field(groups->element[i], "lag");
        const redisReply *pend = reply_field(groups->element[i], "pending");
        if (lag != NULL && lag->type == REDIS_REPLY_INTEGER)
            *depth = lag->integer;
        if (pend != NULL && pend->type == REDIS_REPLY_INTEGER)
            *pending = pend->integer;
        return 1;
    }
    return 0;
}

static int rb_depth(struct tm_broker *b, size_t ti, long long *depth,
                    long long *pending, long long *dlq_depth)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    redisReply *r[3] = {NULL, NULL, NULL};
    char eb[256];
    int rc = -1;
    pthread_mutex_lock(&rb_depth_conn.mu);
    if (rb_depth_conn.c != NULL &&
        (ti == TM_BROKER_DEPTH_CLOSE || rb_depth_conn.owner != rb)) {
        redisFree(rb_depth_conn.c);
        rb_depth_conn.c = NULL;
        rb_depth_conn.owner = NULL;
    }
    if (ti == TM_BROKER_DEPTH_CLOSE) {
        rc = 0;
        goto out;
    }
    *depth = *pending = *dlq_depth = -1;
    if (ti >= rb->ntasks)
        goto out;
    if (rb_depth_conn.c == NULL) {
        rb_depth_conn.c = rb_connect(rb, RB_DEPTH_TIMEOUT_MS, eb, sizeof eb);
        if (rb_depth_conn.c == NULL) {
            tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth: %s", eb);
            goto out;
        }
        rb_depth_conn.owner = rb;
    }
    redisContext *c = rb_depth_conn.c;
    const struct tm_cfg_task *t = rb->tasks[ti].cfg;
    /* one round trip for the three reads */
    redisAppendCommand(c, "XINFO GROUPS %s", t->queue);
    redisAppendCommand(c, "XLEN %s", t->queue);
    redisAppendCommand(c, "XLEN %s", t->dead_letter);
    for (int i = 0; i < 3; i++) {
        void *reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK || reply == NULL) {
            reply_error(c, NULL, eb, sizeof eb);
            tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL, "depth: %s", eb);
            redisFree(c);
            rb_depth_conn.c = NULL;
            rb_depth_conn.owner = NULL;
            goto out;
        }
        r[i] = reply;
    }
    long long len = r[1]->type == REDIS_REPLY_INTEGER ? r[1]->integer : -1;
    if (r[0]->type == REDIS_REPLY_ARRAY) {
        if (!group_counts(r[0], t->group, depth, pending)) {
            /* no group yet: nothing was delivered to it */
            *depth = len;
            *pending = 0;
        }
    } else if (r[0]->type == REDIS_REPLY_ERROR && len == 0) {
        /* no such key: an empty queue */
        *depth = 0;
        *pending = 0;
    }
    if (r[2]->type == REDIS_REPLY_INTEGER)
        *dlq_depth = r[2]->integer;
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        if (r[i] != NULL)
            freeReplyObject(r[i]);
    pthread_mutex_unlock(&rb_depth_conn.mu);
    return rc;
}

/* ---- lifecycle ------------------------------------------------------ */

static struct tm_broker *rb_create(const struct tm_cfg *cfg)
{
    struct rb_broker *rb = tm_calloc(1, sizeof *rb);
    rb->base.ops = &tm_broker_redis_ops;
    rb->base.cfg = cfg;
    rb->ntasks = cfg->ntasks;
    rb->consumer = cfg->instance;
    rb->tasks = tm_calloc(cfg->ntasks ? cfg->ntasks : 1, sizeof *rb->tasks);
    for (size_t i = 0; i < cfg->ntasks; i++) {
        rb->tasks[i].cfg = &cfg->tasks[i];
        pthread_mutex_init(&rb->tasks[i].mu, NULL);
    }
    return &rb->base;
}

static int rb_connect_all(struct tm_broker *b)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    char eb[256];
    int dead;
    if (wc_ready(rb, eb, sizeof eb) != 0) {
        tm_broker_set_error(b, ECONNREFUSED, "%s", eb);
        return -1;
    }
    for (size_t i = 0; i < rb->ntasks; i++) {
        if (ensure_group(rb->wc, rb->tasks[i].cfg, eb, sizeof eb,
                         &dead) != 0) {
            tm_broker_set_error(b, EIO, "task '%s': XGROUP CREATE %s %s: %s",
                                rb->tasks[i].cfg->name,
                                rb->tasks[i].cfg->queue,
                                rb->tasks[i].cfg->group, eb);
            if (dead)
                wc_lost(rb, "connect", eb);
            return -1;
        }
    }
    rb->wc_was_up = 1;
    mark_up(rb);
    return 0;
}

/* rb_wake ends blocked XREADGROUP calls at once (CLIENT UNBLOCK, as if
 * their BLOCK time ran out), from a short connection of its own. */
static void rb_wake(struct tm_broker *b)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    char eb[256];
    redisContext *c = NULL;
    for (size_t i = 0; i < rb->ntasks; i++) {
        long long id = atomic_load(&rb->tasks[i].client_id);
        if (id <= 0)
            continue;
        if (c == NULL) {
            c = rb_connect(rb, 1000, eb, sizeof eb);
            if (c == NULL)
                return; /* the reads end by their BLOCK time anyway */
        }
        redisReply *r = redisCommand(c, "CLIENT UNBLOCK %lld", id);
        if (r != NULL)
            freeReplyObject(r);
    }
    if (c != NULL)
        redisFree(c);
}

static void rb_destroy(struct tm_broker *b)
{
    if (b == NULL)
        return;
    struct rb_broker *rb = (struct rb_broker *)b;
    for (size_t i = 0; i < rb->ntasks; i++) {
        collect(&rb->tasks[i]);
        if (rb->tasks[i].rc != NULL)
            close_conn(rb->tasks[i].rc);
        pthread_mutex_destroy(&rb->tasks[i].mu);
        tm_free(rb->tasks[i].heap);
    }
    if (rb->wc != NULL)
        close_conn(rb->wc);
    tm_free(rb->tasks);
    tm_free(rb->argv);
    tm_free(rb->argvlen);
    tm_free(rb);
}

/* ---- CLI: publish and dead letters ------------------------------------ */

static redisReply *cli_command(struct rb_broker *rb, int argc,
                               const char **argv, const size_t *lens)
{
    char eb[256];
    if (wc_ready(rb, eb, sizeof eb) != 0) {
        tm_broker_set_error(&rb->base, ECONNREFUSED, "%s", eb);
        return NULL;
    }
    int dead;
    redisReply *r = rb_command(rb->wc, argc, argv, lens, eb, sizeof eb,
                               &dead);
    if (r == NULL)
        tm_broker_set_error(&rb->base, dead ? EIO : EINVAL, "%s %s: %s",
                            argv[0], argc > 1 ? argv[1] : "", eb);
    return r;
}

static int rb_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *body, size_t len, int priority, char *id,
                      size_t idlen)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    (void)priority; /* refused by the config loader on Redis */
    const char *argv[] = {"XADD", t->queue, "*", "body", body};
    size_t lens[] = {4, strlen(t->queue), 1, 4, len};
    redisReply *r = cli_command(rb, 5, argv, lens);
    if (r == NULL)
        return -1;
    tm_snprintf(id, idlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return 0;
}

static char *field_dup(const redisReply *f, const char *key)
{
    if (f == NULL || f->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (f->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(f->element[i]->str, key) == 0 &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            return tm_strndup(f->element[i + 1]->str,
                              f->element[i + 1]->len);
    }
    return NULL;
}

static void entry_to_dlq(const redisReply *e, struct tm_dlq_entry *d)
{
    d->id = tm_strdup(e->element[0]->str);
    const redisReply *f = e->element[1];
    d->origin_id = field_dup(f, "origin_id");
    d->task = field_dup(f, "task");
    d->error = field_dup(f, "error");
    d->body = field_dup(f, "body");
    char *s = field_dup(f, "attempts");
    d->attempts = s != NULL ? strtol(s, NULL, 10) : 0;
    tm_free(s);
    s = field_dup(f, "failed_at");
    d->failed_at = s != NULL ? strtoll(s, NULL, 10) : 0;
    tm_free(s);
}

static int rb_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *argv[] = {"XREVRANGE", t->dead_letter, "+", "-", "COUNT",
                          count};
    redisReply *r = cli_command(rb, 6, argv, NULL);
    *out = NULL;
    *n = 0;
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        struct tm_dlq_entry *e = tm_calloc(r->elements, sizeof *e);
        size_t k = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *x = r->element[i];
            if (x->type == REDIS_REPLY_ARRAY && x->elements == 2)
                entry_to_dlq(x, &e[k++]);
        }
        *out = e;
        *n = k;
    }
    freeReplyObject(r);
    return 0;
}

static long rb_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    long moved = 0;
    /* replay up to the newest entry there is now: a message that fails
     * again is dead-lettered again, and must not be replayed twice by the
     * same command */
    char last[RB_ID_MAX], from[RB_ID_MAX + 1];
    if (id != NULL) {
        tm_snprintf(last, sizeof last, "%s", id);
        tm_snprintf(from, sizeof from, "%s", id);
    } else {
        const char *largv[] = {"XREVRANGE", t->dead_letter, "+", "-",
                               "COUNT", "1"};
        redisReply *r = cli_command(rb, 6, largv, NULL);
        if (r == NULL)
            return -1;
        int empty = r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
                    r->element[0]->type != REDIS_REPLY_ARRAY;
        if (!empty)
            tm_snprintf(last, sizeof last, "%s",
                        r->element[0]->element[0]->str);
        freeReplyObject(r);
        if (empty)
            return 0;
        tm_snprintf(from, sizeof from, "-");
    }
    for (;;) {
        const char *argv[] = {"XRANGE", t->dead_letter, from, last, "COUNT",
                              "100"};
        redisReply *r = cli_command(rb, 6, argv, NULL);
        if (r == NULL)
            return -1;
        size_t got = r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
        for (size_t i = 0; i < got; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2)
                continue;
            /* the body as stored, every byte of it */
            const redisReply *body = reply_field(e->element[1], "body");
            const char *sargv[] = {"EVAL", replay_script, "2", t->queue,
                                   t->dead_letter, e->element[0]->str,
                                   body != NULL ? body->str : ""};
            size_t lens[7];
            for (size_t k = 0; k < 6; k++)
                lens[k] = strlen(sargv[k]);
            lens[6] = body != NULL ? body->len : 0;
            redisReply *x = cli_command(rb, 7, sargv, lens);
            if (x == NULL) {
                freeReplyObject(r);
                return -1;
            }
            freeReplyObject(x);
            moved++;
            /* the next page starts after this entry */
            tm_snprintf(from, sizeof from, "(%s", e->element[0]->str);
        }
        freeReplyObject(r);
        if (id != NULL || got < 100)
            break;
    }
    return moved;
}

static long rb_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id)
{
    struct rb_broker *rb = (struct rb_broker *)b;
    if (id != NULL) {
        const char *argv[] = {"XDEL", t->dead_letter, id};
        redisReply *r = cli_command(rb, 3, argv, NULL);
        if (r == NULL)
            return -1;
        long n = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
        freeReplyObject(r);
        return n;
    }
    const char *largv[] = {"XLEN", t->dead_letter};
    redisReply *r = cli_command(rb, 2, largv, NULL);
    if (r == NULL)
        return -1;
    long n = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
    freeReplyObject(r);
    const char *dargv[] = {"DEL", t->dead_letter};
    r = cli_command(rb, 2, dargv, NULL);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return n;
}

const struct tm_broker_ops tm_broker_redis_ops = {
    .kind = "redis",
    .create = rb_create,
    .connect = rb_connect_all,
    .fetch = rb_fetch,
    .settle = rb_settle,
    .wake = rb_wake,
    .tick = rb_tick,
    .tick_ms = rb_tick_ms,
    .publish = rb_publish,
    .dlq_list = rb_dlq_list,
    .dlq_replay = rb_dlq_replay,
    .dlq_purge = rb_dlq_purge,
    .destroy = rb_destroy,
    .depth = rb_depth,
};
