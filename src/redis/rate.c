/* rate.c - rate_limit on Redis: one token bucket per task, shared by
 * every daemon that reads the task's queue and group.
 *
 * The bucket is the hash "<queue>.rate.<group>" (fields tokens, at) in
 * the task's slot, brought up to date by rate_script in the server's
 * clock (TIME), so the daemons' clocks do not matter. The intake holds
 * tokens taken from it (at most a burst) and reads no more entries than
 * it holds: nothing is read that cannot run at once. It asks for more
 * only when its tokens do not cover the task's room, and gives back what
 * it held unused for a second with its next request (the same command,
 * so giving back costs nothing). A daemon that dies holding tokens loses
 * them: the bucket refills as usual. */
#include "redis/redis.h"

#include <assert.h>
#include <string.h>

#include "task/flow.h"
#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* rate_script: KEYS[1] the bucket; ARGV rate_count, rate_period_ms,
 * burst, tokens given back, tokens wanted. Refills the bucket at the
 * server's time (a missing bucket is full), adds what is given back (at
 * most up to the burst), takes what it can of what is wanted. Returns
 * {taken, ms until the next token when none was taken, else 0}. The key
 * expires once it would be full anyway. */
static const char rate_script[] =
    "local cnt, per = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local cap, back = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local want = tonumber(ARGV[5])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000\n"
    "local s = redis.call('HMGET', KEYS[1], 'tokens', 'at')\n"
    "local tokens, at = tonumber(s[1]), tonumber(s[2])\n"
    "if tokens == nil or at == nil then tokens, at = cap, now end\n"
    "if now > at then\n"
    "  tokens = tokens + (now - at) * cnt / per\n"
    "  at = now\n"
    "end\n"
    "tokens = math.min(cap, tokens + back)\n"
    "local got = math.min(want, math.floor(tokens))\n"
    "tokens = tokens - got\n"
    "local wait = 0\n"
    "if got == 0 and want > 0 then\n"
    "  wait = math.max(1, math.ceil((1 - tokens) * per / cnt))\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at',\n"
    "  tostring(at))\n"
    "redis.call('PEXPIRE', KEYS[1], math.ceil(cap * per / cnt) + 1000)\n"
    "return {got, wait}\n";

/* rate_failed notes a failed take (the link opens its connections again
 * on the lane's next command). */
static void rate_failed(struct tm_redis *rb, struct tm_redis_lane *l,
                        const char *why)
{
    if (l->was_up || atomic_load(&rb->base.up))
        tm_log_warn(SRC, "intake of group '%s': rate_limit: %s; "
                    "reconnecting", l->group, why);
    l->was_up = 0;
    tm_redis_mark_down(rb);
}

/* takes says whether task ti of a lane asks its bucket this round. */
static int takes(const struct tm_redis *rb, size_t ti, const size_t *want,
                 const size_t *back)
{
    return rb->tasks[ti].cfg->rate_count != 0 &&
           (want[ti] != 0 || back[ti] != 0);
}

int tm_redis_rate_take(struct tm_broker *b, size_t li, const size_t *want,
                       const size_t *back, size_t *got, int64_t *wait_ms)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(li < rb->nlanes);
    struct tm_redis_lane *l = &rb->lanes[li];
    size_t n = 0;
    for (size_t i = 0; i < l->ntasks; i++) {
        size_t ti = l->tasks[i];
        got[ti] = 0;
        wait_ms[ti] = 0;
        n += (size_t)takes(rb, ti, want, back);
    }
    if (n == 0)
        return 0;
    /* one script per task, in its bucket's slot, all sent at once: one
     * round trip per node */
    struct tm_redis_cmd *cmds = tm_calloc(n, sizeof *cmds);
    size_t *tis = tm_calloc(n, sizeof *tis);
    const char **argv = tm_calloc(9 * n, sizeof *argv);
    char (*nums)[5][24] = tm_calloc(n, sizeof *nums);
    size_t k = 0;
    for (size_t i = 0; i < l->ntasks; i++) {
        size_t ti = l->tasks[i];
        const struct tm_cfg_task *t = rb->tasks[ti].cfg;
        if (!takes(rb, ti, want, back))
            continue;
        tm_snprintf(nums[k][0], 24, "%u", t->rate_count);
        tm_snprintf(nums[k][1], 24, "%lld", (long long)t->rate_period_ms);
        tm_snprintf(nums[k][2], 24, "%u", tm_flow_burst(t));
        tm_snprintf(nums[k][3], 24, "%zu", back[ti]);
        tm_snprintf(nums[k][4], 24, "%zu", want[ti]);
        const char **av = &argv[9 * k];
        av[0] = "EVAL";
        av[1] = rate_script;
        av[2] = "1";
        av[3] = rb->tasks[ti].rate_key;
        for (int j = 0; j < 5; j++)
            av[4 + j] = nums[k][j];
        cmds[k] = (struct tm_redis_cmd){.slot = rb->tasks[ti].slot,
                                        .argc = 9, .argv = av};
        tis[k++] = ti;
    }
    assert(k == n);
    char eb[256] = "";
    int rc = tm_redis_link_pipe(rb, &l->link, cmds, n, eb, sizeof eb);
    char why[256] = "";
    for (size_t c = 0; c < n && rc == 0; c++) {
        size_t ti = tis[c];
        const redisReply *r = cmds[c].reply;
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER &&
            r->element[0]->integer >= 0 &&
            (size_t)r->element[0]->integer <= want[ti]) {
            got[ti] = (size_t)r->element[0]->integer;
            wait_ms[ti] = r->element[1]->integer;
            continue;
        }
        /* a refused script takes nothing; the task waits a moment */
        if (why[0] == '\0')
            tm_snprintf(why, sizeof why, "%s",
                        r == NULL                     ? eb
                        : r->type == REDIS_REPLY_ERROR ? r->str
                                                       : "unexpected reply");
        wait_ms[ti] = 1000;
    }
    if (rc != 0) {
        rate_failed(rb, l, eb);
        for (size_t i = 0; i < l->ntasks; i++)
            got[l->tasks[i]] = 0;
    } else if (why[0] != '\0') {
        tm_log_warn(SRC, "intake of group '%s': rate_limit: %s", l->group,
                    why);
    }
    tm_redis_cmds_free(cmds, n);
    tm_free(nums);
    tm_free(argv);
    tm_free(tis);
    tm_free(cmds);
    return rc;
}
