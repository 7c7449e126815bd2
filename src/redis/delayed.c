/* delayed.c - the Redis adapter's delayed messages for operators: list
 * the members of "<queue>.scheduled" soonest first, run one now, delete
 * one (docs/delivery.md, Delayed messages). Each is one script on the CLI
 * link (admin.c), so that what it reads and what it changes are one
 * atomic step; the promoter (scheduled.c) still moves every member into
 * the stream, so a message run now enters it as any due one does. */
#include "redis/redis.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "redis/keys.h"
#include "redis/member_private.h"
#include "util/util.h"

/* Members one ZRANGE inside the scripts reads. */
#define TM_REDIS_DELAYED_CHUNK 64

/* ID_LUA defines id_of(m): the member's id, '' when it has none (not
 * JSON, or no string id); and has(m, id): whether member m is the one of
 * that id, reading its text only when it may be (ids with a character
 * JSON may escape are looked for in every member). */
#define ID_LUA                                                             \
    "local function id_of(m)\n"                                            \
    "  local ok, v = pcall(cjson.decode, m)\n"                             \
    "  if ok and type(v) == 'table' and type(v['id']) == 'string' then\n"  \
    "    return v['id']\n"                                                 \
    "  end\n"                                                              \
    "  return ''\n"                                                        \
    "end\n"                                                                \
    "local function has(m, id)\n"                                          \
    "  if not string.find(id, '[\"\\\\/]') and\n"                          \
    "    not string.find(m, id, 1, true) then return false end\n"          \
    "  return id_of(m) == id\n"                                            \
    "end\n"

/*
 * browse_script reads one page of the scheduled set KEYS[1], soonest
 * first (by score, then member, as ZRANGE orders them), inside Redis:
 * after the member whose id is ARGV[1] ('' from the first; one that is
 * not there gives an empty page), at most ARGV[2] entries, each body
 * (the member's body text as written, or the whole member when it is no
 * object with a body) cut at ARGV[3] bytes, stopping before the kept
 * bytes pass ARGV[4] (the first entry always kept). Finding the cursor
 * reads the set up to it. Returns {entries, more}: each entry {id, due
 * (the score), body, full length of the body}.
 */
static const char browse_script[] =
    TM_REDIS_MEMBER_LUA ID_LUA
    "local key, after, chunk = KEYS[1], ARGV[1], tonumber(ARGV[5])\n"
    "local max, cut, budget = tonumber(ARGV[2]), tonumber(ARGV[3]),"
    " tonumber(ARGV[4])\n"
    "local start = 0\n"
    "if after ~= '' then\n"
    "  local i, found = 0, false\n"
    "  while not found do\n"
    "    local r = redis.call('ZRANGE', key, i, i + chunk - 1)\n"
    "    for j, m in ipairs(r) do\n"
    "      if has(m, after) then start = i + j; found = true; break end\n"
    "    end\n"
    "    if not found and #r < chunk then return {{}, 0} end\n"
    "    i = i + chunk\n"
    "  end\n"
    "end\n"
    "local out, used, i = {}, 0, start\n"
    "while true do\n"
    "  local r = redis.call('ZRANGE', key, i, i + chunk - 1, 'WITHSCORES')\n"
    "  for j = 1, #r - 1, 2 do\n"
    "    if #out >= max then return {out, 1} end\n"
    "    local m, id, body = r[j], id_of(r[j]), r[j]\n"
    "    local ok, v = pcall(cjson.decode, m)\n"
    "    if ok and type(v) == 'table' and type(v['body']) == 'table' then\n"
    "      body = body_text(m) or m\n"
    "    end\n"
    "    local full = #body\n"
    "    if full > cut then body = string.sub(body, 1, cut) end\n"
    "    local size = #id + #body\n"
    "    if #out > 0 and used + size > budget then return {out, 1} end\n"
    "    used = used + size\n"
    "    out[#out + 1] = {id, r[j + 1], body, full}\n"
    "  end\n"
    "  if #r < 2 * chunk then return {out, 0} end\n"
    "  i = i + chunk\n"
    "end\n";

/*
 * take_script takes the member of id ARGV[1] of the scheduled set KEYS[1]
 * out of its wait, if it is there and not yet due by the server's clock:
 * ARGV[2] 'run' makes it due now (its score the server's now, and the
 * due-time index KEYS[2] told, ZADD LT, so that a promoter moves it into
 * the stream within its next round, as any due member: body, id and
 * metadata as always); 'del' removes it. Returns 1 when it took it, 0
 * when there is no such member waiting. Since a member made due is no
 * longer waiting, of two calls on one id (run and delete, or two of
 * either) exactly one takes it.
 */
