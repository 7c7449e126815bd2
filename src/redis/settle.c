/* settle.c - Redis settlement: ack, retry, dead-letter (settle thread).
 *
 * One pipeline per call: a retry script per retried message, a
 * dead-letter script per dead-lettered one, a final script (reply.c) per
 * message that answers a request or records a dedup key, then one XACK
 * per task and chunk. Every command covers a contiguous run of msgs (a
 * span), so when the connection fails part-way, exactly the spans whose
 * replies were not read are returned as unsettled; a command the broker
 * refused (OOM, READONLY, WRONGTYPE ...) leaves its span unsettled too, to
 * be tried again. Each command is safe to run twice: XACK is, the retry
 * script only moves a due time, and the dead-letter and final scripts act
 * only while the entry is still pending. */
#include "redis/redis.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#define SRC TM_REDIS_SRC

/* Dead-letter one entry atomically, once: when ARGV[2] is still pending
 * in the group, XADD the dead letter (the body copied from the entry
 * inside Redis, so it never travels back and forth), then XACK. When the
 * entry is no longer pending (this script ran already and its reply was
 * lost, or the entry was settled elsewhere), nothing happens. When XADD
 * fails (OOM, READONLY, WRONGTYPE) the script stops before XACK: the
 * entry stays pending and the caller keeps the message unsettled.
 * KEYS: stream, dlq. ARGV: group, id, then field/value pairs. Returns the
 * dead letter's id, or 0 when the entry was not pending. */
static const char dead_script[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2],"
    " 1)\n"
    "if #p == 0 then return 0 end\n"
    "local body = ''\n"
    "local r = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
    "if #r > 0 and type(r[1][2]) == 'table' then\n"
    "  local f = r[1][2]\n"
    "  for i = 1, #f - 1, 2 do\n"
    "    if f[i] == 'body' then body = f[i + 1] break end\n"
    "  end\n"
    "end\n"
    "local id = redis.call('XADD', KEYS[2], '*', 'body', body,"
    " unpack(ARGV, 3))\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "return id\n";

/* A settlement the broker refuses is logged at most this often. */
#define TM_REDIS_REFUSED_LOG_MS 10000

/* struct tm_redis_span is one pipelined command: it settles
 * msgs[from..to). An answer of its own (answer_only, reply.c) settles
 * nothing: it precedes the final script of msgs[from]. */
struct tm_redis_span {
    size_t from, to;
    int answer_only;
};

static void argv_reserve(struct tm_redis *rb, size_t n)
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

/* scratch_reserve sizes the settle thread's order and span arrays for n
 * messages (spans: two per message at most). */
static void scratch_reserve(struct tm_redis *rb, size_t n)
{
    if (n <= rb->scratchcap)
        return;
    size_t cap = rb->scratchcap ? rb->scratchcap : 64;
    while (cap < n)
        cap *= 2;
    rb->order = tm_realloc(rb->order, cap * sizeof *rb->order);
    /* a message takes up to two commands (an answer of its own) */
    rb->spans = tm_realloc(rb->spans, 2 * cap * sizeof *rb->spans);
    rb->done = tm_realloc(rb->done, cap);
    rb->scratchcap = cap;
}

/* append_dead queues the dead-letter script for m. */
static void append_dead(struct tm_redis *rb, struct tm_msg *m)
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
                          "task", t->name,
                          "error", err,
                          "attempts", attempts,
                          "failed_at", failed_at,
                          "origin_id", m->id};
    tm_rconn_append_argv(rb->wc, (int)(sizeof argv / sizeof argv[0]),
                           argv, NULL);
}

/* cmp_task orders acks by task, so that each XACK covers a span. */
static int cmp_task(const void *a, const void *b)
{
    const struct tm_msg *x = *(struct tm_msg *const *)a;
    const struct tm_msg *y = *(struct tm_msg *const *)b;
    return x->task_index < y->task_index ? -1
                                         : x->task_index > y->task_index;
}

/* Settle classes, in command order. FINAL: an acknowledgement or dead
 * letter that also answers a request or records a dedup key (reply.c). */
