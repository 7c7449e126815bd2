/* retry.c - the Redis adapter's durable retry schedule.
 *
 * A message to be retried stays pending in its group (so no other group
 * sees it again, and its delivery count, which is its attempt number,
 * moves with it) and its id goes into the sorted set
 * "<queue>.retry.<group>", scored by its due time in the Redis server's
 * clock (epoch ms). The schedule thus survives a reload, a crash and a
 * restart on another host. Each due id is taken back by exactly one
 * consumer, atomically (tm_redis_due_script: ZREM + XCLAIM in one
 * script); until then the reclaim and history reads skip it, and no
 * keep-alive refresh touches it (the consumer that scheduled it no longer
 * holds it).
 *
 * The due-time index: every retry set and scheduled set that has members
 * is a member of the sorted set "taskmill.due" (in a cluster, one per
 * slot: "taskmill.due.{N}", N chosen so that the key hashes to the slot
 * of the sets it indexes), scored by the set's earliest due time. Every
 * script that adds to or takes from a set sets its index entry in the
 * same script: ZADD LT where members are only added (the earliest can
 * only come sooner), the set's exact earliest (or ZREM when it is empty)
 * where members leave. So a daemon watches all its tasks' sets with one
 * read of the index per slot (scheduled.c), whatever the count of
 * tasks. */
#include "redis/redis.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "redis/keys.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* retry_script schedules a retry of ARGV[4] in ARGV[3] ms, but only when
 * the entry is still pending on this consumer (ARGV[2]): when another
 * consumer reclaimed it meanwhile, it is that one's to settle, and a
 * retry scheduled here would later take it from under its run. Running
 * it twice (a reply lost) only moves the due time. KEYS: stream, retry
 * set, due-time index. ARGV: group, consumer, delay ms, id. Returns the
 * due time (server epoch ms), or -1 when the entry is not ours. */
static const char retry_script[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[4], ARGV[4],"
    " 1)\n"
    "if #p == 0 or p[1][2] ~= ARGV[2] then return -1 end\n"
    "local t = redis.call('TIME')\n"
    "local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"
    " + tonumber(ARGV[3])\n"
    "redis.call('ZADD', KEYS[2], due, ARGV[4])\n"
    "redis.call('ZADD', KEYS[3], 'LT', due, KEYS[2])\n"
    "return due\n";

/* tm_redis_due_script: see redis.h. Ids due by the server's clock leave
 * the set and are claimed (XCLAIM, min-idle 0: the entry waits in the set
 * on a consumer that does not run it) by the consumer running the script;
 * an id whose entry was acknowledged or deleted meanwhile just leaves.
 * The set's index entry (KEYS[3]) is then its earliest left, or gone. */
const char tm_redis_due_script[] = TM_REDIS_LUA_TAKE
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now,\n"
    "  'LIMIT', 0, count)\n"
    "for _, id in ipairs(ids) do\n"
    "  if full() then break end\n"
    "  redis.call('ZREM', KEYS[2], id)\n"
    "  claim(id, 0)\n"
    "end\n"
    "local nxt = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
    "local wait = -1\n"
    "if #nxt > 0 then\n"
    "  wait = math.max(0, tonumber(nxt[2]) - now)\n"
    "  redis.call('ZADD', KEYS[3], nxt[2], KEYS[2])\n"
    "else\n"
    "  redis.call('ZREM', KEYS[3], KEYS[2])\n"
    "end\n"
    "return {tostring(wait), out}\n";

int tm_redis_retry_argv(struct tm_redis *rb, const struct tm_msg *m,
                        const char **argv, char delay[24])
{
    const struct tm_redis_task *rt = &rb->tasks[m->task_index];
    const struct tm_cfg_task *t = rt->cfg;
    tm_snprintf(delay, 24, "%lld",
                (long long)(m->retry_delay_ms > 0 ? m->retry_delay_ms : 0));
    const char *v[] = {"EVAL", retry_script, "3", t->queue, rt->retry_key,
                       rt->due_key, t->group, rb->consumer, delay, m->id};
    memcpy(argv, v, sizeof v);
    return (int)(sizeof v / sizeof v[0]);
}

void tm_redis_retry_note(struct tm_redis_task *rt, int64_t due_ms)
{
    long long cur = atomic_load(&rt->retry_hint_ms);
    while (due_ms < cur &&
           !atomic_compare_exchange_weak(&rt->retry_hint_ms, &cur, due_ms))
        ;
    /* due before the lane's read ends: end it early */
    if (due_ms < atomic_load(&rt->lane->block_end_ms))
        tm_redis_lane_poke(rt->lane);
}
