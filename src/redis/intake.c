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

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "redis/arena.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* peek_script looks, for each task of a lane, at the pending list and,
 * on a lane's first peek (ARGV[2 + n] is 1), at the retry set, whose
 * earliest it also writes to the due-time index (a set filled before
 * the index existed is indexed so); later peeks leave the retry sets to
 * the index (scheduled.c reads it). KEYS are stream, retry set, for each
 * task, then the due-time index; ARGV[1] the group, ARGV[1 + i] task i's
 * claim_idle. Returns, for each task, the ms until its next retry is due
 * (-1: none; -2: not looked at) and 1 when an entry has been pending past
 * claim_idle (0: none, or no stream or group yet). */
static const char peek_script[] =
    "local n = (#KEYS - 1) / 2\n"
    "local seed = ARGV[2 + n] == '1'\n"
    "local now = 0\n"
    "if seed then\n"
    "  local t = redis.call('TIME')\n"
    "  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "end\n"
    "local out = {}\n"
    "for i = 1, n do\n"
    "  local wait = -2\n"
    "  if seed then\n"
    "    wait = -1\n"
    "    local nxt = redis.call('ZRANGE', KEYS[2 * i], 0, 0, 'WITHSCORES')\n"
    "    if #nxt > 0 then\n"
    "      wait = math.max(0, tonumber(nxt[2]) - now)\n"
    "      redis.call('ZADD', KEYS[#KEYS], 'LT', nxt[2], KEYS[2 * i])\n"
    "    end\n"
    "  end\n"
    "  local idle = 0\n"
    "  local p = redis.pcall('XPENDING', KEYS[2 * i - 1], ARGV[1], 'IDLE',\n"
    "    tonumber(ARGV[1 + i]), '-', '+', 1)\n"
    "  if type(p) == 'table' and p.err == nil and #p > 0 then idle = 1 end\n"
    "  out[#out + 1] = wait\n"
    "  out[#out + 1] = idle\n"
    "end\n"
    "return out\n";

/* reclaim_script takes entries idle past ARGV[7] ms on any consumer,
 * scanning the group's pending list from ARGV[6] ("-" or "(id"), and
 * skips entries waiting in the retry set: they are nobody's to run until
 * they are due. It skips this consumer's entries named in ARGV[8 ..]
 * too: those this process holds (reading, running or settling them), in
 * case its keep-alive refresh came late; the consumer's other entries
 * (left by an earlier run of it or handed back unstarted at a reload)
 * are taken. XCLAIM checks the idle time again, so an entry whose owner
 * refreshed it meanwhile is left alone. Returns {cursor, out}. */
static const char reclaim_script[] = TM_REDIS_LUA_TAKE
    "local held = {}\n"
    "for i = 8, #ARGV do held[ARGV[i]] = true end\n"
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE',\n"
    "  tonumber(ARGV[7]), ARGV[6], '+', count)\n"
    "local cursor = '-'\n"
    "if #p >= count then cursor = '(' .. p[#p][1] end\n"
    "local last = nil\n"
    "for _, e in ipairs(p) do\n"
    "  if full() then cursor = '(' .. last break end\n"
    "  if not redis.call('ZSCORE', KEYS[2], e[1]) and\n"
    "     not (e[2] == ARGV[2] and held[e[1]]) then\n"
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
    tm_rarena_reply_free(h->reply, h->arena);
    tm_rarena_unref(h->arena);
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
    int has_body = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (!has_body && k->len == 4 && memcmp(k->str, "body", 4) == 0) {
            has_body = 1;
            if (v->len > sizeof TM_REDIS_OVERSIZE - 1 &&
                memcmp(v->str, TM_REDIS_OVERSIZE,
                       sizeof TM_REDIS_OVERSIZE - 1) == 0)
                /* dropped by the capped read: the reason is left */
                m->invalid = v->str + sizeof TM_REDIS_OVERSIZE - 1;
            else {
                m->body = v->str;
                m->body_len = v->len;
            }
        } else {
            tm_redis_meta_field(m, k, v);
        }
    }
    if (!has_body)
        m->invalid = "the entry has no body field";
    return 0;
}

/* entries_batch makes a batch of the entries array, owning reply (built
 * in arena, which the batch then holds a reference to, or malloc'd when
 * arena is NULL), and puts it on the task's held list. Entries that are
 * not well-formed are skipped. Returns NULL (reply freed) when empty. */