enum settle_class { CL_RETRY, CL_DEAD, CL_FINAL, CL_ACK, CL_NONE, CL_N };

static enum settle_class class_of(const struct tm_redis *rb,
                                  const struct tm_msg *m)
{
    switch (m->settle) {
    case TM_SETTLE_RETRY:
        return CL_RETRY;
    case TM_SETTLE_DEAD:
        return tm_redis_final_needed(rb, m) ? CL_FINAL : CL_DEAD;
    case TM_SETTLE_ACK:
        return tm_redis_final_needed(rb, m) ? CL_FINAL : CL_ACK;
    case TM_SETTLE_NONE:
        break;
    }
    return CL_NONE;
}

/* order_work puts the messages to settle first: retries, dead letters,
 * final scripts, then acks by task; the rest (TM_SETTLE_NONE) after them.
 * Returns how many there are to settle. */
static size_t order_work(struct tm_redis *rb, struct tm_msg **msgs,
                         size_t n)
{
    size_t k = 0, acks = 0, work = 0;
    for (int cl = 0; cl < CL_N; cl++) {
        if (cl == CL_ACK)
            acks = k;
        if (cl == CL_NONE)
            work = k;
        for (size_t i = 0; i < n; i++)
            if (class_of(rb, msgs[i]) == (enum settle_class)cl)
                rb->order[k++] = msgs[i];
    }
    assert(k == n);
    qsort(rb->order + acks, work - acks, sizeof *rb->order, cmp_task);
    memcpy(msgs, rb->order, n * sizeof *msgs);
    return work;
}

/* append_acks queues one XACK per task and chunk over the acks in
 * msgs[from..to), recording their spans from span index ns on; returns
 * the new span count. */
static size_t append_acks(struct tm_redis *rb, struct tm_msg **msgs,
                          size_t from, size_t to, size_t ns)
{
    size_t i = from;
    argv_reserve(rb, 3 + TM_REDIS_ACK_CHUNK);
    while (i < to) {
        const struct tm_cfg_task *t = rb->tasks[msgs[i]->task_index].cfg;
        size_t start = i, argc = 3;
        rb->argv[0] = "XACK";
        rb->argvlen[0] = 4;
        rb->argv[1] = t->queue;
        rb->argvlen[1] = strlen(t->queue);
        rb->argv[2] = t->group;
        rb->argvlen[2] = strlen(t->group);
        while (i < to && msgs[i]->task_index == msgs[start]->task_index &&
               argc < 3 + TM_REDIS_ACK_CHUNK) {
            rb->argv[argc] = msgs[i]->id;
            rb->argvlen[argc] = msgs[i]->id_len;
            argc++;
            i++;
        }
        tm_rconn_append_argv(rb->wc, (int)argc, rb->argv, rb->argvlen);
        rb->spans[ns].from = start;
        rb->spans[ns].to = i;
        rb->spans[ns].answer_only = 0;
        ns++;
    }
    return ns;
}

/* span_done handles the reply to the command of one span: marks its
 * messages settled (rb->done and their batch's held record), or logs why
 * the broker refused it. */
