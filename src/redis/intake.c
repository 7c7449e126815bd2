/* intake.c - Redis intake: new entries, own history, reclaim. */
#include "redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

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
    struct tm_redis_task *rt = b->msgs[0].bctx;
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
static struct tm_batch *entries_batch(struct tm_redis_task *rt,
                                      redisReply *reply,
                                      const redisReply *entries,
                                      size_t task_index,
                                      const struct tm_redis_retry *retries,
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

/* set_attempts sets each message's attempt to its delivery count, read
 * with one XPENDING over the batch's id range. Redis counts every
 * delivery (XREADGROUP, history reads, XCLAIM, XAUTOCLAIM; not JUSTID
 * claims), so the count is the number of this run, across crashes and
 * consumers. Returns 1 when the connection failed, else 0. */
static int set_attempts(struct tm_redis *rb, struct tm_redis_task *rt,
                        struct tm_batch *b)
{
    if (b == NULL || b->n == 0)
        return 0;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", (size_t)TM_REDIS_ACK_CHUNK * 4);
    const char *argv[] = {"XPENDING", rt->cfg->queue, rt->cfg->group,
                          b->msgs[0].id, b->msgs[b->n - 1].id, count,
                          rb->consumer};
    redisReply *r = redisCommandArgv(rt->rc, 7, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        int dead = tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
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
        while (j < b->n && tm_redis_id_cmp(b->msgs[j].id, e->element[0]->str) < 0)
            j++;
        if (j < b->n && strcmp(b->msgs[j].id, e->element[0]->str) == 0 &&
            e->element[3]->type == REDIS_REPLY_INTEGER)
            b->msgs[j].attempt = (unsigned)e->element[3]->integer;
    }
    freeReplyObject(r);
    return 0;
}

/* reclaim claims entries idle past claim_idle on other (dead) consumers
 * with XAUTOCLAIM, continuing its scan where the last round stopped. */
static int reclaim(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
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
        int dead = tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
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

/* maintain reclaims, at most every quarter of claim_idle, entries of dead
 * consumers for this task's intake; a reclaimed batch is returned in
 * *out. Returns -1 when the connection was lost. */
static int maintain(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
                    size_t max, struct tm_batch **out)
{
    int64_t now = tm_now_ms();
    if (now < rt->next_maint_ms)
        return 0;
    rt->next_maint_ms = now + tm_redis_claim_period(rt->cfg);
    return reclaim(rb, rt, ti, max, out) != 0 ? -1 : 0;
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
        tm_redis_close(rt->rc);
        rt->rc = NULL;
    }
}

/* read_failed handles a failed XREADGROUP: a deleted stream or group is
 * created again on the next call (0); anything else is a lost connection
 * (-1). */
static int read_failed(struct tm_redis *rb, struct tm_redis_task *rt, int dead)
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
static int read_history(struct tm_redis *rb, struct tm_redis_task *rt, size_t ti,
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
        dead = tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
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

int tm_redis_fetch(struct tm_broker *b, size_t ti, size_t max,
                    int timeout_ms, struct tm_batch **out)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    struct tm_redis_task *rt = &rb->tasks[ti];
    const struct tm_cfg_task *t = rt->cfg;
    int dead = 0;
    *out = NULL;
    tm_redis_collect(rt);
    if (max == 0)
        return 0;
    if (max > TM_REDIS_ACK_CHUNK)
        max = TM_REDIS_ACK_CHUNK;

    if (rt->rc == NULL) {
        rt->rc = tm_redis_connect(rb, (int64_t)timeout_ms + TM_REDIS_BLOCK_SLACK_MS,
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

    /* 1. retries that are due: claim them back (delivery count + 1) */
    struct tm_redis_retry due[64];
    int64_t next_ms = 0;
    size_t nd = tm_redis_retry_pop_due(rt, tm_now_ms(), max < 64 ? max : 64, due,
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
            dead = tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
            if (r != NULL)
                freeReplyObject(r);
            /* keep the retries for after the reconnect */
            for (size_t i = 0; i < nd; i++)
                tm_redis_retry_push(rt, &due[i]);
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
        dead = tm_redis_reply_error(rt->rc, r, rt->errstr, sizeof rt->errstr);
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