static struct tm_batch *entries_batch(struct tm_redis_task *rt,
                                      redisReply *reply,
                                      struct tm_rarena *arena,
                                      const redisReply *entries,
                                      size_t task_index)
{
    size_t n = 0;
    for (size_t i = 0; i < entries->elements; i++)
        if (entries->element[i]->type == REDIS_REPLY_ARRAY)
            n++;
    if (n == 0) {
        tm_rarena_reply_free(reply, arena);
        return NULL;
    }
    struct tm_batch *b = tm_batch_new(n);
    struct tm_redis_held *h = tm_calloc(1, sizeof *h + n);
    h->reply = reply;
    h->arena = arena;
    if (arena != NULL)
        tm_rarena_ref(arena);
    h->batch = b;
    h->seq = rt->reads++;
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

/* intake_failed closes the lane's connection after a failure of task
 * rt's read (the lane reconnects on its next fetch). */
static void intake_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                          const char *what)
{
    struct tm_redis_lane *l = rt->lane;
    if (rt->was_up || atomic_load(&rb->base.up))
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, NULL,
                     "%s: %s; reconnecting", what, rt->errstr);
    rt->was_up = 0;
    l->was_up = 0;
    tm_redis_mark_down(rb);
    atomic_store(&l->client_id, 0);
    tm_redis_link_close(rb, &l->link);
}

/* group_lost says whether err refused a read because a stream or group
 * it reads is gone: NOGROUP, or a blocked read ended by the deletion of
 * its stream (the connection is fine in both cases). */
static int group_lost(const char *err)
{
    return strstr(err, "NOGROUP") != NULL ||
           (strncmp(err, "UNBLOCKED", 9) == 0 &&
            strstr(err, TM_REDIS_KEY_GONE) != NULL);
}

/* regroup handles a read of the tasks ti[0 .. k) refused by group_lost:
 * which of their groups is gone the error may not say (NOGROUP names the
 * first stream it found without one, an ended block none), so each of
 * them is made sure of again before the next read, and task_ready warns
 * for the ones it had to create again. */
static void regroup(struct tm_redis *rb, struct tm_redis_lane *l,
                    const char *err, const size_t *ti, size_t k)
{
    for (size_t i = 0; i < k; i++)
        rb->tasks[ti[i]].group_gen = l->link.gen - 1;
    tm_log_write(TM_LOG_DEBUG, SRC, rb->tasks[ti[0]].cfg->name, NULL,
                 "read of %zu stream(s) refused: %s; making sure of their "
                 "groups again", k, err);
}

/* read_failed handles a failed read of task rt alone: a deleted stream
 * or group is created again on the next call (0; task_ready warns);
 * anything else is a lost connection or a broker refusing the read (-1:
 * reconnect with backoff). */
static int read_failed(struct tm_redis *rb, struct tm_redis_task *rt,
                       const char *what)
{
    if (group_lost(rt->errstr)) {
        size_t ti = (size_t)(rt - rb->tasks);
        regroup(rb, rt->lane, rt->errstr, &ti, 1);
        return 0;
    }
    intake_failed(rb, rt, what);
    return -1;
}

/* intake_command runs one command on the intake connection, reading its
 * reply capped at max_payload, built in arena (NULL: malloc'd). Returns
 * the reply, or NULL with the reason in rt->errstr (and *dead = 1 when
 * the connection is unusable); an error reply is returned as NULL too. */
static redisReply *intake_command(struct tm_redis_task *rt, int argc,
                                  const char **argv, struct tm_rarena *arena,
                                  int64_t timeout_ms, int *dead)
{
    struct tm_redis_lane *l = rt->lane;
    /* no reply of a read ahead is due before this one's */
    assert(!l->ahead);
    return tm_redis_link_run_in(l->rb, &l->link, rt->slot, argc, argv, NULL,
                                rt->cfg->max_payload, arena, timeout_ms,
                                rt->errstr, sizeof rt->errstr, dead);
}

/* take runs one take script (see TM_REDIS_LUA_TAKE) for at most max
 * entries, arg being its ARGV[6], arg2 (or NULL) its ARGV[7], and the
 * nextra strings extra[] (with arg2 only) its ARGV[8 ..]. The script's
 * first answer goes to aux (size auxsize). Returns the count of the
 * batch set in *out, or -1 (connection lost or read refused). */
static int take(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
                const char *script, const char *what, size_t max,
                const char *arg, const char *arg2,
                char (*extra)[TM_REDIS_ID_MAX], size_t nextra, char *aux,
                size_t auxsize, struct tm_batch **out)
{
    const struct tm_cfg_task *t = rt->cfg;
    char maxp[24], budget[24], count[24];
    tm_snprintf(maxp, sizeof maxp, "%zu", t->max_payload);
    tm_snprintf(budget, sizeof budget, "%d", TM_REDIS_READ_BYTES);
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *fixed[] = {"EVAL", script, "3", t->queue, rt->retry_key,
                           rt->due_key, t->group, rb->consumer, maxp, budget, count,
                           arg, arg2};
    size_t nfixed = sizeof fixed / sizeof fixed[0];
    assert(arg2 != NULL || nextra == 0);
    const char **argv = fixed;
    if (nextra > 0) {
        argv = tm_malloc((nfixed + nextra) * sizeof *argv);
        memcpy(argv, fixed, sizeof fixed);
        for (size_t i = 0; i < nextra; i++)
            argv[nfixed + i] = extra[i];
    }
    int argc = arg2 != NULL ? (int)(nfixed + nextra) : (int)nfixed - 1;
    int dead = 0;
    redisReply *r = intake_command(rt, argc, argv, NULL, 0, &dead);
    if (argv != fixed)
        tm_free(argv);
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
    struct tm_batch *b = entries_batch(rt, r, NULL, r->element[1], ti);
    if (b == NULL)
        return 0;
    *out = b;
    return (int)b->n;
}

