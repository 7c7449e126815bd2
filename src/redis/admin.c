/* admin.c - Redis CLI and monitoring operations: publish, dead letters,
 * queue depths. */
#include "redis/redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/keys.h"
#include "util/log.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* FILTER_LUA defines keep(f, q, since, till): whether an entry of
 * fields f (a flat field/value list) matches struct tm_dlq_filter: q ''
 * or a plain substring of its error or body, failed_at (0 when absent,
 * as entry_to_dlq reads it) within since and till, '' for no bound
 * (tm_dlq_filter_match in Lua). */
#define FILTER_LUA                                                         \
    "local function keep(f, q, since, till)\n"                             \
    "  if q == '' and since == '' and till == '' then return true end\n"   \
    "  local err, body, at = '', '', 0\n"                                  \
    "  for i = 1, #f - 1, 2 do\n"                                          \
    "    if f[i] == 'error' then err = f[i + 1]\n"                         \
    "    elseif f[i] == 'body' then body = f[i + 1]\n"                     \
    "    elseif f[i] == 'failed_at' then at = tonumber(f[i + 1]) or 0\n"   \
    "    end\n"                                                            \
    "  end\n"                                                              \
    "  if since ~= '' and at < tonumber(since) then return false end\n"    \
    "  if till ~= '' and at > tonumber(till) then return false end\n"      \
    "  return q == '' or string.find(err, q, 1, true) ~= nil or\n"         \
    "    string.find(body, q, 1, true) ~= nil\n"                           \
    "end\n"

/* replay_script replays (ARGV[7] 'r') or deletes (ARGV[7] 'p') the dead
 * letters from ARGV[1] ("-", "(ID" or ID) to ARGV[2] (an ID) that the
 * filter ARGV[4..6] (q, since, until: FILTER_LUA) matches, reading at
 * most ARGV[3] entries: each entry read here is added to the stream and
 * deleted from the dead-letter stream in this one script, so an entry is
 * replayed once however many replays run at once (a concurrent one no
 * longer finds it). The message comes back with every field of the
 * entry, byte for byte, but the dead letter's own (task, error,
 * attempts, failed_at, origin_id): its body and its metadata (dedup_key,
 * reply_to, correlation_id, traceparent, and any other a producer set,
 * copied into the dead letter when it was written). XADD comes before
 * XDEL: a failing XADD (OOM, a key of the wrong type) stops the script
 * with the entry still in place. KEYS: stream, dlq. Returns {moved,
 * entries read, id of the last read or ''}. */
static const char replay_script[] =
    FILTER_LUA
    "local r = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[2], 'COUNT',"
    " ARGV[3])\n"
    "local own = {task = true, error = true, attempts = true,"
    " failed_at = true, origin_id = true}\n"
    "local n = 0\n"
    "for _, e in ipairs(r) do\n"
    "  local f, m = e[2], {'body', ''}\n"
    "  if keep(f, ARGV[4], ARGV[5], ARGV[6]) then\n"
    "    if ARGV[7] == 'r' then\n"
    "      for i = 1, #f - 1, 2 do\n"
    "        if f[i] == 'body' then m[2] = f[i + 1]\n"
    "        elseif not own[f[i]] then\n"
    "          m[#m + 1] = f[i]; m[#m + 1] = f[i + 1]\n"
    "        end\n"
    "      end\n"
    "      redis.call('XADD', KEYS[1], '*', unpack(m))\n"
    "    end\n"
    "    n = n + redis.call('XDEL', KEYS[2], e[1])\n"
    "  end\n"
    "end\n"
    "return {n, #r, #r > 0 and r[#r][1] or ''}\n";

/* Dead letters replay_script moves per call. */
#define TM_REDIS_REPLAY_CHUNK 100

/* purge_script deletes the dead-letter stream KEYS[1] and returns how
 * many entries it held, in one step: concurrent purges count each entry
 * once. */
static const char purge_script[] =
    "local n = redis.call('XLEN', KEYS[1])\n"
    "redis.call('DEL', KEYS[1])\n"
    "return n\n";

/* Command timeout of the depth connection: a slow answer only delays the
 * next refresh of /metrics, never a task. */
#define TM_REDIS_DEPTH_TIMEOUT_MS 2000

