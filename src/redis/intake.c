/* intake.c - Redis intake: due retries, reclaim, own history, new entries.
 *
 * No read ever holds a body over max_payload. Every reply is read through
 * tm_rconn_get_reply_capped, which drops a bulk string over max_payload
 * as it comes off the socket and leaves its reason in its place (hiredis
 * reads a whole reply, and RESP gives an entry's size only in the header
 * of its bulk string: the filter acts there). The claim scripts (due
 * retries, reclaim, history) strip such bodies inside Redis already, so
 * they do not even cross the connection, and stop their reply at
 * TM_REDIS_READ_BYTES. New entries come from plain XREADGROUP (fast; one
 * reply holds at most COUNT entries of max_payload each, the bound the
 * messages queued in the daemon have anyway). An oversized entry becomes
 * an invalid message with its reason, dead-lettered at once; the
 * dead-letter script copies its body inside Redis. */
#include "redis/redis.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* The retry set is looked at on every fetch when a retry is due, else at
 * least this often (other daemons schedule retries too). */
#define TM_REDIS_DUE_RECHECK_MS 1000

/* reclaim_script takes entries idle past ARGV[7] ms on any consumer,
 * scanning the group's pending list from ARGV[6] ("-" or "(id"), and
 * skips entries waiting in the retry set: they are nobody's to run until
 * they are due. XCLAIM checks the idle time again, so an entry whose
 * owner refreshed it meanwhile is left alone. Returns {cursor, out}. */
static const char reclaim_script[] = TM_REDIS_LUA_TAKE
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE',\n"
    "  tonumber(ARGV[7]), ARGV[6], '+', count)\n"
    "local cursor = '-'\n"
    "if #p >= count then cursor = '(' .. p[#p][1] end\n"
    "local last = nil\n"
    "for _, e in ipairs(p) do\n"
    "  if full() then cursor = '(' .. last break end\n"
    "  if not redis.call('ZSCORE', KEYS[2], e[1]) then\n"
    "    claim(e[1], tonumber(ARGV[7]))\n"
    "  end\n"
    "  last = e[1]\n"
    "end\n"
    "return {cursor, out}\n";

/* history_script takes this consumer's own pending entries again after a
 * restart, from ARGV[6] ("-" or "(id") on, skipping those waiting in the
 * retry set. Returns {cursor, out}, cursor "" when all were seen. */
static const char history_script[] = TM_REDIS_LUA_TAKE
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[6], '+',\n"
    "  count, ARGV[2])\n"
    "local cursor = ''\n"
    "if #p >= count then cursor = '(' .. p[#p][1] end\n"
    "for _, e in ipairs(p) do\n"
    "  if full() then cursor = '(' .. e[1] break end\n"
    "  if not redis.call('ZSCORE', KEYS[2], e[1]) then claim(e[1], 0) end\n"
    "end\n"
    "return {cursor, out}\n";

static void free_batch(struct tm_batch *b)
{
    struct tm_redis_held *h = b->owner;
    freeReplyObject(h->reply);
    tm_free(h);
    tm_free(b);
}

/* cb_release_reply runs on whichever thread settles a batch's last
 * message (the settle thread, mostly). The batch leaves the task's held
 * list at once: none of its ids is this process's any more. The reply
 * tree was allocated by the task's intake thread, entry by entry; freeing
 * it there again is much cheaper for malloc than freeing it across
 * threads, so the batch goes on the task's garbage stack, which the
 * intake empties before its next read. The stack links batches through
 * their first message. */
static void cb_release_reply(struct tm_batch *b)
{
    struct tm_redis_task *rt = b->msgs[0].bctx;
    struct tm_redis_held *h = b->owner;
    pthread_mutex_lock(&rt->held_mu);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        rt->held = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
    pthread_mutex_unlock(&rt->held_mu);
    struct tm_msg *head = &b->msgs[0];
    struct tm_msg *old = atomic_load_explicit(&rt->garbage,
                                              memory_order_relaxed);
    do {
        head->next = old;
    } while (!atomic_compare_exchange_weak_explicit(
        &rt->garbage, &old, head, memory_order_release,
        memory_order_relaxed));
}

/* tm_redis_collect frees the batches settled since the last read. */
void tm_redis_collect(struct tm_redis_task *rt)
{
    struct tm_msg *m = atomic_exchange_explicit(&rt->garbage, NULL,
                                                memory_order_acquire);
    while (m != NULL) {
        struct tm_msg *next = m->next;
        free_batch(m->batch);
        m = next;
    }
}

