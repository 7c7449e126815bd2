/* settle.c - Redis settlement: ack, retry, dead-letter (settle thread).
 *
 * Each message is classified once per call (tm_redis_settle_kind, reply.c:
 * retry, dead letter, final script with its final bits, ack, nothing);
 * its commands are built and their replies read from that kind, kept
 * with each command (struct tm_redis_span), never decided again.
 *
 * One pipeline per node and call: a retry script per retried message, a
 * dead-letter script per dead-lettered one, a final script (reply.c) per
 * message that answers a request or records a dedup key, then one XACK
 * per task and chunk; each command goes to the node of its task's slot
 * (the one server outside a cluster). Every command covers a contiguous
 * run of msgs (a span), so when a connection fails part-way, exactly the
 * spans whose replies were not read are returned as unsettled; a command
 * the broker refused (OOM, READONLY, WRONGTYPE ...) leaves its span
 * unsettled too, to be tried again. Each command is safe to run twice:
 * XACK is, the retry script only moves a due time, and the dead-letter
 * and final scripts act only while the entry is still pending.
 *
 * An answer of its own (cluster: reply_to in another slot than the
 * queue, maybe on another node) is sent in a first round, alone, and the
 * final script of its message only once the answer's reply came: the
 * answer is written before the acknowledgement. */
#include "redis/redis.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* Dead-letter one entry atomically, once: when ARGV[2] is still pending
 * in the group, XADD the dead letter (the body copied from the entry
 * inside Redis, so it never travels back and forth), then XACK. When the
 * entry is no longer pending (this script ran already and its reply was
 * lost, or the entry was settled elsewhere), nothing happens. When XADD
 * fails (OOM, READONLY, WRONGTYPE) the script stops before XACK: the
 * entry stays pending and the caller keeps the message unsettled.
 * KEYS: stream, dlq. ARGV: group, id, then field/value pairs. Returns the
 * dead letter's id, or 0 when the entry was not pending. The dead
 * letter also carries every other field of the entry (its metadata:
 * dedup_key, reply_to, correlation_id, traceparent, any other a producer
 * set), a field named as one of ARGV's left out, so that a replay gives
 * the message back whole. */
static const char dead_script[] =
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2],"
    " 1)\n"
    "if #p == 0 then return 0 end\n"
    "local d, own = {'body', ''}, {body = true}\n"
    "for i = 3, #ARGV - 1, 2 do\n"
    "  d[#d + 1] = ARGV[i]; d[#d + 1] = ARGV[i + 1]; own[ARGV[i]] = true\n"
    "end\n"
    "local r = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
    "if #r > 0 and type(r[1][2]) == 'table' then\n"
    "  local f = r[1][2]\n"
    "  for i = 1, #f - 1, 2 do\n"
    "    if f[i] == 'body' then d[2] = f[i + 1]\n"
    "    elseif not own[f[i]] then\n"
    "      d[#d + 1] = f[i]; d[#d + 1] = f[i + 1]; own[f[i]] = true\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local id = redis.call('XADD', KEYS[2], '*', unpack(d))\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "return id\n";

/* struct tm_redis_span is one pipelined command: it settles
 * msgs[from..to), all of one kind (tm_redis_settle_kind, decided once by
 * order_work). An answer of its own (answer_only, reply.c) settles
 * nothing: it precedes the final script of msgs[from], the next span. */
struct tm_redis_span {
    size_t from, to;
    int answer_only;
    size_t ni;                 /* the node it was sent to */
    int answered;              /* answer_only: its reply came */
    enum tm_redis_settle_kind kind;
    unsigned final;            /* TM_REDIS_SK_FINAL: its final bits */
};