/* Tasks whose counts one depth script reads (5 results each). */
#define TM_REDIS_DEPTH_CHUNK 256
/* Results depth_script returns per task. */
#define TM_REDIS_DEPTH_VALS 5
/* Counts read for a later task this recently are answered from the
 * cache: the refresher asks for every task in turn, and one script per
 * chunk of tasks answers them all. */
#define TM_REDIS_DEPTH_FRESH_MS 1000

/* depth_script reads, for each task i, its group's lag and pending count
 * (XINFO GROUPS), the lengths of its stream and dead-letter stream, the
 * age of the first entry after the group's last-delivered-id and how
 * many members of its scheduled set are due, all by the server's clock
 * (TIME, read once). KEYS: stream, dead-letter stream, scheduled set,
 * per task; ARGV[i]: task i's group. Returns depth, pending, dead-letter
 * depth, oldest age (ms), delayed due per task, -1 where Redis cannot
 * tell: a group not created yet has delivered nothing (depth is the
 * stream's length, the oldest entry its first), a missing stream is
 * empty; lag is nil when Redis cannot compute it (Redis 7.0 and later
 * have it). Lag counts from the group's entries-read, which a replica
 * promoted by a failover, or a stream moved to another cluster node, may
 * carry wrong (Redis 7.0): a lag above 0 with no entry after
 * last-delivered-id is 0. The age is that of the entry's id, the
 * server's clock when it was added (for ids Redis made). */
static const char depth_script[] =
    "local out = {}\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local function age(r)\n"
    "  if type(r) ~= 'table' then return -1 end\n"
    "  if #r == 0 then return 0 end\n"
    "  local ms = tonumber(string.match(r[1][1], '^(%d+)'))\n"
    "  if ms == nil then return -1 end\n"
    "  if ms > now then return 0 end\n"
    "  return now - ms\n"
    "end\n"
    "for i = 1, #ARGV do\n"
    "  local depth, pend, old = -1, -1, -1\n"
    "  local s = KEYS[3 * i - 2]\n"
    "  local len = redis.pcall('XLEN', s)\n"
    "  if type(len) ~= 'number' then len = -1 end\n"
    "  local g = redis.pcall('XINFO', 'GROUPS', s)\n"
    "  if type(g) == 'table' and g.err == nil then\n"
    "    local found = false\n"
    "    for _, e in ipairs(g) do\n"
    "      local f = {}\n"
    "      for j = 1, #e - 1, 2 do f[e[j]] = e[j + 1] end\n"
    "      if f['name'] == ARGV[i] then\n"
    "        found = true\n"
    "        if type(f['lag']) == 'number' then depth = f['lag'] end\n"
    "        local last = f['last-delivered-id']\n"
    "        if depth == 0 then old = 0\n"
    "        elseif type(last) == 'string' then\n"
    "          local nxt = redis.pcall('XRANGE', s, '(' .. last, '+',\n"
    "            'COUNT', 1)\n"
    "          if depth > 0 and type(nxt) == 'table' and #nxt == 0 then\n"
    "            depth = 0\n"
    "          end\n"
    "          old = age(nxt)\n"
    "        end\n"
    "        if type(f['pending']) == 'number' then pend = f['pending'] end\n"
    "      end\n"
    "    end\n"
    "    if not found then\n"
    "      depth = len; pend = 0\n"
    "      old = len == 0 and 0 or age(redis.pcall('XRANGE', s, '-', '+',\n"
    "        'COUNT', 1))\n"
    "    end\n"
    "  elseif len == 0 then depth = 0; pend = 0; old = 0 end\n"
    "  local d = redis.pcall('XLEN', KEYS[3 * i - 1])\n"
    "  if type(d) ~= 'number' then d = -1 end\n"
    "  local due = redis.pcall('ZCOUNT', KEYS[3 * i], '-inf', now)\n"
    "  if type(due) ~= 'number' then due = -1 end\n"
    "  out[#out + 1] = depth\n"
    "  out[#out + 1] = pend\n"
    "  out[#out + 1] = d\n"
    "  out[#out + 1] = old\n"
    "  out[#out + 1] = due\n"
    "end\n"
    "return out\n";