/* fill_msg points m at one entry: [id, [field, value, ...]] as Redis
 * reads it, or [id, fields, reason or nil, deliveries] as the take
 * scripts return it (reason: the body was stripped). */
static int fill_msg(struct tm_msg *m, const redisReply *e)
{
    if (e == NULL || e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    m->id = e->element[0]->str;
    m->id_len = e->element[0]->len;
    m->attempt = 1;
    if (e->elements >= 4 && e->element[3]->type == REDIS_REPLY_INTEGER &&
        e->element[3]->integer > 0)
        m->attempt = (unsigned)e->element[3]->integer;
    if (e->elements >= 3 && e->element[2]->type == REDIS_REPLY_STRING) {
        m->invalid = e->element[2]->str;
        return 0;
    }
    const redisReply *f = e->element[1];
    if (f->type != REDIS_REPLY_ARRAY) {
        m->invalid = "the entry has no fields";
        return 0;
    }
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && k->len == 4 &&
            memcmp(k->str, "body", 4) == 0 && v->type == REDIS_REPLY_STRING) {
            if (v->len > sizeof TM_REDIS_OVERSIZE - 1 &&
                memcmp(v->str, TM_REDIS_OVERSIZE,
                       sizeof TM_REDIS_OVERSIZE - 1) == 0) {
                /* dropped by the capped read: the reason is left */
                m->invalid = v->str + sizeof TM_REDIS_OVERSIZE - 1;
                return 0;
            }
            m->body = v->str;
            m->body_len = v->len;
            return 0;
        }
    }
    m->invalid = "the entry has no body field";
    return 0;
}

/* entries_batch makes a batch of the entries array, owning reply, and
 * puts it on the task's held list. Entries that are not well-formed are
 * skipped. Returns NULL (reply freed) when empty. */
static struct tm_batch *entries_batch(struct tm_redis_task *rt,
                                      redisReply *reply,
                                      const redisReply *entries,
                                      size_t task_index)
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
    struct tm_redis_held *h = tm_calloc(1, sizeof *h + n);
    h->reply = reply;
    h->batch = b;
    b->owner = h;
    b->release = cb_release_reply;
    size_t k = 0;
    int64_t now = tm_now_ns();
    for (size_t i = 0; i < entries->elements && k < n; i++) {
        struct tm_msg *m = &b->msgs[k];
        if (fill_msg(m, entries->element[i]) != 0)
            continue;
        m->task_index = task_index;
        m->bctx = rt;
        m->t_recv_ns = now;
        k++;
    }
    if (k == 0) {
        free_batch(b);
        return NULL;
    }
    if (k < n) {
        /* malformed entries were skipped: shrink the count */
        atomic_store(&b->refs, (unsigned)k);
        b->n = k;
    }
    pthread_mutex_lock(&rt->held_mu);
    h->next = rt->held;
    if (rt->held != NULL)
        rt->held->prev = h;
    rt->held = h;
    pthread_mutex_unlock(&rt->held_mu);
    return b;
}

static void intake_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                          const char *what)
{
    if (rt->was_up || atomic_load(&rb->base.up))
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "%s: %s; reconnecting", what, rt->errstr);
    rt->was_up = 0;
    tm_redis_mark_down(rb);
    atomic_store(&rt->client_id, 0);
    if (rt->rc != NULL) {
        tm_rconn_close(rt->rc);
        rt->rc = NULL;
    }
}

/* read_failed handles a failed read: a deleted stream or group is
 * created again on the next call (0); anything else is a lost connection
 * or a broker refusing the read (-1: reconnect with backoff). */
static int read_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                       const char *what)
{
    if (strstr(rt->errstr, "NOGROUP") != NULL) {
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "group '%s' is gone from '%s'; creating it again",
                     rt->cfg->group, rt->cfg->queue);
        rt->group_ready = 0;
        return 0;
    }
    intake_failed(rb, rt, what);
    return -1;
}

/* intake_command runs one command on the intake connection, reading its
 * reply capped at max_payload. Returns the reply, or NULL with the reason
 * in rt->errstr (and *dead = 1 when the connection is unusable); an
 * error reply is returned as NULL too. */