/* The kind and final bits of one message, packed in rb->kinds. */
#define KIND_OF(k) ((enum tm_redis_settle_kind)((k) & 0x0f))
#define FINAL_OF(k) ((unsigned)(k) >> 4)

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
    rb->keys = tm_realloc(rb->keys, 2 * cap * sizeof *rb->keys);
    /* a message takes up to two commands (an answer of its own) */
    rb->spans = tm_realloc(rb->spans, 2 * cap * sizeof *rb->spans);
    rb->done = tm_realloc(rb->done, cap);
    rb->kinds = tm_realloc(rb->kinds, cap);
    rb->redo = tm_realloc(rb->redo, 2 * cap);
    rb->scratchcap = cap;
}

/* dead_argv fills argv (17 of them) with the dead-letter script for m;
 * nums is the buffers argv points into. */
static int dead_argv(struct tm_redis *rb, const struct tm_msg *m,
                     const char **argv, char nums[2][24])
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    tm_snprintf(nums[0], 24, "%u",
                m->outcome == TM_OUT_INVALID ? 0u : m->attempt);
    tm_snprintf(nums[1], 24, "%lld", (long long)tm_wall_ms());
    const char *err = m->error != NULL ? m->error : "";
    const char *v[] = {"EVAL", dead_script, "2", t->queue, t->dead_letter,
                       t->group, m->id,
                       "task", t->name,
                       "error", err,
                       "attempts", nums[0],
                       "failed_at", nums[1],
                       "origin_id", m->id};
    memcpy(argv, v, sizeof v);
    return (int)(sizeof v / sizeof v[0]);
}

/* The bits of an ack key: task, the batch's read (held->seq), the place
 * in the batch (a batch holds at most TM_REDIS_ACK_CHUNK messages). A
 * task index or place past its bits only mixes the order, which is never
 * needed for correctness: plan_acks cuts a span wherever the task
 * changes. */
#define TM_ACK_PLACE_BITS 12
#define TM_ACK_SEQ_BITS 32
_Static_assert(TM_REDIS_ACK_CHUNK <= (1 << TM_ACK_PLACE_BITS),
               "a batch's places fit in an ack key");

/* ack_key orders m among the acks: by task, then by id within the task.
 * A task's new entries come in id order, read after read and within each
 * read, so the read's count and the place in it stand for the id
 * without parsing it (entries claimed back, older, sort among them: only
 * a little slower, as without the sort). Redis removes a run of ids in
 * ascending order from the group's pending list (a radix tree) at less
 * cost than the same ids in the order the workers finish their chunks:
 * measured on a drain of a million noop messages, 1.32 s of Redis CPU
 * instead of 1.38 (thread x2 and x4). */
static uint64_t ack_key(const struct tm_msg *m)
{
    const struct tm_redis_held *h = m->batch->owner;
    uint64_t place = (uint64_t)(m - m->batch->msgs);
    return (uint64_t)m->task_index << (TM_ACK_SEQ_BITS + TM_ACK_PLACE_BITS) |
           (uint64_t)h->seq << TM_ACK_PLACE_BITS |
           (place & ((1u << TM_ACK_PLACE_BITS) - 1));
}

/* merge_runs merges the ascending runs of src[0 .. n) pairwise into dst;
 * returns how many runs there were. Stable. */
static size_t merge_runs(const struct tm_redis_ack_key *src,
                         struct tm_redis_ack_key *dst, size_t n)
{
    size_t runs = 0, i = 0;
    while (i < n) {
        size_t mid = i + 1, end;
        while (mid < n && src[mid - 1].key <= src[mid].key)
            mid++;
        end = mid;
        if (end < n) {
            end++;
            while (end < n && src[end - 1].key <= src[end].key)
                end++;
        }
        size_t a = i, b = mid, o = i;
        while (a < mid && b < end)
            dst[o++] = src[b].key < src[a].key ? src[b++] : src[a++];
        while (a < mid)
            dst[o++] = src[a++];
        while (b < end)
            dst[o++] = src[b++];
        runs += end > mid ? 2 : 1;
        i = end;
    }
    return runs;
}

