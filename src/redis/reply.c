/* reply.c - Redis request/reply: answers written with the settlement
 * (settle thread), and the CLI's request (emit --wait).
 *
 * A request is an entry with the field reply_to (a stream key) and
 * optionally correlation_id. Its final outcome (success, duplicate,
 * rejected, dead-lettered after its retries, invalid) is answered by an
 * entry added to reply_to, fields taskmill_reply (the task's name, the
 * marker of a reply stream, always the entry's first field), body (the
 * result, null, or an error object), outcome, attempts, in_reply_to (the
 * request's id) and correlation_id when the request had one; reply_to
 * then expires after the task's reply_ttl. A retry answers nothing.
 *
 * A producer chooses reply_to, so the answer is written only to a key
 * that cannot be anything but a reply stream: one that does not exist,
 * or a stream without consumer groups, with an expiry, whose newest
 * entry starts with the marker (the newest entry: trimming takes the
 * oldest). Any other reply_to (a task queue, a dead-letter stream, any
 * key of another type, a stream without expiry) is refused: nothing is
 * written to it, its expiry is left alone, the request is settled as
 * usual, the refusal is logged (TM_REPLY_LOG_BURST lines per task per
 * TM_REPLY_LOG_MS at most) and counted in the task's replies_refused.
 * The check and the write are one script (reply_check below), so no
 * command of another client comes between them.
 *
 * The answer is written by the script that acknowledges the request
 * (final_script), pipelined with the other settlements: no round trip of
 * its own. The script answers only while the request is pending, so an
 * answer and its acknowledgement happen together or not at all; a crash
 * before the script leaves the request pending, to be run again and
 * answered then: at least once. In cluster mode a reply_to in another
 * slot than the queue cannot be written by that script: the answer is
 * then its own script (answer_script, same check), sent to reply_to's
 * node, and the final script is sent only once the answer's reply came
 * (settle.c), so it is written before the acknowledgement and may, after
 * a crash between the two, be written twice (at least once). An answer
 * refused, or that Redis fails, is logged and dropped; the request is
 * acknowledged all the same, for a requester's mistake must not hold the
 * queue.
 *
 * The same script records a success under its dedup key (dedup.c). */
#include "redis/redis.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "task/task.h"
#include "util/log.h"
#include "redis/keys.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* reply_check defines refusal(k): false when an answer may be written to
 * key k (it does not exist, or is a reply stream: no consumer groups, an
 * expiry, its newest entry starts with the marker field taskmill_reply),
 * else why not. Read-only, so a refused key is left as it was. */
#define TM_REPLY_CHECK                                                    \
    "local function refusal(k)\n"                                          \
    "  local t = redis.call('TYPE', k)['ok']\n"                            \
    "  if t == 'none' then return false end\n"                             \
    "  if t ~= 'stream' then return 'it holds a ' .. t .. ', not a "        \
    "stream' end\n"                                                        \
    "  if #redis.call('XINFO', 'GROUPS', k) > 0 then\n"                    \
    "    return 'it is a stream with consumer groups (a task queue?)'\n"   \
    "  end\n"                                                              \
    "  if redis.call('PTTL', k) < 0 then\n"                                \
    "    return 'it is a stream without expiry, not a reply stream'\n"     \
    "  end\n"                                                              \
    "  local e = redis.call('XREVRANGE', k, '+', '-', 'COUNT', 1)\n"       \
    "  if #e == 0 or type(e[1][2]) ~= 'table' or\n"                        \
    "      e[1][2][1] ~= 'taskmill_reply' then\n"                          \
    "    return 'its newest entry is not a taskmill answer'\n"             \
    "  end\n"                                                              \
    "  return false\n"                                                     \
    "end\n"