/* The depth connection is separate from the intake and settle ones, so
 * that monitoring reads never queue behind them or delay them. One per
 * process (struct tm_redis has no room for it), opened on first use by
 * the broker that uses it; the mutex serves one caller at a time. The
 * cache holds the counts of the chunk of tasks last read. */
static struct {
    pthread_mutex_t mu;
    struct tm_rlink *lk;       /* NULL: closed */
    const struct tm_redis *owner;
    size_t from, n;            /* the cache: tasks from .. from + n */
    int64_t at_ms;             /* when it was read */
    long long vals[TM_REDIS_DEPTH_VALS * TM_REDIS_DEPTH_CHUNK];
} rb_depth_conn = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0, 0, {0}};

/* depth_close closes the depth connections. The owner may be gone (a
 * reload destroyed it before the next broker asked): only the link's
 * own connections are touched. */
static void depth_close(void)
{
    if (rb_depth_conn.lk != NULL) {
        for (size_t i = 0; i < TM_REDIS_MAX_NODES; i++)
            tm_rconn_close(rb_depth_conn.lk->c[i]);
        tm_free(rb_depth_conn.lk);
    }
    rb_depth_conn.lk = NULL;
    rb_depth_conn.owner = NULL;
}

/* depth_read runs depth_script for the tasks from ti on (a chunk: in a
 * cluster, the tasks that follow it in the same slot) into the cache. -1
 * when the connection failed (closed then). */
static int depth_read(struct tm_redis *rb, size_t ti)
{
    const char *argv[3 + 4 * TM_REDIS_DEPTH_CHUNK];
    char *sched[TM_REDIS_DEPTH_CHUNK];
    size_t n = 1;
    char nkeys[24], eb[256];
    while (ti + n < rb->ntasks && n < TM_REDIS_DEPTH_CHUNK &&
           rb->tasks[ti + n].lane_key == rb->tasks[ti].lane_key)
        n++;
    tm_snprintf(nkeys, sizeof nkeys, "%zu", 3 * n);
    argv[0] = "EVAL";
    argv[1] = depth_script;
    argv[2] = nkeys;
    for (size_t i = 0; i < n; i++) {
        const struct tm_cfg_task *t = rb->tasks[ti + i].cfg;
        sched[i] = tm_redis_scheduled_key(t);
        argv[3 + 3 * i] = t->queue;
        argv[4 + 3 * i] = t->dead_letter;
        argv[5 + 3 * i] = sched[i];
        argv[3 + 3 * n + i] = t->group;
    }
    int dead = 0;
    redisReply *r = tm_redis_link_run(rb, rb_depth_conn.lk,
                                      rb->tasks[ti].slot, (int)(3 + 4 * n),
                                      argv, NULL, 0, 0, eb, sizeof eb, &dead);
    for (size_t i = 0; i < n; i++)
        tm_free(sched[i]);
    rb_depth_conn.n = 0;
    if (r == NULL) {
        tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth: %s", eb);
        if (!dead)
            return 0;
        depth_close();
        return -1;
    }
    if (r->type == REDIS_REPLY_ARRAY &&
        r->elements == TM_REDIS_DEPTH_VALS * n) {
        for (size_t i = 0; i < TM_REDIS_DEPTH_VALS * n; i++)
            rb_depth_conn.vals[i] = r->element[i]->type == REDIS_REPLY_INTEGER
                                        ? r->element[i]->integer
                                        : -1;
        rb_depth_conn.from = ti;
        rb_depth_conn.n = n;
        rb_depth_conn.at_ms = tm_now_ms();
    }
    freeReplyObject(r);
    return 0;
}