/* in_order says whether v[0 .. n) is sorted by key. */
static int in_order(const struct tm_redis_ack_key *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (v[i - 1].key > v[i].key)
            return 0;
    return 1;
}

/* turn_descending reverses the strictly descending runs of v[0 .. n):
 * the settle thread's list gives each worker's chunk newest first. No
 * two keys of such a run are equal, so the sort stays stable. */
static void turn_descending(struct tm_redis_ack_key *v, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && v[j - 1].key > v[j].key)
            j++;
        for (size_t a = i, b = j - 1; a < b; a++, b--) {
            struct tm_redis_ack_key t = v[a];
            v[a] = v[b];
            v[b] = t;
        }
        i = j;
    }
}

struct tm_redis_ack_key *tm_redis_sort_keys(struct tm_redis_ack_key *v,
                                            struct tm_redis_ack_key *tmp,
                                            size_t n)
{
    if (in_order(v, n))
        return v;
    turn_descending(v, n);
    if (in_order(v, n))
        return v;
    /* each pass halves the runs; the pass that found two or fewer left
     * one, in tmp */
    while (merge_runs(v, tmp, n) > 2) {
        struct tm_redis_ack_key *t = v;
        v = tmp;
        tmp = t;
    }
    return tmp;
}

/* sort_acks puts the acks msgs[0 .. n) in ack_key order. */
static void sort_acks(struct tm_redis *rb, struct tm_msg **msgs, size_t n)
{
    struct tm_redis_ack_key *v = rb->keys;
    for (size_t i = 0; i < n; i++)
        v[i] = (struct tm_redis_ack_key){ack_key(msgs[i]), msgs[i]};
    v = tm_redis_sort_keys(v, rb->keys + rb->scratchcap, n);
    for (size_t i = 0; i < n; i++)
        msgs[i] = v[i].m;
}

_Static_assert(TM_REDIS_SK_N <= 0x10, "a kind fits in 4 bits");
_Static_assert((TM_REDIS_FINAL_ANSWER | TM_REDIS_FINAL_APART |
                TM_REDIS_FINAL_RECORD) <= 0x0f,
               "the final bits fit in 4 bits");

/* order_work classifies each message once (tm_redis_settle_kind, reply.c)
 * and puts the messages to settle first, in command order: retries, dead
 * letters, final scripts, then acks by task; the rest (TM_SETTLE_NONE)
 * after them. rb->kinds[i] is then msgs[i]'s kind and final bits, which
 * every later step reads instead of deciding again. Returns how many
 * there are to settle. */
static size_t order_work(struct tm_redis *rb, struct tm_msg **msgs,
                         size_t n)
{
    /* a counting sort on the kind (kept in rb->done meanwhile), stable
     * within each kind */
    size_t at[TM_REDIS_SK_N + 1] = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned final;
        enum tm_redis_settle_kind k = tm_redis_settle_kind(rb, msgs[i],
                                                           &final);
        rb->done[i] = (unsigned char)(k | final << 4);
        at[k + 1]++;
    }
    for (int k = 0; k < TM_REDIS_SK_N; k++)
        at[k + 1] += at[k];
    size_t acks = at[TM_REDIS_SK_ACK], work = at[TM_REDIS_SK_NONE];
    for (size_t i = 0; i < n; i++) {
        size_t to = at[KIND_OF(rb->done[i])]++;
        rb->order[to] = msgs[i];
        rb->kinds[to] = rb->done[i];
    }
    assert(at[TM_REDIS_SK_N - 1] == n);
    /* the acks by task, and by id within each task (one kind: their
     * rb->kinds stay as they are) */
    sort_acks(rb, rb->order + acks, work - acks);
    memcpy(msgs, rb->order, n * sizeof *msgs);
    return work;
}

/* plan_acks records one span per task and chunk over the acks in
 * msgs[from..to), from span index ns on; returns the new span count. */