/* Settle one message that answers a request or records a dedup key, when
 * ARGV[2] is still pending in the group: with ARGV[5] > 0 and outcome
 * success, SET KEYS[4] (the dedup key) to the answer body for ARGV[5] ms
 * unless it exists, and when it does, the outcome becomes duplicate with
 * the stored body; with ARGV[3] = 1 add the dead letter to KEYS[2] (body
 * copied from the entry, fields ARGV[11..], then every other field of the
 * entry, its metadata: dedup_key, reply_to, correlation_id, traceparent
 * and any other a producer set, a field named as one of ARGV[11..] left
 * out, so a replay can give them back); with ARGV[4] > 0 answer on
 * KEYS[3] unless refusal() refuses it, and expire it after ARGV[4] ms;
 * then XACK. Unused keys are given as KEYS[1]. KEYS: stream, dead-letter
 * stream, reply_to, dedup key. ARGV: group, id, dead, reply_ttl,
 * dedup_ttl, outcome, attempts, answer body, correlation id, 1 when
 * there is one, then the dead-letter fields, always starting with
 * 'task', the task's name (the answer's marker value). Returns {0} when
 * the entry was not pending, else {1 or 2 (turned into a duplicate), the
 * answer's error or '', why the answer was refused or ''}. */
static const char final_script[] =
    TM_REPLY_CHECK
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2],"
    " 1)\n"
    "if #p == 0 then return {0} end\n"
    "local outcome, body, ret = ARGV[6], ARGV[8], 1\n"
    "if ARGV[5] ~= '0' and outcome == 'success' then\n"
    "  if not redis.call('SET', KEYS[4], body, 'PX', ARGV[5], 'NX') then\n"
    "    outcome, ret = 'duplicate', 2\n"
    "    body = redis.call('GET', KEYS[4]) or 'null'\n"
    "  end\n"
    "end\n"
    "if ARGV[3] == '1' then\n"
    "  local d, own = {'body', ''}, {body = true}\n"
    "  for i = 11, #ARGV - 1, 2 do\n"
    "    d[#d + 1] = ARGV[i]; d[#d + 1] = ARGV[i + 1]; own[ARGV[i]] = true\n"
    "  end\n"
    "  local r = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
    "  if #r > 0 and type(r[1][2]) == 'table' then\n"
    "    local f = r[1][2]\n"
    "    for i = 1, #f - 1, 2 do\n"
    "      if f[i] == 'body' then d[2] = f[i + 1]\n"
    "      elseif not own[f[i]] then\n"
    "        d[#d + 1] = f[i]; d[#d + 1] = f[i + 1]; own[f[i]] = true\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  redis.call('XADD', KEYS[2], '*', unpack(d))\n"
    "end\n"
    "local aerr, why = '', ''\n"
    "if ARGV[4] ~= '0' then\n"
    "  why = refusal(KEYS[3]) or ''\n"
    "end\n"
    "if ARGV[4] ~= '0' and why == '' then\n"
    "  local a = {'taskmill_reply', ARGV[12], 'body', body,\n"
    "    'outcome', outcome, 'attempts', ARGV[7], 'in_reply_to', ARGV[2]}\n"
    "  if ARGV[10] == '1' then\n"
    "    a[#a + 1] = 'correlation_id'\n"
    "    a[#a + 1] = ARGV[9]\n"
    "  end\n"
    "  local x = redis.pcall('XADD', KEYS[3], '*', unpack(a))\n"
    "  if type(x) == 'table' and x.err then aerr = x.err\n"
    "  else redis.call('PEXPIRE', KEYS[3], ARGV[4]) end\n"
    "end\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "return {ret, aerr, why}\n";

/* answer_script writes an answer on its own (cluster mode, reply_to in
 * another slot): unless refusal() refuses KEYS[1], XADD the field/value
 * pairs ARGV[2..] (the first one the marker) to it, then expire it after
 * ARGV[1] ms. Returns '' when written, else why it was refused. */
