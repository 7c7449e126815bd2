/* upkeep.c - Redis upkeep: keep-alive refresh (of the ids read.c's held
 * lists name), trim, consumer sweep; it starts the promoter of delayed
 * messages (scheduled.c). */
#include "redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* refresh_script resets the idle time (XCLAIM JUSTID, which does not
 * count as a delivery) of the given ids that are pending on this
 * consumer and idle for ARGV[3] ms or more. The owner is checked in the
 * same script, so an entry another consumer reclaimed meanwhile is never
 * taken back. KEYS: stream. ARGV: group, consumer, min idle, ids...
 * Returns how many were refreshed. */
static const char refresh_script[] =
    "local keep = {}\n"
    "for i = 4, #ARGV do\n"
    "  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i],"
    " 1)\n"
    "  if #p > 0 and p[1][2] == ARGV[2] and p[1][3] >= tonumber(ARGV[3])"
    " then\n"
    "    keep[#keep + 1] = ARGV[i]\n"
    "  end\n"
    "end\n"
    "if #keep == 0 then return 0 end\n"
    "local n = #keep\n"
    "keep[n + 1] = 'JUSTID'\n"
    "redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(keep))\n"
    "return n\n";

/* Ids per refresh script call. */
#define TM_REDIS_REFRESH_CHUNK 256

/* refresh_held resets the idle time of the entries this process holds
 * (read, queued or running; not yet settled) that have been pending for
 * half the claim time, so that no other consumer reclaims live work.
 * Entries waiting in the retry set are not held by anyone and are left
 * alone (reclaim skips them). Returns 1 on connection loss. */
static int refresh_held(struct tm_redis *rb, struct tm_redis_task *rt,
                        char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    size_t n = tm_redis_held_ids(rt, 0, &rb->ids, &rb->idcap);
    char idle[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)(t->claim_idle_ms / 2));
    const char *argv[7 + TM_REDIS_REFRESH_CHUNK];
    long long kept = 0;
    int dead = 0;
    for (size_t from = 0; from < n && !dead;
         from += TM_REDIS_REFRESH_CHUNK) {
        size_t argc = 0;
        argv[argc++] = "EVAL";
        argv[argc++] = refresh_script;
        argv[argc++] = "1";
        argv[argc++] = t->queue;
        argv[argc++] = t->group;
        argv[argc++] = rb->consumer;
        argv[argc++] = idle;
        for (size_t i = from; i < n && i < from + TM_REDIS_REFRESH_CHUNK;
             i++)
            argv[argc++] = rb->ids[i];
        redisReply *r = tm_redis_link_run(rb, &rb->settle, rt->slot,
                                          (int)argc, argv, NULL, 0, 0, eb,
                                          ebsize, &dead);
        if (r != NULL && r->type == REDIS_REPLY_INTEGER)
            kept += r->integer;
        if (r != NULL)
            freeReplyObject(r);
    }
    if (kept > 0)
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                     "kept %lld long-pending entries from being reclaimed",
                     kept);
    return dead;
}

/* trim_script caps the stream at ARGV[1] entries, but never removes an
 * entry that some group has not yet read or acknowledged. One script, so
 * the groups cannot change between the reads: for each group the bound
 * is its first pending entry, else its last-delivered id (kept: one
 * entry more than needed, no id arithmetic); a group whose bound cannot
 * be read stops the round (nothing trimmed). At most ARGV[2] entries go
 * per round. KEYS: stream. Returns the count trimmed, -1 when it did not
 * trim for a group it could not read. */
static const char trim_script[] =
    "local function lt(a, b)\n"
    "  local am, as = string.match(a, '^(%d+)-(%d+)$')\n"
    "  local bm, bs = string.match(b, '^(%d+)-(%d+)$')\n"
    "  if #am ~= #bm then return #am < #bm end\n"
    "  if am ~= bm then return am < bm end\n"
    "  if #as ~= #bs then return #as < #bs end\n"
    "  return as < bs\n"
    "end\n"
    "local excess = redis.call('XLEN', KEYS[1]) - tonumber(ARGV[1])\n"
    "if excess <= 0 then return 0 end\n"
    "local safe = nil\n"
    "for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do\n"
    "  local name, pending, last\n"
    "  for i = 1, #g - 1, 2 do\n"
    "    if g[i] == 'name' then name = g[i + 1] end\n"
    "    if g[i] == 'pending' then pending = g[i + 1] end\n"
    "    if g[i] == 'last-delivered-id' then last = g[i + 1] end\n"
    "  end\n"
    "  if type(name) ~= 'string' or type(last) ~= 'string' or\n"
    "     not string.match(last, '^%d+-%d+$') then return -1 end\n"
    "  local cand = last\n"
    "  if pending ~= 0 then\n"
    "    local p = redis.pcall('XPENDING', KEYS[1], name)\n"
    "    if type(p) ~= 'table' or p.err or type(p[2]) ~= 'string' then\n"
    "      return -1\n"
    "    end\n"
    "    if lt(p[2], cand) then cand = p[2] end\n"
    "  end\n"
    "  if safe == nil or lt(cand, safe) then safe = cand end\n"
    "end\n"
    "if safe == nil then return 0 end\n"
    "local k = math.min(excess, tonumber(ARGV[2]))\n"
    "local r = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', k + 1)\n"
    "if #r < k + 1 then return 0 end\n"
    "local minid = r[k + 1][1]\n"
    "if lt(safe, minid) then minid = safe end\n"
    "return redis.call('XTRIM', KEYS[1], 'MINID', minid)\n";