/* due_retries claims the retries that are due, when one may be: on the
 * time the last look, the lane's peek or the settle thread announced.
 * Sets rt->next_due_ms. */
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
                 NULL, NULL, 0, wait, sizeof wait, out);
    if (n < 0) {
        atomic_store(&rt->retry_hint_ms, now); /* look again after it */
        return -1;
    }
    long long w = strtoll(wait, NULL, 10);
    /* more may be due at once when the reply was full; none left: the
     * retries other daemons schedule come through the due-time index
     * (the promoter's tm_redis_retry_note) */
    rt->next_due_ms = (size_t)n >= max ? now
                      : w < 0          ? LLONG_MAX
                                       : tm_now_ms() + w;
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
    if (!rt->reclaimable || now < rt->next_maint_ms)
        return 0;
    char idle[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)t->claim_idle_ms);
    if (rt->claim_cursor[0] == '\0')
        tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "-");
    char cursor[TM_REDIS_ID_MAX + 1];
    size_t nheld = tm_redis_held_ids(rt, /* settled_too = */ 1,
                                     &rt->own_ids, &rt->own_idcap);
    int n = take(rb, rt, ti, reclaim_script, "reclaim", max,
                 rt->claim_cursor, idle, rt->own_ids, nheld, cursor,
                 sizeof cursor, out);
    if (n < 0)
        return -1;
    tm_snprintf(rt->claim_cursor, sizeof rt->claim_cursor, "%s",
                cursor[0] != '\0' ? cursor : "-");
    /* a full page: go on at once, else wait for the next round */
    if (strcmp(rt->claim_cursor, "-") == 0) {
        rt->next_maint_ms = now + tm_redis_claim_period(t);
        rt->reclaimable = 0; /* until the lane's next peek finds more */
    }
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
                 NULL, NULL, 0, cursor, sizeof cursor, out);
    if (n < 0)
        return -1;
    if (cursor[0] == '\0')
        rt->history_done = 1;
    else
        tm_snprintf(rt->history_from, sizeof rt->history_from, "%s",
                    cursor);
    return n;
}

/* lane_connect opens the lane's connection to the node of slot (the
 * one its blocking read goes to) and learns its CLIENT ID (a poke
 * unblocks it by that). */
static int lane_connect(struct tm_redis *rb, struct tm_redis_lane *l,
                        unsigned slot)
{
    size_t ni = tm_redis_slot_node(rb, slot, l->errstr, sizeof l->errstr);
    struct tm_rconn *c = ni == TM_REDIS_NO_NODE
                             ? NULL
                             : tm_redis_link_get(rb, &l->link, ni, l->errstr,
                                                 sizeof l->errstr);
    if (c == NULL) {
        if (l->was_up || atomic_load(&rb->base.up))
            tm_log_warn(SRC, "intake of group '%s': %s; reconnecting",
                        l->group, l->errstr);
        l->was_up = 0;
        tm_redis_mark_down(rb);
        return -1;
    }
    if (l->link.client_id[ni] == 0) {
        redisReply *id = tm_rconn_command(c, "CLIENT ID");
        l->link.client_id[ni] = id != NULL &&
                                        id->type == REDIS_REPLY_INTEGER
                                    ? id->integer
                                    : -1;
        if (id != NULL)
            freeReplyObject(id);
    }
    atomic_store(&l->block_node, (int)ni);
    atomic_store(&l->client_id, l->link.client_id[ni]);
    return 0;
}

/* task_ready makes sure of the task's group on this connection. */
static int task_ready(struct tm_redis *rb, struct tm_redis_task *rt)
{
    struct tm_redis_lane *l = rt->lane;
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    if (rt->group_gen == l->link.gen)
        return 0;
    int made = tm_redis_ensure_group(rb, &l->link, rt, rt->errstr,
                                     sizeof rt->errstr, &dead);
    if (made < 0) {
        intake_failed(rb, rt, "XGROUP CREATE");
        return -1;
    }
    if (made == 1 && rt->group_seen)
        tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                     "group '%s' was gone from '%s' (the stream or its "
                     "group was deleted); created it again, at the "
                     "stream's start", t->group, t->queue);
    rt->group_seen = 1;
    rt->group_gen = l->link.gen;
    if (!rt->was_up)
        tm_log_write(TM_LOG_INFO, SRC, t->name, NULL,
                     "consuming stream '%s' as %s/%s", t->queue, t->group,
                     rb->consumer);
    rt->was_up = 1;
    return 0;
}