static const char answer_script[] =
    TM_REPLY_CHECK
    "local why = refusal(KEYS[1])\n"
    "if why then return why end\n"
    "redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[1])\n"
    "return ''\n";

/* Size of a UUID's text with its NUL. */
#define TM_REDIS_UUID_LEN 37

/* is says whether the string reply k is name. */
static int is(const redisReply *k, const char *name)
{
    return k->len == strlen(name) && memcmp(k->str, name, k->len) == 0;
}

void tm_redis_meta_field(struct tm_msg *m, const redisReply *k,
                         const redisReply *v)
{
    /* an empty value is no value: as if the field were not there */
    if (v->len == 0)
        return;
    if (is(k, "reply_to")) {
        m->reply_to = v->str;
        m->reply_to_len = v->len;
    } else if (is(k, "correlation_id")) {
        m->correlation_id = v->str;
        m->correlation_id_len = v->len;
    } else if (is(k, "dedup_key")) {
        m->dedup_key = v->str;
        m->dedup_key_len = v->len;
    }
}

/* answers says whether m's settlement answers a request. */
static int answers(const struct tm_msg *m)
{
    return m->reply_to != NULL &&
           (m->settle == TM_SETTLE_ACK || m->settle == TM_SETTLE_DEAD);
}

/* records says whether m's settlement records its dedup key. */
static int records(const struct tm_redis *rb, const struct tm_msg *m)
{
    return m->dedup_key != NULL && m->outcome == TM_OUT_SUCCESS &&
           m->settle == TM_SETTLE_ACK &&
           rb->tasks[m->task_index].cfg->dedup_ttl_ms > 0;
}

/* cross_slot says whether m's reply_to cannot be written by the script
 * that acknowledges m: another slot than the queue's, in cluster mode. */
static int cross_slot(const struct tm_redis *rb, const struct tm_msg *m)
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    return rb->cluster &&
           tm_redis_key_slot(m->reply_to, m->reply_to_len) !=
               tm_redis_key_slot(t->queue, strlen(t->queue));
}

enum tm_redis_settle_kind tm_redis_settle_kind(const struct tm_redis *rb,
                                               const struct tm_msg *m,
                                               unsigned *final)
{
    *final = 0;
    switch (m->settle) {
    case TM_SETTLE_RETRY:
        return TM_REDIS_SK_RETRY; /* a retry answers nothing */
    case TM_SETTLE_DEAD:
    case TM_SETTLE_ACK:
        if (answers(m))
            *final |= cross_slot(rb, m) ? TM_REDIS_FINAL_APART
                                        : TM_REDIS_FINAL_ANSWER;
        if (records(rb, m))
            *final |= TM_REDIS_FINAL_RECORD;
        if (*final != 0)
            return TM_REDIS_SK_FINAL;
        return m->settle == TM_SETTLE_DEAD ? TM_REDIS_SK_DEAD
                                           : TM_REDIS_SK_ACK;
    case TM_SETTLE_NONE:
        break;
    }
    return TM_REDIS_SK_NONE;
}

/* answer_body returns m's answer: its result (null when none) for a
 * success or a duplicate, else the error object RabbitMQ answers carry.
 * The caller frees it. */
static char *answer_body(const struct tm_redis *rb, const struct tm_msg *m,
                         unsigned attempts)
{
    if (m->outcome == TM_OUT_SUCCESS || m->outcome == TM_OUT_DUPLICATE)
        return m->result != NULL ? tm_strndup(m->result, m->result_len)
                                 : tm_strdup("null");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", m->error != NULL
                                            ? m->error
                                            : tm_outcome_label(m->outcome));
    cJSON_AddStringToObject(o, "outcome", tm_outcome_label(m->outcome));
    cJSON_AddNumberToObject(o, "attempts", attempts);
    cJSON_AddStringToObject(o, "task", rb->tasks[m->task_index].cfg->name);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *out = tm_strdup(s != NULL ? s : "null");
    cJSON_free(s);
    return out;
}