static redisReply *intake_command(struct tm_redis_task *rt, int argc,
                                  const char **argv, int *dead)
{
    redisReply *r = NULL;
    *dead = 0;
    if (tm_rconn_append_argv(rt->rc, argc, argv, NULL) != 0 ||
        tm_rconn_get_reply_capped(rt->rc, rt->cfg->max_payload, &r) != 0) {
        *dead = tm_redis_reply_error(rt->rc, NULL, rt->errstr,
                                     sizeof rt->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* take runs one take script (see TM_REDIS_LUA_TAKE) for at most max
 * entries, arg being its ARGV[6] and arg2 (or NULL) its ARGV[7]. The
 * script's first answer goes to aux (size auxsize). Returns the count of
 * the batch set in *out, or -1 (connection lost or read refused). */
static int take(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
                const char *script, const char *what, size_t max,
                const char *arg, const char *arg2, char *aux,
                size_t auxsize, struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    char maxp[24], budget[24], count[24];
    tm_snprintf(maxp, sizeof maxp, "%zu", t->max_payload);
    tm_snprintf(budget, sizeof budget, "%d", TM_REDIS_READ_BYTES);
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *argv[] = {"EVAL", script, "2", t->queue, rt->retry_key,
                          t->group, rb->consumer, maxp, budget, count,
                          arg, arg2};
    int argc = arg2 != NULL ? 12 : 11;
    int dead = 0;
    redisReply *r = intake_command(rt, argc, argv, &dead);
    if (r == NULL && dead) {
        intake_failed(rb, rt, what);
        return -1;
    }
    if (r == NULL)
        return read_failed(rb, rt, what);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        tm_snprintf(rt->errstr, sizeof rt->errstr, "unexpected reply");
        intake_failed(rb, rt, what);
        return -1;
    }
    if (aux != NULL)
        tm_snprintf(aux, auxsize, "%s",
                    r->element[0]->type == REDIS_REPLY_STRING
                        ? r->element[0]->str
                        : "");
    struct tm_batch *b = entries_batch(rt, r, r->element[1], ti);
    if (b == NULL)
        return 0;
    *out = b;
    return (int)b->n;
}

/* due_retries claims the retries that are due, when one may be: on the
 * time the last look or the settle thread announced, and at least every
 * TM_REDIS_DUE_RECHECK_MS. Sets rt->next_due_ms. */
static int due_retries(struct tm_redis *rb, struct tm_redis_task *rt,
                       size_t ti, size_t max, struct tm_batch **out)
{
    int64_t now = tm_now_ms();
    if (now < rt->next_due_ms &&
        now < atomic_load(&rt->retry_hint_ms))
        return 0;
    /* A hint noted after this store stays for the next look; one noted
     * between the load above and this store is lost, but its ZADD came
     * before the note, so the script below sees that retry (its due time
     * is in the script's answer). */
    atomic_store(&rt->retry_hint_ms, LLONG_MAX);
    char wait[32];
    int n = take(rb, rt, ti, tm_redis_due_script, "retry claim", max, "",
                 NULL, wait, sizeof wait, out);
    if (n < 0) {
        atomic_store(&rt->retry_hint_ms, now); /* look again after it */
        return -1;
    }
    long long w = strtoll(wait, NULL, 10);
    if (w < 0 || w > TM_REDIS_DUE_RECHECK_MS)
        w = TM_REDIS_DUE_RECHECK_MS;
    /* more may be due at once when the reply was full */
    rt->next_due_ms = (size_t)n >= max ? now : tm_now_ms() + w;
    if (n > 0)
        tm_log_write(TM_LOG_DEBUG, SRC, rt->cfg->name, NULL,
                     "claimed %d due retries", n);
    return n;
}

/* reclaim takes, at most every quarter of claim_idle, entries idle past
 * claim_idle on other (dead) consumers, continuing its scan where the
 * last round stopped. */
static int reclaim(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
                   size_t max, struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    int64_t now = tm_now_ms();
    if (now < rt->next_maint_ms)
        return 0;
    char idle[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)t->claim_idle_ms);
    if (rt->claim_cursor[0] == '\0')
        tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "-");
    char cursor[TM_REDIS_ID_MAX + 1];
    int n = take(rb, rt, ti, reclaim_script, "reclaim", max,
                 rt->claim_cursor, idle, cursor, sizeof cursor, out);
    if (n < 0)
        return -1;
    tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "%s",
                cursor[0] != '\0' ? cursor : "-");
    /* a full page: go on at once, else wait for the next round */
    if (strcmp(rt->claim_cursor, "-") == 0)
        rt->next_maint_ms = now + tm_redis_claim_period(t);
    if (n > 0)
        tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                     "reclaimed %d entries pending over %lld ms on other "
                     "consumers", n, (long long)t->claim_idle_ms);
    return n;
}