int tm_redis_depth(struct tm_broker *b, size_t ti,
                   struct tm_broker_depth *out)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char eb[256];
    int rc = -1;
    pthread_mutex_lock(&rb_depth_conn.mu);
    if (rb_depth_conn.lk != NULL &&
        (ti == TM_BROKER_DEPTH_CLOSE || rb_depth_conn.owner != rb))
        depth_close();
    if (ti == TM_BROKER_DEPTH_CLOSE) {
        rc = 0;
        goto out;
    }
    out->depth = out->pending = out->dlq = -1;
    out->oldest_age_ms = out->delayed_due = -1;
    if (ti >= rb->ntasks)
        goto out;
    if (rb_depth_conn.lk == NULL) {
        struct tm_rlink *lk = tm_malloc(sizeof *lk);
        tm_redis_link_init(lk, TM_REDIS_DEPTH_TIMEOUT_MS);
        /* connect now, to tell an unreachable broker (-1) from a slow
         * answer */
        size_t ni = tm_redis_slot_node(rb, rb->tasks[ti].slot, eb,
                                       sizeof eb);
        if (ni == TM_REDIS_NO_NODE ||
            tm_redis_link_get(rb, lk, ni, eb, sizeof eb) == NULL) {
            tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "depth: %s", eb);
            tm_free(lk);
            goto out;
        }
        rb_depth_conn.lk = lk;
        rb_depth_conn.owner = rb;
        rb_depth_conn.n = 0;
    }
    /* a later task of the chunk last read, read recently: cached; the
     * task the chunk starts with is read again (a new round) */
    int cached = rb_depth_conn.n > 0 && ti > rb_depth_conn.from &&
                 ti < rb_depth_conn.from + rb_depth_conn.n &&
                 tm_now_ms() - rb_depth_conn.at_ms < TM_REDIS_DEPTH_FRESH_MS;
    if (!cached && depth_read(rb, ti) != 0)
        goto out;
    if (rb_depth_conn.n > 0 && ti >= rb_depth_conn.from &&
        ti < rb_depth_conn.from + rb_depth_conn.n) {
        const long long *v = &rb_depth_conn.vals[TM_REDIS_DEPTH_VALS *
                                                 (ti - rb_depth_conn.from)];
        out->depth = v[0];
        out->pending = v[1];
        out->dlq = v[2];
        out->oldest_age_ms = v[3];
        out->delayed_due = v[4];
    }
    rc = 0;
out:
    pthread_mutex_unlock(&rb_depth_conn.mu);
    return rc;
}

redisReply *tm_redis_cli_command(struct tm_redis *rb, int argc,
                                 const char **argv, const size_t *lens,
                                 int key, int64_t timeout_ms)
{
    char eb[512];
    int dead;
    size_t klen = lens != NULL ? lens[key] : strlen(argv[key]);
    unsigned slot = tm_redis_key_slot(argv[key], klen);
    int was_open = tm_redis_link_up(&rb->settle);
    redisReply *r = tm_redis_link_run(rb, &rb->settle, slot, argc, argv,
                                      lens, 0, timeout_ms, eb, sizeof eb,
                                      &dead);
    if (r == NULL && dead && !was_open)
        tm_broker_set_error(&rb->base, ECONNREFUSED, "%s", eb);
    else if (r == NULL)
        tm_broker_set_error(&rb->base, dead ? EIO : EINVAL, "%s %s: %s",
                            argv[0], argc > 1 ? argv[1] : "", eb);
    return r;
}

int tm_redis_publish(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *body, size_t len, const struct tm_pub *pub,
                     char *id, size_t idlen)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    /* a priority is refused by the config loader and the CLI on Redis */
    const char *dk = tm_pub_dedup_key(pub), *tp = tm_pub_traceparent(pub);
    const char *argv[9] = {"XADD", t->queue, "*", "body", body};
    size_t lens[9] = {4, strlen(t->queue), 1, 4, len};
    int argc = 5;
    if (dk != NULL) {
        argv[argc] = "dedup_key";
        lens[argc++] = 9;
        argv[argc] = dk;
        lens[argc++] = strlen(dk);
    }
    if (tp != NULL) {
        argv[argc] = "traceparent";
        lens[argc++] = 11;
        argv[argc] = tp;
        lens[argc++] = strlen(tp);
    }
    redisReply *r = tm_redis_cli_command(rb, argc, argv, lens, 1, 0);
    if (r == NULL)
        return -1;
    tm_snprintf(id, idlen, "%s", r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return 0;
}

static char *field_dup(const redisReply *f, const char *key)
{
    if (f == NULL || f->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (f->element[i]->type == REDIS_REPLY_STRING &&
            strcmp(f->element[i]->str, key) == 0 &&
            f->element[i + 1]->type == REDIS_REPLY_STRING)
            return tm_strndup(f->element[i + 1]->str,
                              f->element[i + 1]->len);
    }
    return NULL;
}