/* attempts_of is the attempt count an answer or dead letter states: 0 for
 * an invalid body, which never ran. */
static unsigned attempts_of(const struct tm_msg *m)
{
    return m->outcome == TM_OUT_INVALID ? 0u : m->attempt;
}

void tm_redis_final_argv(struct tm_redis *rb, const struct tm_msg *m,
                         unsigned final, int answer_only,
                         struct tm_redis_final *f)
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    int dead = m->settle == TM_SETTLE_DEAD;
    int here = (final & TM_REDIS_FINAL_ANSWER) != 0;
    char *attempts = f->nums[0], *failed_at = f->nums[1];
    char *rttl = f->nums[2], *dttl = f->nums[3], *attl = f->nums[4];
    tm_snprintf(attempts, 24, "%u", attempts_of(m));
    tm_snprintf(failed_at, 24, "%lld", (long long)tm_wall_ms());
    tm_snprintf(rttl, 24, "%lld", here ? (long long)t->reply_ttl_ms : 0LL);
    tm_snprintf(dttl, 24, "%lld",
                final & TM_REDIS_FINAL_RECORD ? (long long)t->dedup_ttl_ms
                                              : 0LL);
    tm_snprintf(attl, 24, "%lld", (long long)t->reply_ttl_ms);
    f->body = answer_body(rb, m, attempts_of(m));
    f->dkey = m->dedup_key != NULL
                  ? tm_redis_dedup_key(t, m->dedup_key, m->dedup_key_len)
                  : NULL;
    const char *outcome = tm_outcome_label(m->outcome);
    const char *corr = m->correlation_id != NULL ? m->correlation_id : "";
    size_t corr_len = m->correlation_id != NULL ? m->correlation_id_len : 0;

    if (answer_only) {
        /* its own command, in reply_to's slot, before the final script */
        assert((final & TM_REDIS_FINAL_APART) != 0);
        const char *av[] = {"EVAL", answer_script, "1", m->reply_to,
                            attl, "taskmill_reply", t->name, "body",
                            f->body, "outcome", outcome, "attempts",
                            attempts, "in_reply_to", m->id,
                            "correlation_id", corr};
        size_t n = sizeof av / sizeof av[0];
        static_assert(sizeof av / sizeof av[0] <= 28, "argv fits");
        for (size_t i = 0; i < n; i++) {
            f->argv[i] = av[i];
            f->lens[i] = strlen(av[i]);
        }
        f->lens[3] = m->reply_to_len;
        f->lens[14] = m->id_len;
        f->lens[16] = corr_len;
        f->argc = (int)n - (corr_len > 0 ? 0 : 2);
        f->slot = tm_redis_key_slot(m->reply_to, m->reply_to_len);
        return;
    }
    const char *err = m->error != NULL ? m->error : "";
    const char *av[] = {"EVAL", final_script, "4", t->queue, t->dead_letter,
                        here ? m->reply_to : t->queue,
                        f->dkey != NULL ? f->dkey : t->queue,
                        t->group, m->id, dead ? "1" : "0", rttl, dttl,
                        outcome, attempts, f->body, corr,
                        corr_len ? "1" : "0",
                        "task", t->name,
                        "error", err,
                        "attempts", attempts,
                        "failed_at", failed_at,
                        "origin_id", m->id};
    size_t n = sizeof av / sizeof av[0];
    static_assert(sizeof av / sizeof av[0] <= 28, "argv fits");
    for (size_t i = 0; i < n; i++) {
        f->argv[i] = av[i];
        f->lens[i] = strlen(av[i]);
    }
    if (here)
        f->lens[5] = m->reply_to_len;
    f->lens[8] = m->id_len;
    f->lens[15] = corr_len;
    f->lens[26] = m->id_len;
    /* without a dead letter, its fields but the first ("task", the
     * task's name: the answer's marker value) are left out */
    f->argc = (int)n - (dead ? 0 : 8);
    f->slot = rb->tasks[m->task_index].slot;
}