/* take_owed runs steps 1-3 of a task's intake: retries that are due,
 * entries idle past claim_idle on dead consumers, and once after start
 * this consumer's own pending entries. */
static int take_owed(struct tm_redis *rb, struct tm_broker *b,
                     struct tm_redis_task *rt, size_t ti, size_t max,
                     struct tm_batch **out)
{
    /* 1. retries that are due, from the retry set (delivery count + 1) */
    int n = due_retries(rb, rt, ti, max, out);
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
    return 0;
}

/* next_look is when the task next needs a look outside the blocking
 * read: its next due retry, or its next reclaim round. */
static int64_t next_look(const struct tm_redis_task *rt)
{
    int64_t hint = atomic_load(&rt->retry_hint_ms);
    int64_t until = rt->next_due_ms < hint ? rt->next_due_ms : hint;
    if (rt->history_done && rt->reclaimable && rt->next_maint_ms < until)
        until = rt->next_maint_ms;
    return until;
}

/* read_batches makes a batch of each stream's part of reply r (built in
 * arena) of a read of the tasks ti[0 .. k), into out (at most nout);
 * the parts leave r (each batch owns its part). Returns the count. */
static size_t read_batches(struct tm_redis *rb, redisReply *r,
                           struct tm_rarena *arena, const size_t *ti,
                           size_t k, struct tm_batch **out, size_t nout)
{
    size_t nb = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0; /* nil: the block timed out */
    for (size_t e = 0; e < r->elements && nb < nout; e++) {
        redisReply *pair = r->element[e];
        if (pair->type != REDIS_REPLY_ARRAY || pair->elements != 2 ||
            pair->element[0]->type != REDIS_REPLY_STRING ||
            pair->element[1]->type != REDIS_REPLY_ARRAY)
            continue;
        size_t i = 0;
        while (i < k &&
               strcmp(rb->tasks[ti[i]].cfg->queue, pair->element[0]->str) != 0)
            i++;
        if (i == k)
            continue;
        /* the stream's part leaves the reply: its batch owns it */
        r->element[e] = NULL;
        struct tm_batch *bt = entries_batch(&rb->tasks[ti[i]], pair, arena,
                                            pair->element[1], ti[i]);
        if (bt != NULL)
            out[nb++] = bt;
    }
    return nb;
}

/* stream_got is how many entries reply r (of XREADGROUP) brought for
 * stream queue. */
static size_t stream_got(const redisReply *r, const char *queue)
{
    for (size_t e = 0; e < r->elements; e++) {
        const redisReply *pair = r->element[e];
        if (pair != NULL && pair->type == REDIS_REPLY_ARRAY &&
            pair->elements == 2 &&
            pair->element[0]->type == REDIS_REPLY_STRING &&
            pair->element[1]->type == REDIS_REPLY_ARRAY &&
            strcmp(pair->element[0]->str, queue) == 0)
            return pair->element[1]->elements;
    }
    return 0;
}

/* ahead_half is the most entries of task rt one read asks for on a lane
 * that reads ahead: half its prefetch, so that two reads are under way
 * while the pool has room for both (at least TM_REDIS_AHEAD_MIN). */
static size_t ahead_half(const struct tm_redis_task *rt)
{
    size_t half = ((size_t)rt->cfg->prefetch + 1) / 2;
    return half < TM_REDIS_AHEAD_MIN ? TM_REDIS_AHEAD_MIN : half;
}

/* ahead_least is the fewest entries of task rt a read ahead asks for: a
 * quarter of ahead_half, at least TM_REDIS_AHEAD_MIN (a small read costs
 * Redis and the daemon nearly what a full one does). */
static size_t ahead_least(const struct tm_redis_task *rt)
{
    size_t q = ahead_half(rt) / 4;
    return q < TM_REDIS_AHEAD_MIN ? TM_REDIS_AHEAD_MIN : q;
}

/* ahead_count is the COUNT of a read that may go ahead after reply r, a
 * read of count entries of the tasks ti[0 .. k) whose rooms were room[0
 * .. k) before it; 0 when none may go now (see struct tm_redis_lane).
 * Each task's room left after r's entries bounds it, so that what is
 * read, queued and in flight stays within the task's prefetch; and
 * ahead_half; below ahead_least, none goes. */