static void entry_to_dlq(const redisReply *e, struct tm_dlq_entry *d)
{
    d->id = tm_strdup(e->element[0]->str);
    const redisReply *f = e->element[1];
    d->origin_id = field_dup(f, "origin_id");
    d->task = field_dup(f, "task");
    d->error = field_dup(f, "error");
    d->body = field_dup(f, "body");
    char *s = field_dup(f, "attempts");
    d->attempts = s != NULL ? strtol(s, NULL, 10) : 0;
    tm_free(s);
    s = field_dup(f, "failed_at");
    d->failed_at = s != NULL ? strtoll(s, NULL, 10) : 0;
    tm_free(s);
}

int tm_redis_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                       size_t max, struct tm_dlq_entry **out, size_t *n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    char count[24];
    tm_snprintf(count, sizeof count, "%zu", max);
    const char *argv[] = {"XREVRANGE", t->dead_letter, "+", "-", "COUNT",
                          count};
    redisReply *r = tm_redis_cli_command(rb, 6, argv, NULL, 1, 0);
    *out = NULL;
    *n = 0;
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
        struct tm_dlq_entry *e = tm_calloc(r->elements, sizeof *e);
        size_t k = 0;
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *x = r->element[i];
            if (x->type == REDIS_REPLY_ARRAY && x->elements == 2)
                entry_to_dlq(x, &e[k++]);
        }
        *out = e;
        *n = k;
    }
    freeReplyObject(r);
    return 0;
}

/*
 * browse_script reads one page of a dead-letter stream inside Redis,
 * newest first, so that no more than the page crosses the network: it
 * walks XREVRANGE from ARGV[1] ("+" or "(ID", exclusive) in chunks of
 * ARGV[5] entries (so the server itself never holds more than a chunk of
 * whole entries), skips those the filter ARGV[6..8] (q, since, until:
 * FILTER_LUA, on the whole values) does not match, cuts every field
 * value longer than ARGV[3] bytes, and stops at ARGV[2] entries or
 * before the kept values pass ARGV[4] bytes (the first entry is always
 * kept). Returns {entries, more}: each entry {id, {field, value, ...},
 * {full length of each value, ...}}; more is 1 when an older matching
 * entry follows the last one returned.
 */
static const char browse_script[] =
    FILTER_LUA
    "local key, from = KEYS[1], ARGV[1]\n"
    "local max, cut, budget, chunk = tonumber(ARGV[2]), tonumber(ARGV[3]),"
    " tonumber(ARGV[4]), tonumber(ARGV[5])\n"
    "local out, used = {}, 0\n"
    "while true do\n"
    "  local r = redis.call('XREVRANGE', key, from, '-', 'COUNT', chunk)\n"
    "  for _, e in ipairs(r) do\n"
    "    if keep(e[2], ARGV[6], ARGV[7], ARGV[8]) then\n"
    "      if #out >= max then return {out, 1} end\n"
    "      local f, kept, lens, size = e[2], {}, {}, 0\n"
    "      for j = 1, #f, 2 do\n"
    "        local v = f[j + 1]\n"
    "        lens[#lens + 1] = #v\n"
    "        if #v > cut then v = string.sub(v, 1, cut) end\n"
    "        kept[#kept + 1] = f[j]\n"
    "        kept[#kept + 1] = v\n"
    "        size = size + #f[j] + #v\n"
    "      end\n"
    "      if #out > 0 and used + size > budget then return {out, 1} end\n"
    "      used = used + size\n"
    "      out[#out + 1] = {e[1], kept, lens}\n"
    "    end\n"
    "    from = '(' .. e[1]\n"
    "  end\n"
    "  if #r < chunk then return {out, 0} end\n"
    "end\n";

/* Entries XREVRANGE returns per call inside browse_script. */
#define TM_REDIS_BROWSE_CHUNK 8

/* browse_entry fills d from one entry of browse_script's answer, cut at
 * body_max. Returns 0, or -1 when the entry is not of that shape. */