void tm_redis_final_free(struct tm_redis_final *f)
{
    tm_free(f->dkey);
    tm_free(f->body);
    f->dkey = NULL;
    f->body = NULL;
}

/* refused counts and logs an answer to m's reply_to refused for why:
 * the message is settled all the same. Settle thread only. */
static void refused(struct tm_redis *rb, const struct tm_msg *m,
                    const char *why, size_t why_len)
{
    struct tm_redis_task *rt = &rb->tasks[m->task_index];
    atomic_fetch_add_explicit(&m->task->stats.replies_refused, 1,
                              memory_order_relaxed);
    unsigned long unlogged;
    if (!tm_log_gate_pass(&rt->reply_gate, tm_now_ms(), &unlogged))
        return;
    if (unlogged > 0)
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, m->id,
                     "reply_to '%.*s' refused: %.*s; no answer written, "
                     "the request is settled as usual (%lu more refused "
                     "answers not logged before this one)",
                     (int)m->reply_to_len, m->reply_to, (int)why_len, why,
                     unlogged);
    else
        tm_log_write(TM_LOG_WARNING, SRC, rt->cfg->name, m->id,
                     "reply_to '%.*s' refused: %.*s; no answer written, "
                     "the request is settled as usual",
                     (int)m->reply_to_len, m->reply_to, (int)why_len, why);
}

void tm_redis_final_done(struct tm_redis *rb, struct tm_msg *m,
                         const redisReply *r, int answer_only)
{
    const struct tm_cfg_task *t = rb->tasks[m->task_index].cfg;
    if (answer_only) {
        if (r->type == REDIS_REPLY_ERROR)
            tm_log_write(TM_LOG_WARNING, SRC, t->name, m->id,
                         "answer to '%.*s' failed: %s; the requester "
                         "gets none", (int)m->reply_to_len, m->reply_to,
                         r->str);
        else if (r->type == REDIS_REPLY_STRING && r->len > 0)
            refused(rb, m, r->str, r->len);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return;
    if (r->element[0]->integer == 0) {
        tm_log_write(TM_LOG_DEBUG, SRC, t->name, m->id,
                     "not settled here: no longer pending (done already)");
        return;
    }
    if (r->element[0]->integer == 2) {
        /* another copy's success was recorded first */
        m->outcome = TM_OUT_DUPLICATE;
        tm_log_write(TM_LOG_INFO, SRC, t->name, m->id,
                     "duplicate: another copy of dedup key '%.*s' "
                     "succeeded first; this success is not recorded",
                     (int)m->dedup_key_len, m->dedup_key);
    }
    if (r->elements >= 2 && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[1]->len > 0)
        tm_log_write(TM_LOG_WARNING, SRC, t->name, m->id,
                     "answer to '%.*s' failed: %s; the requester gets "
                     "none", (int)m->reply_to_len, m->reply_to,
                     r->element[1]->str);
    if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_STRING &&
        r->element[2]->len > 0)
        refused(rb, m, r->element[2]->str, r->element[2]->len);
}

/* ---- the CLI's request ---------------------------------------------- */

/* field returns the value of field key of an entry's field array, or
 * NULL. */