static size_t plan_acks(struct tm_msg **msgs, size_t from, size_t to,
                        struct tm_redis_span *spans, size_t ns)
{
    size_t i = from;
    while (i < to) {
        size_t start = i;
        while (i < to && msgs[i]->task_index == msgs[start]->task_index &&
               i - start < TM_REDIS_ACK_CHUNK)
            i++;
        spans[ns] = (struct tm_redis_span){start, i, 0, 0, 0,
                                           TM_REDIS_SK_ACK, 0};
        ns++;
    }
    return ns;
}

/* span_argv fills rb->argv and rb->argvlen with the command of span sp
 * and returns its count; nums and f are scratch they may point into
 * (f: a final settlement's, freed by the caller with
 * tm_redis_final_free). */
static int span_argv(struct tm_redis *rb, struct tm_msg **msgs,
                     const struct tm_redis_span *sp, char nums[2][24],
                     struct tm_redis_final *f)
{
    const struct tm_msg *m = msgs[sp->from];
    int argc;
    argv_reserve(rb, 3 + TM_REDIS_ACK_CHUNK);
    if (sp->kind == TM_REDIS_SK_FINAL) {
        tm_redis_final_argv(rb, m, sp->final, sp->answer_only, f);
        memcpy(rb->argv, f->argv, (size_t)f->argc * sizeof *rb->argv);
        memcpy(rb->argvlen, f->lens, (size_t)f->argc * sizeof *rb->argvlen);
        return f->argc;
    }
    if (sp->kind == TM_REDIS_SK_RETRY) {
        argc = tm_redis_retry_argv(rb, m, rb->argv, nums[0]);
    } else if (sp->kind == TM_REDIS_SK_DEAD) {
        argc = dead_argv(rb, m, rb->argv, nums);
    } else {
        const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
        argc = 0;
        rb->argv[argc++] = "XACK";
        rb->argv[argc++] = t->queue;
        rb->argv[argc++] = t->group;
        for (size_t i = sp->from; i < sp->to; i++) {
            rb->argvlen[argc] = msgs[i]->id_len;
            rb->argv[argc++] = msgs[i]->id;
        }
        for (int a = 0; a < 3; a++)
            rb->argvlen[a] = strlen(rb->argv[a]);
        return argc;
    }
    for (int a = 0; a < argc; a++)
        rb->argvlen[a] = strlen(rb->argv[a]);
    return argc;
}

/* span_slot is the slot of the keys of span sp's command. */
static unsigned span_slot(struct tm_redis *rb, struct tm_msg **msgs,
                          const struct tm_redis_span *sp)
{
    const struct tm_msg *m = msgs[sp->from];
    if (sp->answer_only)
        return tm_redis_key_slot(m->reply_to, m->reply_to_len);
    return rb->tasks[m->task_index].slot;
}

/* span_refused logs why the broker refused the command of one span. */
static void span_refused(struct tm_redis *rb, struct tm_msg **msgs,
                         const struct tm_redis_span *sp, const char *err)
{
    struct tm_msg *m = msgs[sp->from];
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    /* refused again every TM_RESETTLE_MS until the cause is gone:
     * one line per TM_REDIS_REFUSED_LOG_MS, with the count since */
    unsigned long unlogged;
    if (!tm_log_gate_pass(&rb->refused_gate, tm_now_ms(), &unlogged))
        return;
    /* a final script settles an acknowledgement or a dead letter */
    const char *what = sp->kind == TM_REDIS_SK_RETRY ? "retry"
                       : m->settle == TM_SETTLE_DEAD ? "dead-letter"
                                                     : "XACK";
    tm_log_write(TM_LOG_ERR, SRC, t->name,
                 sp->to - sp->from == 1 ? m->id : NULL,
                 "%s failed: %s; kept pending, to be settled again "
                 "(%lu refusals not logged since the last such line)",
                 what, err, unlogged);
}