static int browse_entry(const redisReply *x, size_t body_max,
                        struct tm_dlq_entry *d)
{
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 3 ||
        x->element[0]->type != REDIS_REPLY_STRING ||
        x->element[1]->type != REDIS_REPLY_ARRAY ||
        x->element[2]->type != REDIS_REPLY_ARRAY ||
        x->element[2]->elements * 2 != x->element[1]->elements)
        return -1;
    redisReply entry = {.type = REDIS_REPLY_ARRAY, .elements = 2,
                        .element = x->element};
    entry_to_dlq(&entry, d);
    const redisReply *f = x->element[1], *lens = x->element[2];
    for (size_t i = 0; i < lens->elements; i++) {
        const redisReply *k = f->element[2 * i], *l = lens->element[i];
        long long full = l->type == REDIS_REPLY_INTEGER ? l->integer : 0;
        if (k->type != REDIS_REPLY_STRING)
            continue;
        if (full > (long long)body_max)
            d->truncated = 1;
        if (strcmp(k->str, "body") == 0)
            d->body_len = full > 0 ? (size_t)full : 0;
    }
    /* a cut inside a UTF-8 sequence backs off to its start (a whole
     * value is left as it is) */
    if (d->truncated && d->body != NULL)
        d->body[tm_dlq_utf8_cut(d->body, strlen(d->body))] = '\0';
    if (d->truncated && d->error != NULL)
        d->error[tm_dlq_utf8_cut(d->error, strlen(d->error))] = '\0';
    return 0;
}

/* struct filter_args is a struct tm_dlq_filter as FILTER_LUA's three
 * arguments: q, since, until ("" for none). */
struct filter_args {
    const char *q;
    char since[24], until[24];
};

static void filter_args(const struct tm_dlq_filter *f, struct filter_args *a)
{
    a->q = f != NULL && f->text != NULL ? f->text : "";
    a->since[0] = a->until[0] = '\0';
    if (f != NULL && f->since != INT64_MIN)
        tm_snprintf(a->since, sizeof a->since, "%lld", (long long)f->since);
    if (f != NULL && f->until != INT64_MAX)
        tm_snprintf(a->until, sizeof a->until, "%lld", (long long)f->until);
}

int tm_redis_dlq_browse(struct tm_broker *b, const struct tm_cfg_task *t,
                        const struct tm_dlq_query *q,
                        struct tm_dlq_entry **out, size_t *n, int *more)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    *out = NULL;
    *n = 0;
    *more = 0;
    if (q->id != NULL) {
        /* one entry, whole */
        const char *argv[] = {"XRANGE", t->dead_letter, q->id, q->id};
        redisReply *r = tm_redis_cli_command(rb, 4, argv, NULL, 1, 0);
        if (r == NULL)
            return -1;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
            r->element[0]->type == REDIS_REPLY_ARRAY &&
            r->element[0]->elements == 2) {
            struct tm_dlq_entry *e = tm_calloc(1, sizeof *e);
            entry_to_dlq(r->element[0], e);
            e->body_len = e->body != NULL ? strlen(e->body) : 0;
            *out = e;
            *n = 1;
        }
        freeReplyObject(r);
        return 0;
    }
    char from[TM_REDIS_ID_MAX + 2], max[24], cut[24], budget[24], chunk[24];
    if (q->after != NULL)
        tm_snprintf(from, sizeof from, "(%s", q->after);
    else
        tm_snprintf(from, sizeof from, "+");
    tm_snprintf(max, sizeof max, "%zu", q->max);
    tm_snprintf(cut, sizeof cut, "%zu", q->body_max);
    tm_snprintf(budget, sizeof budget, "%zu", q->bytes_max);
    tm_snprintf(chunk, sizeof chunk, "%d", TM_REDIS_BROWSE_CHUNK);
    struct filter_args fa;
    filter_args(q->filter, &fa);
    const char *argv[] = {"EVAL", browse_script, "1", t->dead_letter, from,
                          max, cut, budget, chunk, fa.q, fa.since, fa.until};
    redisReply *r = tm_redis_cli_command(rb, 12, argv, NULL, 3, 0);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_ARRAY) {
        tm_broker_set_error(b, EINVAL, "dead-letter browse of '%s': an "
                            "answer of an unexpected shape", t->dead_letter);
        freeReplyObject(r);
        return -1;
    }
    const redisReply *a = r->element[0];
    if (a->elements > 0) {
        struct tm_dlq_entry *e = tm_calloc(a->elements, sizeof *e);
        size_t k = 0;
        for (size_t i = 0; i < a->elements; i++)
            if (browse_entry(a->element[i], q->body_max, &e[k]) == 0)
                k++;
        *out = e;
        *n = k;
    }
    *more = r->element[1]->type == REDIS_REPLY_INTEGER &&
            r->element[1]->integer != 0;
    freeReplyObject(r);
    return 0;
}

