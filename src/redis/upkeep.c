/* upkeep.c - Redis upkeep: keep-alive refresh, trim, consumer sweep. */
#include "redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* tm_redis_claim_period is how often a task's entries are checked: a quarter of
 * claim_idle, between 50 ms and 5 s. */
int64_t tm_redis_claim_period(const struct tm_cfg_task *t)
{
    int64_t p = t->claim_idle_ms / 4;
    return p < 50 ? 50 : p > 5000 ? 5000 : p;
}

/* refresh_own resets the idle time of this consumer's entries that have
 * been pending for half the claim time (running long, queued, or waiting
 * for a retry), so that no other consumer reclaims live work. XCLAIM with
 * JUSTID does not count as a delivery. Returns 1 on connection loss. */
static int refresh_own(struct tm_redis *rb, struct tm_redis_task *rt,
                       redisContext *c, char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    char idle[24], count[24];
    tm_snprintf(idle, sizeof idle, "%lld", (long long)(t->claim_idle_ms / 2));
    tm_snprintf(count, sizeof count, "%d", TM_REDIS_ACK_CHUNK);
    const char *argv[] = {"XPENDING", t->queue, t->group, "IDLE", idle,
                          "-", "+", count, rb->consumer};
    redisReply *r = redisCommandArgv(c, 9, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = tm_redis_reply_error(c, r, eb, ebsize);
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
        dead = tm_redis_reply_error(c, x, eb, ebsize);
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

/* trim caps the stream at maxlen entries, but never removes an entry that
 * some group has not yet read or acknowledged: it trims (XTRIM MINID) up
 * to the oldest such entry at most. Work per round is bounded. */
static int trim(struct tm_redis *rb, struct tm_redis_task *rt, redisContext *c,
                char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    (void)rb;
    redisReply *len = redisCommand(c, "XLEN %s", t->queue);
    if (len == NULL || len->type != REDIS_REPLY_INTEGER) {
        dead = tm_redis_reply_error(c, len, eb, ebsize);
        goto out_len;
    }
    long long excess = len->integer - t->maxlen;
    if (excess <= 0)
        goto out_len;
    /* the oldest entry any group still needs */
    char safe[TM_REDIS_ID_MAX] = "";
    redisReply *groups = redisCommand(c, "XINFO GROUPS %s", t->queue);
    if (groups == NULL || groups->type != REDIS_REPLY_ARRAY) {
        dead = tm_redis_reply_error(c, groups, eb, ebsize);
        goto out_groups;
    }
    for (size_t i = 0; i < groups->elements; i++) {
        const redisReply *g = groups->element[i];
        const redisReply *name = tm_redis_reply_field(g, "name");
        const redisReply *pend = tm_redis_reply_field(g, "pending");
        const redisReply *last = tm_redis_reply_field(g, "last-delivered-id");
        if (name == NULL || pend == NULL || last == NULL)
            continue;
        char cand[TM_REDIS_ID_MAX];
        if (pend->integer > 0) {
            redisReply *p = redisCommand(c, "XPENDING %s %s", t->queue,
                                         name->str);
            if (p == NULL) {
                dead = tm_redis_reply_error(c, p, eb, ebsize);
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
            tm_redis_id_next(last->str, cand, sizeof cand);
        }
        if (safe[0] == '\0' || tm_redis_id_cmp(cand, safe) < 0)
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
        dead = range == NULL ? tm_redis_reply_error(c, range, eb,
                                           ebsize)
                             : 0;
        goto out_range;
    }
    const redisReply *lastover = range->element[range->elements - 1];
    char minid[TM_REDIS_ID_MAX];
    tm_redis_id_next(lastover->element[0]->str, minid, sizeof minid);
    if (tm_redis_id_cmp(safe, minid) < 0)
        tm_snprintf(minid, sizeof minid, "%s", safe);
    redisReply *x = redisCommand(c, "XTRIM %s MINID %s", t->queue,
                                 minid);
    if (x == NULL || x->type == REDIS_REPLY_ERROR)
        dead = tm_redis_reply_error(c, x, eb, ebsize);
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
static int sweep_consumers(struct tm_redis *rb, struct tm_redis_task *rt,
                           redisContext *c, char *eb, size_t ebsize)
{
    const struct tm_cfg_task *t = rt->cfg;
    long long limit = t->claim_idle_ms * 10;
    if (limit < 3600000)
        limit = 3600000;
    redisReply *r = redisCommand(c, "XINFO CONSUMERS %s %s", t->queue,
                                 t->group);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = tm_redis_reply_error(c, r, eb, ebsize);
        if (r != NULL)
            freeReplyObject(r);
        return dead;
    }
    int dead = 0;
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
        redisReply *d = redisCommand(c, "XGROUP DELCONSUMER %s %s %s",
                                     t->queue, t->group, name->str);
        if (d == NULL) {
            dead = tm_redis_reply_error(c, d, eb, ebsize);
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

/* tm_redis_tick is the settle thread's periodic upkeep, on its own connection
 * so that a busy intake (blocked on a full pool) cannot delay it: keep
 * this consumer's long-pending entries from being reclaimed, trim capped
 * streams, sweep dead consumers. */
void tm_redis_tick(struct tm_broker *b)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256];
    int64_t now = tm_now_ms();
    for (size_t i = 0; i < rb->ntasks; i++) {
        struct tm_redis_task *rt = &rb->tasks[i];
        if (now < rt->next_tick_ms)
            continue;
        if (tm_redis_wc_ready(rb, eb, sizeof eb) != 0)
            return;
        rt->next_tick_ms = now + tm_redis_claim_period(rt->cfg);
        rt->tick_rounds++;
        int dead = refresh_own(rb, rt, rb->wc, eb, sizeof eb);
        if (!dead && rt->cfg->maxlen > 0 && rt->tick_rounds % 4 == 1)
            dead = trim(rb, rt, rb->wc, eb, sizeof eb);
        if (!dead && rt->tick_rounds % 64 == 1)
            dead = sweep_consumers(rb, rt, rb->wc, eb, sizeof eb);
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