/* span_done handles the reply to the command of one span: marks its
 * messages settled (rb->done and their batch's held record), or logs why
 * the broker refused it. */
static void span_done(struct tm_redis *rb, struct tm_msg **msgs,
                      struct tm_redis_span *sp, const redisReply *r)
{
    struct tm_msg *m = msgs[sp->from];
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    if (sp->answer_only) {
        sp->answered = 1;
        tm_redis_final_done(rb, m, r, 1);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        span_refused(rb, msgs, sp, r->str);
        return;
    }
    if (sp->kind == TM_REDIS_SK_FINAL)
        tm_redis_final_done(rb, m, r, 0);
    else if (sp->kind == TM_REDIS_SK_RETRY) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer < 0)
            tm_log_write(TM_LOG_DEBUG, SRC, t->name, m->id,
                         "not scheduled for a retry: another consumer "
                         "holds the entry now");
        else
            tm_redis_retry_note(&rb->tasks[m->task_index],
                                tm_now_ms() + m->retry_delay_ms);
    } else if (sp->kind == TM_REDIS_SK_DEAD &&
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

/* redo sends the command of span c again on its own, following the
 * cluster's redirects (its pipelined reply was MOVED, ASK, TRYAGAIN or
 * CLUSTERDOWN). Returns 1 when a connection was lost. */
static int redo(struct tm_redis *rb, struct tm_msg **msgs, size_t c,
                char *eb, size_t ebsize)
{
    struct tm_redis_span *sp = &rb->spans[c];
    char nums[2][24];
    struct tm_redis_final f = {0};
    int argc = span_argv(rb, msgs, sp, nums, &f);
    int dead = 0;
    redisReply *r = tm_redis_link_run(rb, &rb->settle,
                                      span_slot(rb, msgs, sp), argc,
                                      rb->argv, rb->argvlen, 0, 0, eb,
                                      ebsize, &dead);
    tm_redis_final_free(&f);
    if (r != NULL) {
        span_done(rb, msgs, sp, r);
        freeReplyObject(r);
    } else if (!dead && sp->answer_only) {
        /* failed: logged, and the request is settled all the same */
        sp->answered = 1;
        tm_log_write(TM_LOG_WARNING, SRC,
                     rb->tasks[msgs[sp->from]->task_index].cfg->name,
                     msgs[sp->from]->id,
                     "answer failed: %s; the requester gets none", eb);
    } else if (!dead) {
        span_refused(rb, msgs, sp, eb);
    }
    return dead;
}

/* send_round sends the spans of one round (answers: the answers of their
 * own; else the rest, but no final script whose answer got no reply), one
 * pipeline per node, and reads their replies; redirected ones are sent
 * again alone. Returns 1 when a connection was lost or its server is no
 * longer the master (the reason in eb). */
static int send_round(struct tm_redis *rb, struct tm_msg **msgs, size_t ns,
                      int answers, char *eb, size_t ebsize)
{
    int lost = 0;
    unsigned char broken[TM_REDIS_MAX_NODES] = {0};
    unsigned char moved[TM_REDIS_MAX_NODES] = {0};
    for (size_t c = 0; c < ns; c++) {
        struct tm_redis_span *sp = &rb->spans[c];
        rb->redo[c] = 0;
        sp->ni = TM_REDIS_NO_NODE; /* not sent: stays unsettled */
        if (sp->answer_only != answers)
            continue;
        if (!answers && c > 0 && rb->spans[c - 1].answer_only &&
            !rb->spans[c - 1].answered)
            continue; /* its answer first, in a later call */
        size_t ni = tm_redis_slot_node(rb, span_slot(rb, msgs, sp), eb,
                                       ebsize);
        struct tm_rconn *conn =
            ni == TM_REDIS_NO_NODE || broken[ni]
                ? NULL
                : tm_redis_link_get(rb, &rb->settle, ni, eb, ebsize);
        if (conn == NULL) {
            if (ni != TM_REDIS_NO_NODE)
                broken[ni] = 1;
            lost = 1;
            continue;
        }
        char nums[2][24];
        struct tm_redis_final f = {0};
        int argc = span_argv(rb, msgs, sp, nums, &f);
        tm_rconn_append_argv(conn, argc, rb->argv, rb->argvlen);
        tm_redis_final_free(&f);
        sp->ni = ni;
    }

    /* each connection's replies come in the order of its commands */
    for (size_t c = 0; c < ns; c++) {
        size_t ni = rb->spans[c].ni;
        if (ni == TM_REDIS_NO_NODE || broken[ni])
            continue; /* not sent, or its reply is lost: unsettled */
        struct tm_rconn *conn = rb->settle.c[ni];
        redisReply *vr = NULL;
        if (tm_rconn_get_reply(conn, &vr) != 0) {
            tm_redis_reply_error(conn, NULL, eb, ebsize);
            broken[ni] = 1;
            lost = 1;
            continue;
        }
        unsigned s;
        char host[256];
        int port;
        if (vr->type == REDIS_REPLY_ERROR && rb->cluster &&
            tm_redis_redirect_of(vr->str, &s, host, sizeof host, &port) !=
                TM_REDIS_NO_REDIRECT) {
            rb->redo[c] = 1;
        } else {
            span_done(rb, msgs, &rb->spans[c], vr);
        }
        if (vr->type == REDIS_REPLY_ERROR && tm_redis_error_moves(vr->str)) {
            /* no longer the master: the rest is read, then the
             * connection goes, and the next round finds the master */
            tm_snprintf(eb, ebsize, "%s", vr->str);
            moved[ni] = 1;
        }
        freeReplyObject(vr);
    }
    for (size_t ni = 0; ni < TM_REDIS_MAX_NODES; ni++) {
        if (broken[ni] && rb->cluster && rb->settle.c[ni] != NULL)
            atomic_store(&rb->nodes[ni].unreachable, 1);
        if (broken[ni] || moved[ni])
            tm_redis_link_drop(rb, &rb->settle, ni);
        if (moved[ni])
            lost = 1;
    }
    /* redirected commands, each on its own now */
    for (size_t c = 0; c < ns && !lost; c++)
        if (rb->redo[c] && redo(rb, msgs, c, eb, ebsize))
            lost = 1;
    return lost;
}

size_t tm_redis_settle(struct tm_broker *b, struct tm_msg **msgs, size_t n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[512];
    if (n == 0)
        return 0;
    scratch_reserve(rb, n);
    size_t work = order_work(rb, msgs, n);
    if (work == 0)
        return 0;
    memset(rb->done, 0, work);

    /* the commands: retries, dead letters, final scripts (each after its
     * answer of its own, if any), acks (order_work's order) */
    size_t ns = 0, i = 0;
    int cross = 0;
    for (; i < work && KIND_OF(rb->kinds[i]) != TM_REDIS_SK_ACK; i++) {
        enum tm_redis_settle_kind k = KIND_OF(rb->kinds[i]);
        unsigned final = FINAL_OF(rb->kinds[i]);
        if (final & TM_REDIS_FINAL_APART) {
            rb->spans[ns++] = (struct tm_redis_span){i, i, 1, 0, 0, k,
                                                     final};
            cross = 1;
        }
        rb->spans[ns++] = (struct tm_redis_span){i, i + 1, 0, 0, 0, k,
                                                 final};
    }
    ns = plan_acks(msgs, i, work, rb->spans, ns);
    assert(ns <= 2 * rb->scratchcap);

    /* answers of their own first, then the rest */
    int lost = cross && send_round(rb, msgs, ns, 1, eb, sizeof eb);
    if (send_round(rb, msgs, ns, 0, eb, sizeof eb))
        lost = 1;

    if (lost) {
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
