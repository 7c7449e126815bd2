/* claim.c - Redis intake's scripted reads: the entries owed to a task
 * before any new one, each taken by a Lua script inside Redis (due
 * retries from the retry set, entries idle past claim_idle on dead
 * consumers, this consumer's own pending entries after a restart), and
 * the lane's peek that says when the first two have work. The take
 * scripts strip a body over max_payload inside Redis and stop their
 * reply at TM_REDIS_READ_BYTES (see TM_REDIS_LUA_TAKE); their replies
 * become batches through tm_redis_entries_batch (read.c). */
#include "redis/redis.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "redis/arena.h"
#include "util/util.h"

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
    redisReply *r = tm_redis_intake_command(rt, argc, argv, NULL, 0, &dead);
    if (argv != fixed)
        tm_free(argv);
    if (r == NULL && dead) {
        tm_redis_intake_failed(rb, rt, what);
        return -1;
    }
    if (r == NULL)
        return tm_redis_read_failed(rb, rt, what);
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        tm_snprintf(rt->errstr, sizeof rt->errstr, "unexpected reply");
        tm_redis_intake_failed(rb, rt, what);
        return -1;
    }
    if (aux != NULL)
        tm_snprintf(aux, auxsize, "%s",
                    r->element[0]->type == REDIS_REPLY_STRING
                        ? r->element[0]->str
                        : "");
    struct tm_batch *b =
        tm_redis_entries_batch(rt, r, NULL, r->element[1], ti);
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

/* tm_redis_take_owed runs steps 1-3 of a task's intake: retries that are due,
 * entries idle past claim_idle on dead consumers, and once after start
 * this consumer's own pending entries. */
int tm_redis_take_owed(struct tm_redis *rb, struct tm_broker *b,
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
    redisReply *r =
        tm_redis_intake_command(first, (int)(6 + 3 * n), argv, NULL, 0, &dead);
    if (r == NULL) {
        if (dead) {
            tm_redis_intake_failed(rb, first, "peek");
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
int tm_redis_peek(struct tm_redis *rb, struct tm_redis_lane *l)
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