static size_t ahead_count(struct tm_redis *rb, struct tm_redis_lane *l,
                          const redisReply *r, const size_t *ti,
                          const size_t *room, size_t k, size_t count)
{
    if (!l->ahead_ok || r->type != REDIS_REPLY_ARRAY ||
        atomic_load(&l->stopping) || atomic_load(&l->poke))
        return 0;
    int64_t now = tm_now_ms();
    if (now >= l->next_peek_ms || now >= atomic_load(&l->next_pause_ms) ||
        (rb->cluster && atomic_load(&rb->map_stale)))
        return 0;
    size_t n = TM_REDIS_ACK_CHUNK;
    int full = 0;
    for (size_t j = 0; j < k; j++) {
        struct tm_redis_task *rt = &rb->tasks[ti[j]];
        if (!rt->history_done || atomic_load(&rt->paused) ||
            next_look(rt) <= now)
            return 0;
        size_t got = stream_got(r, rt->cfg->queue);
        if (got >= count)
            full = 1;
        if (got >= room[j])
            return 0;
        size_t left = room[j] - got, half = ahead_half(rt);
        if (left > half)
            left = half;
        if (left < ahead_least(rt))
            return 0;
        if (left < n)
            n = left;
    }
    return full ? n : 0;
}

/* xread_argv fills argv with XREADGROUP of new entries of the tasks ti[0
 * .. k) of lane l, COUNT cnt, BLOCK block (NULL: none); returns argc. */
static size_t xread_argv(const struct tm_redis *rb,
                         const struct tm_redis_lane *l, const char **argv,
                         const char *cnt, const char *block, const size_t *ti,
                         size_t k)
{
    size_t argc = 0;
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = l->group;
    argv[argc++] = rb->consumer;
    argv[argc++] = "COUNT";
    argv[argc++] = cnt;
    if (block != NULL) {
        argv[argc++] = "BLOCK";
        argv[argc++] = block;
    }
    argv[argc++] = "STREAMS";
    /* the k streams, then k times ">" */
    for (size_t i = 0; i < k; i++) {
        argv[argc + i] = rb->tasks[ti[i]].cfg->queue;
        argv[argc + k + i] = ">";
    }
    return argc + 2 * k;
}

/* send_ahead sends the read ahead of count entries of the tasks ti[0 ..
 * k) (no BLOCK) on the lane's connection, without waiting for its
 * reply. When it cannot be sent, nothing goes ahead: a connection
 * error shows at its next use. */
static void send_ahead(struct tm_redis *rb, struct tm_redis_lane *l,
                       const size_t *ti, size_t k, size_t count)
{
    assert(!l->ahead && k > 0 && k <= l->ntasks);
    char eb[256];
    size_t ni = tm_redis_slot_node(rb, rb->tasks[ti[0]].slot, eb, sizeof eb);
    if (ni >= TM_REDIS_MAX_NODES || l->link.c[ni] == NULL)
        return;
    struct tm_rconn *c = l->link.c[ni];
    char cnt[24];
    tm_snprintf(cnt, sizeof cnt, "%zu", count);
    size_t argc = xread_argv(rb, l, l->ahead_argv, cnt, NULL, ti, k);
    if (tm_rconn_append_argv(c, (int)argc, l->ahead_argv, NULL) != 0 ||
        tm_rconn_send(c) != 0)
        return;
    l->ahead = 1;
    l->ahead_node = ni;
    l->ahead_gen = l->link.gen;
    l->ahead_count = count;
    l->ahead_k = k;
    memcpy(l->ahead_ti, ti, k * sizeof *ti);
}

/* read_new reads new entries of the tasks l->argti[from .. from + k),
 * all of one lane key (one slot in a cluster), at most the least of
 * their rooms each (and of ahead_half on a lane that reads ahead),
 * waiting up to block_ms for the first one (< 0: not at all). Each
 * stream's part of the reply becomes one batch. When the reply came
 * back full, the next read may go ahead before its entries are taken
 * apart. */
static int read_new(struct tm_redis *rb, struct tm_redis_lane *l,
                    size_t from, size_t k, int64_t block_ms,
                    struct tm_batch **out, size_t nout)
{
    char cnt[24], block[24];
    size_t count = TM_REDIS_ACK_CHUNK;
    for (size_t i = 0; i < k; i++)
        if (l->argmax[from + i] < count)
            count = l->argmax[from + i];
    if (l->ahead_ok)
        for (size_t i = 0; i < k; i++) {
            size_t half = ahead_half(&rb->tasks[l->argti[from + i]]);
            if (count > half)
                count = half;
        }
    tm_snprintf(cnt, sizeof cnt, "%zu", count);
    tm_snprintf(block, sizeof block, "%lld", (long long)block_ms);
    const char **argv = l->argv;
    size_t argc = xread_argv(rb, l, argv, cnt, block_ms >= 0 ? block : NULL,
                             &l->argti[from], k);
    struct tm_redis_task *first = &rb->tasks[l->argti[from]];
    int dead = 0;
    /* the reply is built in one arena: each stream's batch holds a
     * reference to it, the last one settled frees it */
    struct tm_rarena *arena = tm_rarena_new();
    redisReply *r = intake_command(first, (int)argc, argv, arena,
                                   block_ms >= 0
                                       ? block_ms + TM_REDIS_BLOCK_SLACK_MS
                                       : 0,
                                   &dead);
    if (r == NULL) {
        tm_rarena_unref(arena);
        if (dead) {
            intake_failed(rb, first, "XREADGROUP");
            return -1;
        }
        if (group_lost(first->errstr)) {
            /* of any stream of the read, not necessarily first's */
            regroup(rb, l, first->errstr, &l->argti[from], k);
            return 0;
        }
        return read_failed(rb, first, "XREADGROUP");
    }
    size_t next = ahead_count(rb, l, r, &l->argti[from], &l->argroom[from],
                              k, count);
    if (next > 0)
        send_ahead(rb, l, &l->argti[from], k, next);
    size_t nb = read_batches(rb, r, arena, &l->argti[from], k, out, nout);
    tm_rarena_reply_free(r, arena);
    tm_rarena_unref(arena);
    if (nb == 0)
        tm_rarena_trim(); /* idle: the blocks kept for busy reads go */
    return (int)nb;
}