static void span_done(struct tm_redis *rb, struct tm_msg **msgs,
                      const struct tm_redis_span *sp, const redisReply *r)
{
    struct tm_msg *m = msgs[sp->from];
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    if (r->type == REDIS_REPLY_ERROR && !sp->answer_only) {
        /* refused again every TM_RESETTLE_MS until the cause is gone:
         * one line per TM_REDIS_REFUSED_LOG_MS, with the count since */
        int64_t now = tm_now_ms();
        if (rb->refused_log_ms != 0 &&
            now - rb->refused_log_ms < TM_REDIS_REFUSED_LOG_MS) {
            rb->refused_unlogged++;
            return;
        }
        const char *what = m->settle == TM_SETTLE_RETRY  ? "retry"
                           : m->settle == TM_SETTLE_DEAD ? "dead-letter"
                                                         : "XACK";
        tm_log_write(TM_LOG_ERR, SRC, t->name,
                     sp->to - sp->from == 1 ? m->id : NULL,
                     "%s failed: %s; kept pending, to be settled again "
                     "(%lu refusals not logged since the last such line)",
                     what, r->str, rb->refused_unlogged);
        rb->refused_log_ms = now;
        rb->refused_unlogged = 0;
        return;
    }
    if (sp->answer_only) {
        tm_redis_final_done(rb, m, r, 1);
        return;
    }
    if (class_of(rb, m) == CL_FINAL)
        tm_redis_final_done(rb, m, r, 0);
    else if (m->settle == TM_SETTLE_RETRY) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer < 0)
            tm_log_write(TM_LOG_DEBUG, SRC, t->name, m->id,
                         "not scheduled for a retry: another consumer "
                         "holds the entry now");
        else
            tm_redis_retry_note(&rb->tasks[m->task_index],
                                tm_now_ms() + m->retry_delay_ms);
    } else if (m->settle == TM_SETTLE_DEAD &&
               r->type == REDIS_REPLY_INTEGER) {
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, m->id,
                     "not dead-lettered: no longer pending (done "
                     "already)");
    }
    for (size_t i = sp->from; i < sp->to; i++) {
        struct tm_redis_held *h = msgs[i]->batch->owner;
        h->settled[msgs[i] - msgs[i]->batch->msgs] = 1;
        rb->done[i] = 1;
    }
}

size_t tm_redis_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256];
    if (n == 0)
        return 0;
    scratch_reserve(rb, n);
    size_t work = order_work(rb, msgs, n);
    if (work == 0)
        return 0;
    memset(rb->done, 0, work);
    if (tm_redis_wc_ready(rb, eb, sizeof eb) != 0) {
        tm_redis_wc_lost(rb, "settle", eb);
        return work; /* msgs[0..work): none sent */
    }

    /* one pipeline: retries, dead letters, acks (order_work's order) */
    size_t ns = 0, i = 0;
    for (; i < work && msgs[i]->settle == TM_SETTLE_RETRY; i++) {
        tm_redis_retry_append(rb, rb->wc, msgs[i]);
        rb->spans[ns++] = (struct tm_redis_span){i, i + 1, 0};
    }
    for (; i < work && class_of(rb, msgs[i]) == CL_DEAD; i++) {
        append_dead(rb, msgs[i]);
        rb->spans[ns++] = (struct tm_redis_span){i, i + 1, 0};
    }
    for (; i < work && class_of(rb, msgs[i]) == CL_FINAL; i++) {
        if (tm_redis_final_append(rb, rb->wc, msgs[i]) == 2)
            rb->spans[ns++] = (struct tm_redis_span){i, i, 1};
        rb->spans[ns++] = (struct tm_redis_span){i, i + 1, 0};
    }
    ns = append_acks(rb, msgs, i, work, ns);

    /* replies come in the order of the commands */
    int lost = 0, moved = 0;
    for (size_t c = 0; c < ns; c++) {
        redisReply *vr = NULL;
        if (tm_rconn_get_reply(rb->wc, &vr) != 0) {
            tm_redis_reply_error(rb->wc, NULL, eb, sizeof eb);
            lost = 1;
            break; /* spans c.. stay unsettled: their replies are lost */
        }
        span_done(rb, msgs, &rb->spans[c], vr);
        if (vr->type == REDIS_REPLY_ERROR && tm_redis_error_moves(vr->str)) {
            /* no longer the master: the rest is read, then the
             * connection goes, and the next round finds the master */
            tm_snprintf(eb, sizeof eb, "%s", vr->str);
            moved = 1;
        }
        freeReplyObject(vr);
    }
    if (lost || moved) {
        tm_redis_wc_lost(rb, "settle", eb);
    } else if (!rb->wc_was_up) {
        rb->wc_was_up = 1;
        tm_redis_mark_up(rb);
    }

    /* the unsettled ones to the front, for the caller to settle again */
    size_t k = 0;
    for (size_t j = 0; j < work; j++) {
        if (!rb->done[j]) {
            struct tm_msg *m = msgs[j];
            msgs[j] = msgs[k];
            msgs[k++] = m;
        }
    }
    return k;
}