/* trim caps the stream at maxlen entries (trim_script). */
static int trim(struct tm_redis *rb, struct tm_redis_task *rt, char *eb,
                size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    char maxlen[24];
    tm_snprintf(maxlen, sizeof maxlen, "%lld", (long long)t->maxlen);
    const char *argv[] = {"EVAL", trim_script, "1", t->queue, maxlen,
                          "10000"};
    int dead = 0;
    redisReply *r = tm_redis_link_run(rb, &rb->settle, rt->slot, 6, argv,
                                      NULL, 0, 0, eb, ebsize, &dead);
    if (r == NULL) {
        if (!dead)
            tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL, "trim: %s",
                         eb);
        return dead;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer > 0)
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                     "trimmed %lld entries (maxlen %lld)", r->integer,
                     (long long)t->maxlen);
    else if (r->type == REDIS_REPLY_INTEGER && r->integer < 0)
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                     "not trimmed: a group's pending list could not be "
                     "read");
    freeReplyObject(r);
    return 0;
}

/* sweep_consumers removes consumers of the group that hold nothing and
 * have been idle long (daemons that stopped), so that groups do not fill
 * with dead names. Redis 7.0 counts idle time from the last delivery, so
 * a live consumer on a quiet stream looks idle too: the limit is long
 * (an hour at least), and one removed anyway is created again by its
 * next read, having nothing pending to lose. */
static int sweep_consumers(struct tm_redis *rb, struct tm_redis_task *rt,
                           char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    long long limit = t->claim_idle_ms * 10;
    if (limit < 3600000)
        limit = 3600000;
    const char *iargv[] = {"XINFO", "CONSUMERS", t->queue, t->group};
    int dead = 0;
    redisReply *r = tm_redis_link_run(rb, &rb->settle, rt->slot, 4, iargv,
                                      NULL, 0, 0, eb, ebsize, &dead);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    for (size_t i = 0; i < r->elements && !dead; i++) {
        const redisReply *e = r->element[i];
        const redisReply *name = tm_redis_reply_field(e, "name");
        const redisReply *pend = tm_redis_reply_field(e, "pending");
        const redisReply *idle = tm_redis_reply_field(e, "idle");
        if (name == NULL || pend == NULL || idle == NULL ||
            name->type != REDIS_REPLY_STRING ||
            strcmp(name->str, rb->consumer) == 0 || pend->integer != 0 ||
            idle->integer < limit)
            continue;
        const char *dargv[] = {"XGROUP", "DELCONSUMER", t->queue, t->group,
                               name->str};
        redisReply *d = tm_redis_link_run(rb, &rb->settle, rt->slot, 5,
                                          dargv, NULL, 0, 0, eb, ebsize,
                                          &dead);
        if (d != NULL) {
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

/* tm_redis_tick is the settle thread's periodic upkeep, on its own connection
 * so that a busy intake (blocked on a full pool) cannot delay it: keep
 * this consumer's long-pending entries from being reclaimed, trim capped
 * streams, sweep dead consumers. */
void tm_redis_tick(struct tm_broker *b)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256];
    int64_t now = tm_now_ms();
    /* delayed messages are promoted on a thread of their own, started
     * here: only a daemon ticks */
    tm_redis_sched_start(rb->sched);
    for (size_t i = 0; i < rb->ntasks; i++) {
        struct tm_redis_task *rt = &rb->tasks[i];
        if (now < rt->next_tick_ms)
            continue;
        rt->next_tick_ms = now + tm_redis_claim_period(rt->cfg);
        rt->tick_rounds++;
        int dead = refresh_held(rb, rt, eb, sizeof eb);
        if (!dead && rt->cfg->maxlen > 0 && rt->tick_rounds % 4 == 1)
            dead = trim(rb, rt, eb, sizeof eb);
        /* the tasks take turns over the 64 rounds (by index): an idle
         * daemon's sweep costs ntasks / 64 commands a claim period, not
         * all of them in one */
        if (!dead && (rt->tick_rounds + i) % 64 == 1)
            dead = sweep_consumers(rb, rt, eb, sizeof eb);
        if (dead) {
            tm_redis_wc_lost(rb, "upkeep", eb);
            return;
        }
    }
}

/* tm_redis_tick_ms is how often tm_redis_tick wants to run. */
int64_t tm_redis_tick_ms(struct tm_broker *b)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    int64_t ms = 1000;
    for (size_t i = 0; i < rb->ntasks; i++) {
        int64_t p = tm_redis_claim_period(rb->tasks[i].cfg);
        if (p < ms)
            ms = p;
    }
    return ms;
}