/* take_ahead reads the reply of the lane's read ahead: its entries
 * become batches in out (their count returned), and when more may come
 * at once, the next read goes ahead first. room is this fetch's. A
 * reply that brought nothing, or an error (a redirect, a group gone),
 * leaves the fetch to its usual reads (0); -1: the connection was lost
 * (its entries are pending here, as those of any read lost). */
static int take_ahead(struct tm_redis *rb, struct tm_redis_lane *l,
                      const size_t *room, struct tm_batch **out,
                      size_t nout)
{
    assert(l->ahead);
    l->ahead = 0;
    size_t k = l->ahead_k;
    struct tm_redis_task *first = &rb->tasks[l->ahead_ti[0]];
    struct tm_rconn *c = l->link.c[l->ahead_node];
    /* nothing else uses the connection meanwhile, so it is still the
     * one the read went on */
    assert(c != NULL && l->link.gen == l->ahead_gen);
    struct tm_rarena *arena = tm_rarena_new();
    redisReply *r = NULL;
    if (tm_rconn_get_reply_in(c, first->cfg->max_payload, arena, &r) != 0) {
        tm_rarena_unref(arena);
        tm_redis_reply_error(c, NULL, first->errstr, sizeof first->errstr);
        intake_failed(rb, first, "XREADGROUP (read ahead)");
        return -1;
    }
    if (atomic_load(&l->stopping))
        tm_log_write(TM_LOG_DEBUG, SRC, first->cfg->name, NULL,
                     "a read ahead was in flight at the stop: taken in");
    for (size_t j = 0; j < k; j++) {
        l->argti[j] = l->ahead_ti[j];
        l->argroom[j] = room[l->ahead_ti[j]];
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (group_lost(r->str))
            regroup(rb, l, r->str, l->argti, k);
        tm_rarena_reply_free(r, arena);
        tm_rarena_unref(arena);
        return 0;
    }
    size_t next = ahead_count(rb, l, r, l->argti, l->argroom, k,
                              l->ahead_count);
    if (next > 0)
        send_ahead(rb, l, l->argti, k, next);
    size_t nb = read_batches(rb, r, arena, l->argti, k, out, nout);
    tm_rarena_reply_free(r, arena);
    tm_rarena_unref(arena);
    return (int)nb;
}

void tm_redis_ahead_end(struct tm_redis *rb, struct tm_redis_lane *l)
{
    if (!l->ahead)
        return;
    l->ahead = 0;
    struct tm_rconn *c = l->link.c[l->ahead_node];
    if (c == NULL || l->link.gen != l->ahead_gen)
        return;
    redisReply *r = NULL;
    if (tm_rconn_get_reply_capped(
            c, rb->tasks[l->ahead_ti[0]].cfg->max_payload, &r) == 0)
        freeReplyObject(r);
}

/* peek_run runs peek_script for the tasks l->tasks[from .. from + n),
 * all of one lane key, and sets their next due retry and whether reclaim
 * has work; -1 when the connection was lost. */