static const char take_script[] =
    ID_LUA
    "local key, id, chunk = KEYS[1], ARGV[1], tonumber(ARGV[3])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local i = 0\n"
    "while true do\n"
    "  local r = redis.call('ZRANGE', key, i, i + chunk - 1, 'WITHSCORES')\n"
    "  for j = 1, #r - 1, 2 do\n"
    "    if has(r[j], id) then\n"
    "      if tonumber(r[j + 1]) <= now then return 0 end\n"
    "      if ARGV[2] == 'run' then\n"
    "        redis.call('ZADD', key, 'XX', now, r[j])\n"
    "        redis.call('ZADD', KEYS[2], 'LT', now, key)\n"
    "      else\n"
    "        redis.call('ZREM', key, r[j])\n"
    "      end\n"
    "      return 1\n"
    "    end\n"
    "  end\n"
    "  if #r < 2 * chunk then return 0 end\n"
    "  i = i + chunk\n"
    "end\n";

/* delayed_entry fills d from one entry of browse_script's answer, its
 * body cut at body_max. Returns 0, or -1 when it is not of that shape. */
static int delayed_entry(const redisReply *x, size_t body_max,
                         struct tm_delayed_entry *d)
{
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 4 ||
        x->element[0]->type != REDIS_REPLY_STRING ||
        x->element[1]->type != REDIS_REPLY_STRING ||
        x->element[2]->type != REDIS_REPLY_STRING ||
        x->element[3]->type != REDIS_REPLY_INTEGER)
        return -1;
    d->id = tm_strndup(x->element[0]->str, x->element[0]->len);
    d->due_ms = (int64_t)strtod(x->element[1]->str, NULL);
    d->body_len = x->element[3]->integer > 0
                      ? (size_t)x->element[3]->integer
                      : 0;
    size_t keep = x->element[2]->len;
    if (d->body_len > body_max) {
        d->truncated = 1;
        keep = tm_dlq_utf8_cut(x->element[2]->str, keep);
    }
    d->body = tm_strndup(x->element[2]->str, keep);
    return 0;
}

int tm_redis_delayed_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                            const struct tm_dlq_query *q,
                            struct tm_delayed_entry **out, size_t *n,
                            int *more)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    *out = NULL;
    *n = 0;
    *more = 0;
    char max[24], cut[24], budget[24], chunk[24];
    tm_snprintf(max, sizeof max, "%zu", q->max);
    tm_snprintf(cut, sizeof cut, "%zu", q->body_max);
    tm_snprintf(budget, sizeof budget, "%zu", q->bytes_max);
    tm_snprintf(chunk, sizeof chunk, "%d", TM_REDIS_DELAYED_CHUNK);
    char *key = tm_redis_scheduled_key(t);
    const char *argv[] = {"EVAL", browse_script, "1", key,
                          q->after != NULL ? q->after : "", max, cut, budget,
                          chunk};
    redisReply *r = tm_redis_cli_command(rb, 9, argv, NULL, 3, 0);
    tm_free(key);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_ARRAY) {
        tm_broker_set_error(b, EINVAL, "delayed messages of '%s': an answer "
                            "of an unexpected shape", t->queue);
        freeReplyObject(r);
        return -1;
    }
    const redisReply *a = r->element[0];
    if (a->elements > 0) {
        struct tm_delayed_entry *e = tm_calloc(a->elements, sizeof *e);
        size_t k = 0;
        for (size_t i = 0; i < a->elements; i++)
            if (delayed_entry(a->element[i], q->body_max, &e[k]) == 0)
                k++;
        *out = e;
        *n = k;
    }
    *more = r->element[1]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->integer != 0;
    freeReplyObject(r);
    return 0;
}

int tm_redis_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, int run_now)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char chunk[24];
    tm_snprintf(chunk, sizeof chunk, "%d", TM_REDIS_DELAYED_CHUNK);
    char *key = tm_redis_scheduled_key(t);
    char *idx = tm_redis_due_key(rb->cluster,
                                 tm_redis_key_slot(t->queue,
                                                   strlen(t->queue)));
    const char *argv[] = {"EVAL", take_script, "2", key, idx, id,
                          run_now ? "run" : "del", chunk};
    redisReply *r = tm_redis_cli_command(rb, 8, argv, NULL, 3, 0);
    tm_free(idx);
    tm_free(key);
    if (r == NULL)
        return -1;
    int took = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    /* this process's promoters move it at once, not at their next read */
    if (took && run_now)
        tm_redis_sched_poke();
    return took;
}
