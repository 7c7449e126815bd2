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

#include "flow.h"
#include "log.h"
#include "util.h"

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

char *tm_redis_rate_key(const struct tm_cfg_task *t)
{
    size_t n = strlen(t->queue) + strlen(t->group) + sizeof ".rate.";
    char *k = tm_malloc(n);
    tm_snprintf(k, n, "%s.rate.%s", t->queue, t->group);
    return k;
}

/* rate_failed closes the lane's connection after a failed take (the
 * lane reconnects on its next call). */
static void rate_failed(struct tm_redis *rb, struct tm_redis_lane *l,
                        const char *why)
{
    if (l->was_up || atomic_load(&rb->base.up))
        tm_log_warn(SRC, "intake of group '%s': rate_limit: %s; "
                    "reconnecting", l->group, why);
    l->was_up = 0;
    tm_redis_mark_down(rb);
    atomic_store(&l->client_id, 0);
    tm_rconn_close(l->rc);
    l->rc = NULL;
}

int tm_redis_rate_take(struct tm_broker *b, size_t li, const size_t *want,
                       const size_t *back, size_t *got, int64_t *wait_ms)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    assert(li < rb->nlanes);
    struct tm_redis_lane *l = &rb->lanes[li];
    size_t sent = 0;
    int rc = 0;
    for (size_t i = 0; i < l->ntasks; i++) {
        size_t ti = l->tasks[i];
        got[ti] = 0;
        wait_ms[ti] = 0;
    }
    if (l->rc == NULL && tm_redis_lane_connect(rb, l) != 0)
        return -1;
    /* one script per task, all sent at once: one round trip */
    for (size_t i = 0; i < l->ntasks; i++) {
        size_t ti = l->tasks[i];
        const struct tm_cfg_task *t = rb->tasks[ti].cfg;
        if (t->rate_count == 0 || (want[ti] == 0 && back[ti] == 0))
            continue;
        char cnt[24], per[24], cap[24], bk[24], wn[24];
        tm_snprintf(cnt, sizeof cnt, "%u", t->rate_count);
        tm_snprintf(per, sizeof per, "%lld", (long long)t->rate_period_ms);
        tm_snprintf(cap, sizeof cap, "%u", tm_flow_burst(t));
        tm_snprintf(bk, sizeof bk, "%zu", back[ti]);
        tm_snprintf(wn, sizeof wn, "%zu", want[ti]);
        const char *argv[] = {"EVAL", rate_script, "1",
                              rb->tasks[ti].rate_key, cnt, per, cap, bk, wn};
        if (tm_rconn_append_argv(l->rc, 9, argv, NULL) != 0) {
            rc = -1;
            break;
        }
        sent++;
    }
    /* every reply is read, also after an error one, to keep the
     * connection in step */
    char why[256] = "";
    for (size_t i = 0; i < l->ntasks && sent > 0 && rc == 0; i++) {
        size_t ti = l->tasks[i];
        const struct tm_cfg_task *t = rb->tasks[ti].cfg;
        if (t->rate_count == 0 || (want[ti] == 0 && back[ti] == 0))
            continue;
        sent--;
        redisReply *r = NULL;
        if (tm_rconn_get_reply(l->rc, &r) != 0) {
            rc = -1;
            break;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->type == REDIS_REPLY_INTEGER &&
            r->element[0]->integer >= 0 &&
            (size_t)r->element[0]->integer <= want[ti]) {
            got[ti] = (size_t)r->element[0]->integer;
            wait_ms[ti] = r->element[1]->integer;
        } else if (r->type == REDIS_REPLY_ERROR &&
                   tm_redis_error_moves(r->str)) {
            /* a failover: open the connection again, to the master */
            freeReplyObject(r);
            rc = -1;
            break;
        } else if (why[0] == '\0') {
            /* a refused script takes nothing; the task waits a moment */
            tm_snprintf(why, sizeof why, "%s",
                        r->type == REDIS_REPLY_ERROR ? r->str
                                                     : "unexpected reply");
            wait_ms[ti] = 1000;
        } else {
            wait_ms[ti] = 1000;
        }
        freeReplyObject(r);
    }
    if (rc != 0) {
        char eb[256];
        tm_redis_reply_error(l->rc, NULL, eb, sizeof eb);
        rate_failed(rb, l, eb);
        for (size_t i = 0; i < l->ntasks; i++)
            got[l->tasks[i]] = 0;
    } else if (why[0] != '\0') {
        tm_log_warn(SRC, "intake of group '%s': rate_limit: %s", l->group,
                    why);
    }
    return rc;
}