static int peek_run(struct tm_redis *rb, struct tm_redis_lane *l,
                    size_t from, size_t n)
{
    const char **argv = l->peek_argv;
    char nkeys[24];
    tm_snprintf(nkeys, sizeof nkeys, "%zu", 2 * n + 1);
    argv[0] = "EVAL";
    argv[1] = peek_script;
    argv[2] = nkeys;
    argv[3 + 2 * n] = rb->tasks[l->tasks[from]].due_key;
    argv[4 + 2 * n] = l->group;
    for (size_t i = 0; i < n; i++) {
        struct tm_redis_task *rt = &rb->tasks[l->tasks[from + i]];
        argv[3 + 2 * i] = rt->cfg->queue;
        argv[4 + 2 * i] = rt->retry_key;
        tm_snprintf(l->peek_num[from + i], sizeof l->peek_num[from + i],
                    "%lld", (long long)rt->cfg->claim_idle_ms);
        argv[5 + 2 * n + i] = l->peek_num[from + i];
    }
    argv[5 + 3 * n] = l->peeked ? "0" : "1";
    struct tm_redis_task *first = &rb->tasks[l->tasks[from]];
    int dead = 0;
    int64_t now = tm_now_ms();
    redisReply *r = intake_command(first, (int)(6 + 3 * n), argv, NULL, 0,
                                   &dead);
    if (r == NULL) {
        if (dead) {
            intake_failed(rb, first, "peek");
            return -1;
        }
        tm_log_write(TM_LOG_WARNING, SRC, first->cfg->name, NULL,
                     "peek: %s", first->errstr);
        return 0;
    }
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 * n) {
        for (size_t i = 0; i < n; i++) {
            struct tm_redis_task *rt = &rb->tasks[l->tasks[from + i]];
            const redisReply *w = r->element[2 * i];
            const redisReply *idle = r->element[2 * i + 1];
            if (w->type == REDIS_REPLY_INTEGER && w->integer != -2)
                rt->next_due_ms = w->integer < 0 ? LLONG_MAX
                                                 : now + w->integer;
            if (idle->type == REDIS_REPLY_INTEGER && idle->integer > 0)
                rt->reclaimable = 1;
        }
    }
    freeReplyObject(r);
    return 0;
}

/* peek looks at the pending lists of the lane's tasks, one script per
 * lane key (the tasks are ordered by it): the first peek at every task
 * (and its retry set), the later ones at the next TM_REDIS_PEEK_TASKS
 * tasks in turn (see tm_redis_lanes_init for the period); -1 when the
 * connection was lost. */
static int peek(struct tm_redis *rb, struct tm_redis_lane *l)
{
    size_t from = l->peeked ? l->peek_at : 0;
    size_t left = l->peeked && l->ntasks > TM_REDIS_PEEK_TASKS
                      ? TM_REDIS_PEEK_TASKS
                      : l->ntasks;
    while (left > 0) {
        size_t n = 1;
        unsigned key = rb->tasks[l->tasks[from]].lane_key;
        while (n < left && from + n < l->ntasks &&
               rb->tasks[l->tasks[from + n]].lane_key == key)
            n++;
        if (peek_run(rb, l, from, n) != 0)
            return -1;
        left -= n;
        from = (from + n) % l->ntasks;
    }
    l->peek_at = from;
    return 0;
}

/* poll_new reads new entries of the k selected tasks of a polling lane,
 * one non-blocking read per lane key, then, when none came, sleeps until
 * until at the latest, or less while idle (see struct tm_redis_lane), or
 * a poke. */