/* read_history takes this consumer's own pending entries again (a restart
 * with the same instance), a page at a time; once none are left it sets
 * history_done. */
static int read_history(struct tm_redis *rb, struct tm_redis_task *rt,
                        size_t ti, size_t max, struct tm_batch **out)
{
    char cursor[TM_REDIS_ID_MAX + 1];
    const char *from = rt->history_from[0] ? rt->history_from : "-";
    int n = take(rb, rt, ti, history_script, "history read", max, from,
                 NULL, cursor, sizeof cursor, out);
    if (n < 0)
        return -1;
    if (cursor[0] == '\0')
        rt->history_done = 1;
    else
        tm_snprintf(rt->history_from, sizeof rt->history_from, "%s",
                    cursor);
    return n;
}

/* read_new reads up to max new entries, waiting up to block_ms for the
 * first one. */
static int read_new(struct tm_redis *rb, struct tm_redis_task *rt,
                    size_t ti, size_t max, int64_t block_ms,
                    struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    char count[24], block[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    tm_snprintf(block, sizeof block, "%lld", (long long)block_ms);
    const char *argv[] = {"XREADGROUP", "GROUP", t->group, rb->consumer,
                          "COUNT", count, "BLOCK", block, "STREAMS",
                          t->queue, ">"};
    int dead = 0;
    redisReply *r = intake_command(rt, 11, argv, &dead);
    if (r == NULL && dead) {
        intake_failed(rb, rt, "XREADGROUP");
        return -1;
    }
    if (r == NULL)
        return read_failed(rb, rt, "XREADGROUP");
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
        r->element[0]->type != REDIS_REPLY_ARRAY ||
        r->element[0]->elements != 2 ||
        r->element[0]->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r); /* nil: the block timed out */
        return 0;
    }
    struct tm_batch *b =
        entries_batch(rt, r, r->element[0]->element[1], ti);
    if (b == NULL)
        return 0;
    *out = b;
    return (int)b->n;
}

int tm_redis_fetch(struct tm_broker *b, size_t ti, size_t max,
                   int timeout_ms, struct tm_batch **out)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    struct tm_redis_task *rt = &rb->tasks[ti];
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0, n;
    *out = NULL;
    tm_redis_collect(rt);
    if (max == 0)
        return 0;
    if (max > TM_REDIS_ACK_CHUNK)
        max = TM_REDIS_ACK_CHUNK;

    if (rt->rc == NULL) {
        rt->rc = tm_redis_connect(rb,
                                  (int64_t)timeout_ms +
                                      TM_REDIS_BLOCK_SLACK_MS,
                                  rt->errstr, sizeof rt->errstr);
        if (rt->rc == NULL) {
            intake_failed(rb, rt, "connect");
            return -1;
        }
        rt->group_ready = 0;
        /* remember the connection's id: wake() unblocks it by that */
        redisReply *id = tm_rconn_command(rt->rc, "CLIENT ID");
        atomic_store(&rt->client_id, id != NULL &&
                                         id->type == REDIS_REPLY_INTEGER
                                     ? id->integer
                                     : 0);
        if (id != NULL)
            freeReplyObject(id);
    }
    if (!rt->group_ready) {
        if (tm_redis_ensure_group(rt->rc, t, rt->errstr, sizeof rt->errstr,
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
        tm_redis_mark_up(rb);
    }

    /* 1. retries that are due, from the retry set (delivery count + 1) */
    n = due_retries(rb, rt, ti, max, out);
    if (n != 0)
        return n;

    /* 2. entries idle past claim_idle on dead consumers */
    if (rt->history_done) {
        n = reclaim(rb, rt, ti, max, out);
        if (n != 0)
            return n;
    }

    /* 3. this consumer's own pending entries, once after start (not
     * after a reload: the previous configuration is still running them) */
    if (b->resumed)
        rt->history_done = 1;
    if (!rt->history_done)
        return read_history(rb, rt, ti, max, out);

    /* 4. new entries, waiting until the next retry is due at most */
    int64_t bl = timeout_ms > 0 ? timeout_ms : 1;
    int64_t now = tm_now_ms();
    int64_t hint = atomic_load(&rt->retry_hint_ms);
    int64_t until = rt->next_due_ms < hint ? rt->next_due_ms : hint;
    if (until - now < bl)
        bl = until - now > 1 ? until - now : 1;
    return read_new(rb, rt, ti, max, bl, out);
}