static const redisReply *field(const redisReply *f, const char *key)
{
    if (f == NULL || f->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(f->element[i]->str, key) == 0 &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            return f->element[i + 1];
    return NULL;
}

/* wait_answer reads key from after *last until an entry with correlation
 * id corr comes, or deadline (monotonic ms) passes. 1 with *reply and
 * *task_failed set, 0 on timeout, -1 on a failure (b's error set). */
static int wait_answer(struct tm_redis *rb, const char *key,
                       const char *corr, int64_t deadline, char **reply,
                       int *task_failed)
{
    char last[TM_REDIS_ID_MAX + 1] = "0-0";
    for (;;) {
        int64_t left = deadline - tm_now_ms();
        if (left <= 0)
            return 0;
        char block[24];
        tm_snprintf(block, sizeof block, "%lld", (long long)left);
        const char *argv[] = {"XREAD", "COUNT", "16", "BLOCK", block,
                              "STREAMS", key, last};
        redisReply *r = tm_redis_cli_command(
            rb, 8, argv, NULL, 6, left + TM_REDIS_BLOCK_SLACK_MS);
        if (r == NULL)
            return -1;
        int found = 0;
        /* [[key, [[id, fields] ...]]], or nil when the block timed out */
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
            r->element[0]->type == REDIS_REPLY_ARRAY &&
            r->element[0]->elements == 2) {
            const redisReply *es = r->element[0]->element[1];
            for (size_t i = 0; es->type == REDIS_REPLY_ARRAY &&
                               i < es->elements && !found; i++) {
                const redisReply *e = es->element[i];
                if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
                    e->element[0]->type != REDIS_REPLY_STRING)
                    continue;
                tm_snprintf(last, sizeof last, "%s", e->element[0]->str);
                const redisReply *c = field(e->element[1], "correlation_id");
                const redisReply *body = field(e->element[1], "body");
                const redisReply *oc = field(e->element[1], "outcome");
                if (c == NULL || strcmp(c->str, corr) != 0 || body == NULL)
                    continue;
                *reply = tm_strndup(body->str, body->len);
                *task_failed = oc == NULL ||
                               (strcmp(oc->str, "success") != 0 &&
                                strcmp(oc->str, "duplicate") != 0);
                found = 1;
            }
        }
        freeReplyObject(r);
        if (found)
            return 1;
    }
}

int tm_redis_request(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     int64_t timeout_ms, char *id, size_t idlen,
                     char **reply, int *task_failed)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char corr[TM_REDIS_UUID_LEN];
    char *key = NULL;
    int rc = -1;
    /* a priority is refused by the CLI on Redis */
    const char *dk = tm_pub_dedup_key(pub);
    *reply = NULL;
    *task_failed = 0;
    if (id != NULL && idlen > 0)
        id[0] = '\0';
    int64_t deadline = tm_now_ms() + timeout_ms;
    tm_uuid4(corr, sizeof corr);
    /* "<queue>.reply.<uuid>": a queue's hash tag carries over, so the
     * answer is written by the script that acknowledges the request (in
     * a cluster, the reply stream is in the queue's slot) */
    key = tm_asprintf("%s.reply.%s", t->queue, corr);
    const char *argv[] = {"XADD", t->queue, "*", "body", body,
                          "reply_to", key, "correlation_id", corr,
                          "dedup_key", dk};
    size_t lens[] = {4, strlen(t->queue), 1, 4, len, 8, strlen(key), 14,
                     strlen(corr), 9, dk != NULL ? strlen(dk) : 0};
    redisReply *r = tm_redis_cli_command(rb, dk != NULL ? 11 : 9, argv, lens,
                                         1, 0);
    if (r == NULL)
        goto out;
    if (id != NULL)
        tm_snprintf(id, idlen, "%s",
                    r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    int got = wait_answer(rb, key, corr, deadline, reply, task_failed);
    if (got >= 0) {
        /* the reply stream is this request's alone; an answer written
         * after this creates it again, to expire after reply_ttl. A
         * failure here loses nothing: the stream expires then too. */
        const char *dv[] = {"DEL", key};
        redisReply *d = tm_redis_cli_command(rb, 2, dv, NULL, 1, 0);
        if (d != NULL)
            freeReplyObject(d);
    }
    if (got == 0)
        tm_broker_set_error(b, ETIMEDOUT, "no reply within %.3g s",
                            (double)timeout_ms / 1000.0);
    rc = got == 1 ? 0 : -1;
out:
    tm_free(key);
    return rc;
}