static int poll_new(struct tm_redis *rb, struct tm_redis_lane *l, size_t k,
                    int64_t until, struct tm_batch **out, size_t nout)
{
    int nb = 0;
    size_t from = 0;
    while (from < k && (size_t)nb < nout) {
        size_t n = 1;
        unsigned key = rb->tasks[l->argti[from]].lane_key;
        while (from + n < k && rb->tasks[l->argti[from + n]].lane_key == key)
            n++;
        int got = read_new(rb, l, from, n, -1, out + nb, nout - (size_t)nb);
        if (got < 0)
            return nb > 0 ? nb : -1;
        nb += got;
        from += n;
    }
    if (nb > 0) {
        l->idle_ms = 0;
        return nb;
    }
    l->idle_ms = l->idle_ms <= 0 ? 10
                 : l->idle_ms * 2 < TM_REDIS_POLL_MAX_MS ? l->idle_ms * 2
                                                        : TM_REDIS_POLL_MAX_MS;
    int64_t end = tm_now_ms() + l->idle_ms;
    if (until < end)
        end = until;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t left = end - tm_now_ms();
    if (left <= 0)
        return 0;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    /* a poke sets poke, then signals under mu: checked under mu here, it
     * cannot fall between the check and the wait */
    pthread_mutex_lock(&l->mu);
    while (!atomic_load(&l->poke) &&
           pthread_cond_timedwait(&l->cv, &l->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* fetch_lane reads what lane li may take now (see tm_redis_fetch_lane). */
static int fetch_lane(struct tm_broker *b, size_t li, const size_t *room,
                      int timeout_ms, struct tm_batch **out, size_t nout)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(li < rb->nlanes);
    struct tm_redis_lane *l = &rb->lanes[li];
    size_t nb = 0;
    /* a first look after a (re)connect returns without blocking, so that
     * the caller learns at once that the lane's tasks are subscribed */
    int fresh = !l->was_up;
    for (size_t i = 0; i < l->ntasks; i++)
        tm_redis_collect(&rb->tasks[l->tasks[i]]);
    /* a read sent ahead is the first reply on the connection; at a stop
     * it is taken in like any other (its entries run at a reload, or
     * are left with the other unstarted ones at a shutdown) */
    if (l->ahead) {
        int n = take_ahead(rb, l, room, out, nout);
        if (n != 0 || l->ahead)
            return n;
    }
    /* from here on the connection carries one command at a time */
    assert(!l->ahead);
    /* at a stop nothing new is read (the caller's last fetch after
     * wake() only takes in what went ahead), nor with no room at all */
    int any_room = 0;
    for (size_t i = 0; i < l->ntasks && !any_room; i++)
        any_room = room[l->tasks[i]] > 0;
    if (atomic_load(&l->stopping) || !any_room)
        return 0;
    /* a blocking lane reads one slot (or the one server): its node's
     * connection, and the id a poke unblocks it by */
    if (!l->poll && lane_connect(rb, l, rb->tasks[l->tasks[0]].slot) != 0)
        return -1;
    /* the pause state first: nothing of a paused task is read */
    if (tm_redis_pause_poll(rb, l) != 0) {
        intake_failed(rb, &rb->tasks[l->tasks[0]], "pause state read");
        return -1;
    }
    if (tm_now_ms() >= l->next_peek_ms) {
        for (size_t i = 0; i < l->ntasks; i++)
            if (task_ready(rb, &rb->tasks[l->tasks[i]]) != 0)
                return -1;
        if (peek(rb, l) != 0)
            return -1;
        l->peeked = 1;
        l->next_peek_ms = tm_now_ms() + l->peek_period_ms;
    }

    /* steps 1-3 for each task with room; their batches first */
    size_t k = 0;
    int waiting = 0, paused = 0;
    int64_t now = tm_now_ms();
    int64_t until = now + (timeout_ms > 0 ? timeout_ms : 1);
    for (size_t i = 0; i < l->ntasks && nb < nout; i++) {
        size_t ti = l->tasks[i];
        struct tm_redis_task *rt = &rb->tasks[ti];
        size_t max = room[ti] < TM_REDIS_ACK_CHUNK ? room[ti]
                                                    : TM_REDIS_ACK_CHUNK;
        if (max > 0 && atomic_load(&rt->paused)) {
            paused = 1; /* nothing is read: retries, reclaim, new */
            continue;
        }
        if (max == 0) {
            waiting = 1;
            continue;
        }
        if (task_ready(rb, rt) != 0)
            return nb > 0 ? (int)nb : -1;
        int n = take_owed(rb, b, rt, ti, max, &out[nb]);
        if (n < 0)
            return nb > 0 ? (int)nb : -1;
        if (n > 0) {
            nb++;
            continue;
        }
        int64_t t_look = next_look(rt);
        if (t_look < until)
            until = t_look;
        /* each read's COUNT is the least room among its streams, so
         * that no task gets more than its prefetch allows */
        l->argmax[k] = max;
        l->argroom[k] = room[ti];
        l->argti[k++] = ti;
    }
    /* the connection works: every task with room was looked at */
    tm_redis_mark_up(rb);
    l->was_up = 1;
    if (nb == 0 && k == 0 && !fresh && paused)
        tm_redis_pause_wait(l, until); /* every task with room paused */
    if (nb > 0 || k == 0 || fresh)
        return (int)nb;

    /* 4. new entries of every task with room, in one read that waits
     * until the next look a task needs at most, or a poke (a polling
     * lane: a read per slot, then a sleep) */
    if (waiting && until > now + TM_REDIS_ROOM_BLOCK_MS)
        until = now + TM_REDIS_ROOM_BLOCK_MS;
    if (until > l->next_peek_ms)
        until = l->next_peek_ms;
    /* and no longer than the next read of the pause state */
    if (until > atomic_load(&l->next_pause_ms))
        until = atomic_load(&l->next_pause_ms);
    int64_t bl = until - now > 1 ? until - now : 1;
    atomic_store(&l->block_end_ms, now + bl);
    atomic_store(&l->in_block, 1);
    if (atomic_exchange(&l->poke, 0)) {
        atomic_store(&l->in_block, 0);
        return 0; /* poked: the caller looks at the room again */
    }
    int n = l->poll ? poll_new(rb, l, k, now + bl, out, nout)
                    : read_new(rb, l, 0, k, bl, out, nout);
    atomic_store(&l->in_block, 0);
    atomic_store(&l->block_end_ms, LLONG_MAX);
    return n;
}

int tm_redis_fetch_lane(struct tm_broker *b, size_t li, const size_t *room,
                        int timeout_ms, struct tm_batch **out, size_t nout)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    int n = fetch_lane(b, li, room, timeout_ms, out, nout);
    if (n > 0)
        tm_redis_dedup_check(rb, &rb->lanes[li], out, (size_t)n);
    return n;
}