/* dlq_walk replays (replay set) or deletes the dead letters of t that
 * f matches, id only or every one up to the newest there is now, by
 * replay_script: one round trip per TM_REDIS_REPLAY_CHUNK entries read.
 * Returns the count moved, or -1. */
static long dlq_walk(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *id, const struct tm_dlq_filter *f,
                     int replay)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    long moved = 0;
    /* up to the newest entry there is now: a message that fails again is
     * dead-lettered again, and must not be replayed twice by the same
     * command */
    char last[TM_REDIS_ID_MAX], from[TM_REDIS_ID_MAX + 1], count[24];
    struct filter_args fa;
    filter_args(id != NULL ? NULL : f, &fa);
    if (id != NULL) {
        tm_snprintf(last, sizeof last, "%s", id);
        tm_snprintf(from, sizeof from, "%s", id);
    } else {
        const char *largv[] = {"XREVRANGE", t->dead_letter, "+", "-",
                               "COUNT", "1"};
        redisReply *r = tm_redis_cli_command(rb, 6, largv, NULL, 1, 0);
        if (r == NULL)
            return -1;
        int empty = r->type != REDIS_REPLY_ARRAY || r->elements == 0 ||
                    r->element[0]->type != REDIS_REPLY_ARRAY;
        if (!empty)
            tm_snprintf(last, sizeof last, "%s",
                        r->element[0]->element[0]->str);
        freeReplyObject(r);
        if (empty)
            return 0;
        tm_snprintf(from, sizeof from, "-");
    }
    tm_snprintf(count, sizeof count, "%d",
                id != NULL ? 1 : TM_REDIS_REPLAY_CHUNK);
    for (;;) {
        const char *argv[] = {"EVAL", replay_script, "2", t->queue,
                              t->dead_letter, from, last, count,
                              fa.q, fa.since, fa.until, replay ? "r" : "p"};
        redisReply *r = tm_redis_cli_command(rb, 12, argv, NULL, 3, 0);
        if (r == NULL)
            return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER ||
            r->element[2]->type != REDIS_REPLY_STRING) {
            tm_broker_set_error(b, EINVAL, "dead-letter %s of '%s': an "
                                "answer of an unexpected shape",
                                replay ? "replay" : "purge", t->dead_letter);
            freeReplyObject(r);
            return -1;
        }
        moved += (long)r->element[0]->integer;
        long long got = r->element[1]->integer;
        /* the next chunk starts after the last entry read */
        if (got > 0)
            tm_snprintf(from, sizeof from, "(%s", r->element[2]->str);
        freeReplyObject(r);
        if (id != NULL || got < TM_REDIS_REPLAY_CHUNK)
            break;
    }
    return moved;
}

long tm_redis_dlq_replay(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, const struct tm_dlq_filter *f)
{
    return dlq_walk(b, t, id, f, 1);
}

long tm_redis_dlq_purge(struct tm_broker *b, const struct tm_cfg_task *t,
                         const char *id, const struct tm_dlq_filter *f)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    if (id == NULL && tm_dlq_filter_set(f))
        return dlq_walk(b, t, NULL, f, 0);
    redisReply *r;
    if (id != NULL) {
        const char *argv[] = {"XDEL", t->dead_letter, id};
        r = tm_redis_cli_command(rb, 3, argv, NULL, 1, 0);
    } else {
        const char *argv[] = {"EVAL", purge_script, "1", t->dead_letter};
        r = tm_redis_cli_command(rb, 4, argv, NULL, 3, 0);
    }
    if (r == NULL)
        return -1;
    long n = r->type == REDIS_REPLY_INTEGER ? (long)r->integer : 0;
    freeReplyObject(r);
    return n;
}
