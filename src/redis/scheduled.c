/* scheduled.c - the Redis adapter's delayed messages: the sorted set
 * "<queue>.scheduled" and its promoter.
 *
 * Producers add a member {"id": ID, "body": BODY, ...} scored by its due
 * time in epoch milliseconds (docs/delivery.md, Delayed messages). Every
 * daemon runs one
 * promoter thread, on a link of its own (a connection per node; each
 * script touches one task's keys, in its slot), that moves due members of
 * its tasks' sets into their streams with promote_script: the Redis
 * server's clock decides what is due, and the XADD and the ZREM of each
 * member happen in one script, so any number of daemons can promote the
 * same set and each member enters the stream exactly once. A member that
 * cannot become an entry (not a JSON object, no object body, a field of
 * the wrong type) goes to the task's dead-letter stream with the reason,
 * in the same script: nothing is lost and nothing stays stuck.
 *
 * The promoter does not look at every set each round: its first round
 * does (and indexes every set that has members), then it reads the
 * due-time index (see retry.c) of each slot its tasks use, one ZRANGE
 * of its earliest TM_REDIS_INDEX_PEEK entries, and runs promote_script
 * only for the tasks whose scheduled set is due. Retry sets in
 * the index that are due, or will be before the next read, are handed to
 * their intake lanes (tm_redis_retry_note): the retries other daemons
 * schedule are noticed so. The index is compared with the Redis server's
 * clock as estimated from a TIME read every TM_REDIS_CLOCK_MS; the
 * scripts themselves decide by the server's clock.
 *
 * Between rounds the promoter sleeps until the earliest due member, at
 * most TM_REDIS_PROMOTE_MAX_SLEEP_MS (members other processes add are
 * noticed that late at worst), plus a little jitter so that daemons do
 * not all call at the same instant; a member this process adds (its
 * admin API, on an adapter of its own) wakes every promoter of the
 * process at once, for a round that sees it (tm_redis_publish_at). So an
 * idle daemon sends about two commands a second per slot it reads,
 * whatever the count of tasks.
 *
 * The file stays whole (over 800 lines): everything in it reads or
 * writes struct tm_redis_sched, the promoter's state, which no other
 * file sees: its rounds, its thread, the process's list of promoters,
 * and the producer's side that wakes them and waits for their counts
 * (tm_redis_publish_at, tm_redis_scheduled). Split, that state would
 * have to be declared for the whole adapter; a sixth of the lines are
 * promote_script, one Lua script that cannot be cut.
 */
#include "redis/redis.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cjson/cJSON.h>

#include "util/log.h"
#include "redis/keys.h"
#include "redis/member_private.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* Longest sleep between two rounds: the worst delay before a member that
 * another process added becomes an entry (docs/delivery.md, Delayed
 * messages: within a second after its time). */
#define TM_REDIS_PROMOTE_MAX_SLEEP_MS 500
/* Most jitter added to a sleep (a tenth of it, at most this). */
#define TM_REDIS_PROMOTE_JITTER_MS 25
/* Members one script call moves at most (the script blocks Redis while
 * it runs), and calls per task in one round before the other tasks get
 * their turn. */
#define TM_REDIS_PROMOTE_BATCH 500
#define TM_REDIS_PROMOTE_CALLS 20
/* Tasks one script call looks at (3 keys each), all in one slot. */
#define TM_REDIS_PROMOTE_CHUNK 256
/* The sweep: members a producer added with a plain ZADD, without their
 * set's index entry, are found by a sweep that gives each scheduled set
 * its index entry (index_script), TM_REDIS_SWEEP_TASKS sets a step, one
 * step every (sets + 1) / TM_REDIS_SWEEP_RATE seconds: about that many
 * commands a second whatever the count of tasks, each set looked at
 * every ntasks / TM_REDIS_SWEEP_RATE seconds (1 s for one task, about
 * 4.5 min for 500). */
#define TM_REDIS_SWEEP_TASKS 16
#define TM_REDIS_SWEEP_RATE 2
/* Index entries one read of the due-time index returns: the earliest
 * ones, of every daemon's tasks on that slot. */
#define TM_REDIS_INDEX_PEEK 64
/* How often the server's clock is read (TIME) for comparing index
 * scores. */
#define TM_REDIS_CLOCK_MS 60000
/* Command timeout of the promoter's connection; and its reconnect
 * backoff bounds after a failure. */
#define TM_REDIS_PROMOTE_TIMEOUT_MS 5000
#define TM_REDIS_PROMOTE_BACKOFF_MIN_MS 250
#define TM_REDIS_PROMOTE_BACKOFF_MAX_MS 5000

/*
 * promote_script moves, for each of a chunk of tasks in turn, the members
 * of its scheduled set that are due by the server's clock into its
 * stream, at most ARGV[1] members in all, starting with the ARGV[2]th
 * task (calls take turns going first, so that one task's backlog cannot
 * keep the others' due members waiting): each as an entry with field
 * body (the member's body, its text unchanged), scheduled_id (its id) and
 * reply_to, correlation_id, dedup_key when the member has them. A member
 * that cannot be moved goes to the task's dead-letter stream instead
 * (body = the member's text, task = its name, error, attempts 0,
 * failed_at, origin_id = its id when readable). XADD comes before ZREM
 * for each member: a failing XADD (OOM, a key of the wrong type) stops
 * the script with the member still in the set, and the members before it
 * are moved completely. KEYS: scheduled set, stream, dead-letter stream,
 * per task, then the due-time index of their slot, in which each set
 * looked at gets its earliest due time (or leaves, empty). ARGV: batch,
 * first, then the task names. Returns, per task
 * in KEYS order, {moved,
 * dead-lettered, ms until its next member is due (-1: its set is empty;
 * 0: more are due, or the batch ran out before its turn), members left
 * (-1: not looked at)}. One call serves up to TM_REDIS_PROMOTE_CHUNK
 * idle tasks: the promoter's cost to Redis grows with chunks, not tasks.
 */
static const char promote_script[] =
    TM_REDIS_MEMBER_LUA
    "local function entry(m)\n"
    "  if string.sub(m, ws(m, 1), ws(m, 1)) ~= '{' then\n"
    "    return nil, 'scheduled member is not a JSON object'\n"
    "  end\n"
    "  local ok, v = pcall(cjson.decode, m)\n"
    "  if not ok or type(v) ~= 'table' then\n"
    "    return nil, 'scheduled member is not valid JSON'\n"
    "  end\n"
    "  local id = v['id']\n"
    "  if id ~= nil and type(id) ~= 'string' then\n"
    "    return nil, 'scheduled member: id is not a string', nil\n"
    "  end\n"
    "  if type(v['body']) ~= 'table' then\n"
    "    return nil, 'scheduled member has no body object', id\n"
    "  end\n"
    "  local body = body_text(m)\n"
    "  if body == nil or string.sub(body, 1, 1) ~= '{' then\n"
    "    return nil, 'scheduled member has no body object', id\n"
    "  end\n"
    "  local f = {'body', body}\n"
    "  if id ~= nil then f[#f + 1] = 'scheduled_id'; f[#f + 1] = id end\n"
    "  for _, k in ipairs({'reply_to', 'correlation_id', 'dedup_key',\n"
    "                      'traceparent', 'tracestate'}) do\n"
    "    local x = v[k]\n"
    "    if x ~= nil and x ~= cjson.null then\n"
    "      if type(x) ~= 'string' then\n"
    "        return nil, 'scheduled member: ' .. k .. ' is not a string', id\n"
    "      end\n"
    "      f[#f + 1] = k; f[#f + 1] = x\n"
    "    end\n"
    "  end\n"
    "  return f\n"
    "end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local budget = tonumber(ARGV[1])\n"
    "local n = #ARGV - 2\n"
    "local out = {}\n"
    "for j = 0, n - 1 do\n"
    "  local i = (tonumber(ARGV[2]) - 1 + j) % n + 1\n"
    "  local ks, kq, kd = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]\n"
    "  local moved, dead, wait, left = 0, 0, 0, -1\n"
    "  if budget > 0 then\n"
    "    local due = redis.call('ZRANGEBYSCORE', ks, '-inf', now,\n"
    "      'LIMIT', 0, budget)\n"
    "    for _, m in ipairs(due) do\n"
    "      local f, why, id = entry(m)\n"
    "      if f then\n"
    "        redis.call('XADD', kq, '*', unpack(f))\n"
    "        moved = moved + 1\n"
    "      else\n"
    "        redis.call('XADD', kd, '*', 'body', m, 'task', ARGV[i + 2],\n"
    "          'error', why, 'attempts', '0', 'failed_at', tostring(now),\n"
    "          'origin_id', id or '')\n"
    "        dead = dead + 1\n"
    "      end\n"
    "      redis.call('ZREM', ks, m)\n"
    "    end\n"
    "    budget = budget - moved - dead\n"
    "    local nxt = redis.call('ZRANGE', ks, 0, 0, 'WITHSCORES')\n"
    "    wait = -1\n"
    "    if #nxt > 0 then\n"
    "      wait = math.max(0, math.ceil(tonumber(nxt[2]) - now))\n"
    "      redis.call('ZADD', KEYS[#KEYS], nxt[2], ks)\n"
    "      left = redis.call('ZCARD', ks)\n"
    "    else\n"
    "      redis.call('ZREM', KEYS[#KEYS], ks)\n"
    "      left = 0\n"
    "    end\n"
    "  end\n"
    "  out[4 * i - 3] = moved\n"
    "  out[4 * i - 2] = dead\n"
    "  out[4 * i - 1] = wait\n"
    "  out[4 * i] = left\n"
    "end\n"
    "return out\n";

/* one set of a task, as the due-time index names it */
struct idx_name {
    const char *key;
    size_t ti;
    int retry; /* its retry set, else its scheduled set */
};

static int idx_cmp(const void *a, const void *b)
{
    return strcmp(((const struct idx_name *)a)->key,
                  ((const struct idx_name *)b)->key);
}

/* index_script gives each scheduled set KEYS[1 .. #KEYS - 1] that has
 * members its entry in the due-time index KEYS[#KEYS] (ZADD LT: an entry
 * already earlier stays). Returns the count of sets indexed. */
static const char index_script[] =
    "local n = 0\n"
    "for i = 1, #KEYS - 1 do\n"
    "  local nxt = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')\n"
    "  if #nxt > 0 then\n"
    "    redis.call('ZADD', KEYS[#KEYS], 'LT', nxt[2], KEYS[i])\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "return n\n";

/* count_script returns the member count of each set in KEYS. */
static const char count_script[] =
    "local out = {}\n"
    "for i = 1, #KEYS do out[i] = redis.call('ZCARD', KEYS[i]) end\n"
    "return out\n";

/* struct tm_redis_sched is the promoter of one adapter. Everything under
 * mu is shared with the threads that publish (poke) and destroy (stop);
 * the rest belongs to the promoter thread. */
struct tm_redis_sched {
    struct tm_redis *rb;
    char **keys;                  /* per task: "<queue>.scheduled" */
    atomic_llong *counts;         /* per task: members left, -1 unknown */
    const char **argv;            /* promoter thread: one chunk's call */
    size_t turn;                  /* promoter thread: calls made */
    struct idx_name *names;       /* sorted by key: every set indexed */
    size_t nnames;
    unsigned char *due;           /* promoter thread, per task: promote
                                     it this round */
    size_t *pick;                 /* promoter thread: tasks to promote */
    int swept;                    /* promoter thread: a round looked at
                                     every set */
    int64_t offset_ms;            /* promoter thread: server clock minus
                                     tm_wall_ms() */
    int64_t clock_at_ms;          /* promoter thread: when it was read,
                                     0 never */
    size_t sweep_from;            /* promoter thread: the next sweep
                                     step's first task (by_key) */
    int64_t sweep_at_ms;          /* promoter thread: its time */
    pthread_t thread;
    int started;                  /* thread runs (set by the settle
                                     thread, under mu; destroy,
                                     after the settle thread ended) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                     /* under mu */
    int poked;                    /* under mu: a round is wanted now */
    int count_wanted;             /* under mu: the depth refresher asks
                                     for the sets' counts */
    uint64_t count_rounds;        /* under mu: counts read (cv: done) */
    struct tm_rlink link;         /* promoter thread only */
    int64_t backoff_ms;           /* promoter thread only */
    struct tm_redis_sched *next;  /* running promoters, under running.mu */
};

/* The promoters running in this process: a member added by any adapter
 * of the process wakes them all. */
static struct {
    pthread_mutex_t mu;
    struct tm_redis_sched *head;
} running = {PTHREAD_MUTEX_INITIALIZER, NULL};

/* promote_chunk runs promote_script for the n tasks ti[0 .. n) (one
 * slot) until their due members are moved (or
 * TM_REDIS_PROMOTE_CALLS calls were made). Returns the ms until the next
 * member of any of them is due (-1: none; 0: more are due now), or -2
 * when the connection failed (reason in eb). */
static int64_t promote_chunk(struct tm_redis_sched *s, const size_t *ti,
                             size_t n, char *eb, size_t ebsize)
{
    char batch[24], nkeys[24], first[24];
    tm_snprintf(batch, sizeof batch, "%d", TM_REDIS_PROMOTE_BATCH);
    tm_snprintf(nkeys, sizeof nkeys, "%zu", 3 * n + 1);
    size_t argc = 0;
    s->argv[argc++] = "EVAL";
    s->argv[argc++] = promote_script;
    s->argv[argc++] = nkeys;
    for (size_t k = 0; k < n; k++) {
        const struct tm_cfg_task *t = s->rb->tasks[ti[k]].cfg;
        s->argv[argc++] = s->keys[ti[k]];
        s->argv[argc++] = t->queue;
        s->argv[argc++] = t->dead_letter;
    }
    s->argv[argc++] = s->rb->tasks[ti[0]].due_key;
    s->argv[argc++] = batch;
    s->argv[argc++] = first;
    for (size_t k = 0; k < n; k++)
        s->argv[argc++] = s->rb->tasks[ti[k]].cfg->name;
    int64_t wait = 0;
    for (int call = 0; call < TM_REDIS_PROMOTE_CALLS && wait == 0; call++) {
        int dead = 0;
        tm_snprintf(first, sizeof first, "%zu", 1 + s->turn++ % n);
        redisReply *r = tm_redis_link_run(s->rb, &s->link,
                                          s->rb->tasks[ti[0]].slot,
                                          (int)argc, s->argv, NULL, 0, 0,
                                          eb, ebsize, &dead);
        if (r == NULL) {
            if (dead)
                return -2;
            tm_log_write(TM_LOG_WARNING, SRC, NULL, NULL,
                         "promoting delayed messages of '%s'%s: %s",
                         s->keys[ti[0]], n > 1 ? " and others" : "", eb);
            return TM_REDIS_PROMOTE_MAX_SLEEP_MS; /* try again later */
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 * n) {
            freeReplyObject(r);
            return TM_REDIS_PROMOTE_MAX_SLEEP_MS;
        }
        long long all = 0;
        wait = -1;
        for (size_t k = 0; k < n; k++) {
            const struct tm_cfg_task *t = s->rb->tasks[ti[k]].cfg;
            long long m = r->element[4 * k]->integer;
            long long d = r->element[4 * k + 1]->integer;
            long long w = r->element[4 * k + 2]->integer;
            long long left = r->element[4 * k + 3]->integer;
            all += m + d;
            if (left >= 0)
                atomic_store(&s->counts[ti[k]], left);
            if (w >= 0 && (wait < 0 || w < wait))
                wait = w;
            if (m > 0)
                tm_log_write(TM_LOG_DEBUG, SRC, t->name, NULL,
                             "%lld delayed message(s) due: moved to '%s'",
                             m, t->queue);
            if (d > 0)
                tm_log_write(TM_LOG_WARNING, SRC, t->name, NULL,
                             "%lld member(s) of '%s' could not become "
                             "messages; moved to '%s' with the reason", d,
                             s->keys[ti[k]], t->dead_letter);
        }
        /* wait 0: a full batch left due members for another call; after
         * a partial one every task was looked at, and what is due now
         * came in since (its member is due this millisecond) */
        if (all < TM_REDIS_PROMOTE_BATCH && wait == 0)
            wait = 1;
        freeReplyObject(r);
    }
    return wait;
}

/* promote_picked promotes the tasks s->pick[0 .. npick) (in by_key
 * order), a script per chunk of one slot. Lowers *sleep_ms to the
 * earliest next due time they reported; sets *failed when a connection
 * failed. */
static void promote_picked(struct tm_redis_sched *s, size_t npick,
                           int64_t *sleep_ms, int *failed)
{
    char eb[256];
    for (size_t i = 0; i < npick;) {
        /* a chunk: the tasks that follow in the same slot */
        size_t n = 1;
        unsigned key = s->rb->tasks[s->pick[i]].lane_key;
        while (i + n < npick && n < TM_REDIS_PROMOTE_CHUNK &&
               s->rb->tasks[s->pick[i + n]].lane_key == key)
            n++;
        int64_t w = promote_chunk(s, &s->pick[i], n, eb, sizeof eb);
        i += n;
        if (w == -2) {
            /* the link closed the connection to that task's node; the
             * other tasks (other nodes in a cluster) go on */
            if (!*failed)
                tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL,
                             "delayed messages: %s; retrying", eb);
            *failed = 1;
            continue;
        }
        if (w >= 0 && w < *sleep_ms)
            *sleep_ms = w;
    }
}

/* read_clock reads the server's clock into s->offset_ms when that is
 * due; -1 when the connection failed. */
static int read_clock(struct tm_redis_sched *s, unsigned slot)
{
    int64_t now = tm_now_ms();
    if (s->clock_at_ms != 0 && now - s->clock_at_ms < TM_REDIS_CLOCK_MS)
        return 0;
    char eb[256];
    const char *argv[] = {"TIME"};
    int dead = 0;
    int64_t before = tm_wall_ms();
    redisReply *r = tm_redis_link_run(s->rb, &s->link, slot, 1, argv, NULL,
                                      0, 0, eb, sizeof eb, &dead);
    int64_t after = tm_wall_ms();
    if (r == NULL)
        return dead ? -1 : 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        int64_t server = strtoll(r->element[0]->str, NULL, 10) * 1000 +
                         strtoll(r->element[1]->str, NULL, 10) / 1000;
        s->offset_ms = server - (before + after) / 2;
        s->clock_at_ms = now;
    }
    freeReplyObject(r);
    return 0;
}

/* read_index reads the earliest entries of the due-time index of the
 * slot of task by_key[from] (the tasks of that slot follow it), marks in s->due the tasks
 * to promote, hands due retries to their lanes,
 * and lowers *sleep_ms to the earliest entry of ours not due yet. -1
 * when the connection failed. */
static int read_index(struct tm_redis_sched *s, size_t from,
                      int64_t *sleep_ms)
{
    struct tm_redis *rb = s->rb;
    const struct tm_redis_task *first = &rb->tasks[rb->by_key[from]];
    char eb[256], stop[24];
    tm_snprintf(stop, sizeof stop, "%d", TM_REDIS_INDEX_PEEK - 1);
    const char *argv[] = {"ZRANGE", first->due_key, "0", stop, "WITHSCORES"};
    int dead = 0;
    redisReply *r = tm_redis_link_run(rb, &s->link, first->slot, 5, argv,
                                      NULL, 0, 0, eb, sizeof eb, &dead);
    if (r == NULL) {
        if (!dead)
            tm_log_write(TM_LOG_WARNING, SRC, NULL, NULL,
                         "reading the due-time index '%s': %s",
                         first->due_key, eb);
        return dead ? -1 : 0;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
        freeReplyObject(r);
        return 0;
    }
    int64_t now = tm_wall_ms() + s->offset_ms; /* the server's, about */
    for (size_t e = 0; e + 1 < r->elements; e += 2) {
        const redisReply *m = r->element[e], *sc = r->element[e + 1];
        if (m->type != REDIS_REPLY_STRING || sc->type != REDIS_REPLY_STRING)
            continue;
        struct idx_name want = {m->str, 0, 0};
        const struct idx_name *x = bsearch(&want, s->names, s->nnames,
                                           sizeof *s->names, idx_cmp);
        if (x == NULL || rb->tasks[x->ti].lane_key != first->lane_key)
            continue; /* another deployment's set, or another slot's */
        long long score = strtoll(sc->str, NULL, 10);
        int64_t wait = score - now;
        if (x->retry) {
            /* the lane looks at the set when it is due (at once when it
             * is): its script claims, and sets the index anew. A paused
             * task takes nothing: its lane is not woken for it */
            if (!atomic_load(&rb->tasks[x->ti].paused))
                tm_redis_retry_note(&rb->tasks[x->ti],
                                    tm_now_ms() + (wait > 0 ? wait : 0));
            continue;
        }
        if (wait <= 0)
            s->due[x->ti] = 1;
        else if (wait < *sleep_ms)
            *sleep_ms = wait;
    }
    freeReplyObject(r);
    return 0;
}

/* sweep_step runs index_script for the next TM_REDIS_SWEEP_TASKS tasks
 * (by_key order, a call per slot among them) when a step is due; -1 when
 * the connection failed. */
static int sweep_step(struct tm_redis_sched *s)
{
    struct tm_redis *rb = s->rb;
    int64_t now = tm_now_ms();
    if (now < s->sweep_at_ms)
        return 0;
    size_t left = rb->ntasks < TM_REDIS_SWEEP_TASKS ? rb->ntasks
                                                     : TM_REDIS_SWEEP_TASKS;
    s->sweep_at_ms = now + (int64_t)(left + 1) * 1000 / TM_REDIS_SWEEP_RATE;
    size_t from = s->sweep_from % rb->ntasks;
    while (left > 0) {
        size_t n = 1;
        unsigned key = rb->tasks[rb->by_key[from]].lane_key;
        while (n < left && from + n < rb->ntasks &&
               rb->tasks[rb->by_key[from + n]].lane_key == key)
            n++;
        char nkeys[24], eb[256];
        tm_snprintf(nkeys, sizeof nkeys, "%zu", n + 1);
        size_t argc = 0;
        s->argv[argc++] = "EVAL";
        s->argv[argc++] = index_script;
        s->argv[argc++] = nkeys;
        for (size_t k = 0; k < n; k++)
            s->argv[argc++] = s->keys[rb->by_key[from + k]];
        s->argv[argc++] = rb->tasks[rb->by_key[from]].due_key;
        int dead = 0;
        redisReply *r = tm_redis_link_run(rb, &s->link,
                                          rb->tasks[rb->by_key[from]].slot,
                                          (int)argc, s->argv, NULL, 0, 0, eb,
                                          sizeof eb, &dead);
        if (r == NULL) {
            if (dead)
                return -1;
            tm_log_write(TM_LOG_WARNING, SRC, NULL, NULL,
                         "indexing delayed messages of '%s': %s",
                         s->keys[rb->by_key[from]], eb);
        } else {
            freeReplyObject(r);
        }
        left -= n;
        from = (from + n) % rb->ntasks;
    }
    s->sweep_from = from;
    return 0;
}

/* round promotes every task's due members; returns how long to sleep
 * before the next round (ms). The first round looks at every set; the
 * others at the due-time index, and at the sets it names due. */
static int64_t round_run(struct tm_redis_sched *s)
{
    struct tm_redis *rb = s->rb;
    int64_t sleep_ms = TM_REDIS_PROMOTE_MAX_SLEEP_MS;
    int failed = 0;
    size_t npick = 0;
    if (!s->swept) {
        for (size_t i = 0; i < rb->ntasks; i++)
            s->pick[npick++] = rb->by_key[i];
        promote_picked(s, npick, &sleep_ms, &failed);
        s->swept = !failed;
    } else if (read_clock(s, rb->tasks[rb->by_key[0]].slot) != 0 ||
               sweep_step(s) != 0) {
        failed = 1;
    } else {
        memset(s->due, 0, rb->ntasks * sizeof *s->due);
        for (size_t i = 0; i < rb->ntasks;) {
            size_t n = 1;
            unsigned key = rb->tasks[rb->by_key[i]].lane_key;
            while (i + n < rb->ntasks &&
                   rb->tasks[rb->by_key[i + n]].lane_key == key)
                n++;
            if (read_index(s, i, &sleep_ms) != 0)
                failed = 1;
            i += n;
        }
        for (size_t i = 0; i < rb->ntasks; i++)
            if (s->due[rb->by_key[i]] == 1)
                s->pick[npick++] = rb->by_key[i];
        promote_picked(s, npick, &sleep_ms, &failed);
    }
    if (failed) {
        /* a backoff that grows while rounds fail */
        s->backoff_ms = s->backoff_ms < TM_REDIS_PROMOTE_BACKOFF_MIN_MS
                            ? TM_REDIS_PROMOTE_BACKOFF_MIN_MS
                            : s->backoff_ms * 2;
        if (s->backoff_ms > TM_REDIS_PROMOTE_BACKOFF_MAX_MS)
            s->backoff_ms = TM_REDIS_PROMOTE_BACKOFF_MAX_MS;
        if (s->backoff_ms < sleep_ms)
            sleep_ms = s->backoff_ms;
    } else {
        s->backoff_ms = 0;
    }
    /* jitter: daemons that woke together drift apart */
    int64_t span = sleep_ms / 10 < TM_REDIS_PROMOTE_JITTER_MS
                       ? sleep_ms / 10
                       : TM_REDIS_PROMOTE_JITTER_MS;
    if (span > 0)
        sleep_ms += (int64_t)(tm_rand64() % (uint64_t)(span + 1));
    return sleep_ms;
}

/* count_all reads the member count of every task's scheduled set into
 * s->counts: a script per chunk of one slot (ZCARD each). */
static void count_all(struct tm_redis_sched *s)
{
    struct tm_redis *rb = s->rb;
    for (size_t i = 0; i < rb->ntasks;) {
        size_t n = 1;
        unsigned key = rb->tasks[rb->by_key[i]].lane_key;
        while (i + n < rb->ntasks && n < TM_REDIS_PROMOTE_CHUNK &&
               rb->tasks[rb->by_key[i + n]].lane_key == key)
            n++;
        char nkeys[24], eb[256];
        tm_snprintf(nkeys, sizeof nkeys, "%zu", n);
        size_t argc = 0;
        s->argv[argc++] = "EVAL";
        s->argv[argc++] = count_script;
        s->argv[argc++] = nkeys;
        for (size_t k = 0; k < n; k++)
            s->argv[argc++] = s->keys[rb->by_key[i + k]];
        int dead = 0;
        redisReply *r = tm_redis_link_run(rb, &s->link,
                                          rb->tasks[rb->by_key[i]].slot,
                                          (int)argc, s->argv, NULL, 0, 0, eb,
                                          sizeof eb, &dead);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == n)
            for (size_t k = 0; k < n; k++)
                if (r->element[k]->type == REDIS_REPLY_INTEGER)
                    atomic_store(&s->counts[rb->by_key[i + k]],
                                 r->element[k]->integer);
        if (r != NULL)
            freeReplyObject(r);
        i += n;
    }
}

static void *promoter_main(void *arg)
{
    struct tm_redis_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        s->poked = 0;
        int counting = s->count_wanted;
        s->count_wanted = 0;
        pthread_mutex_unlock(&s->mu);
        int64_t sleep_ms = round_run(s);
        if (counting)
            count_all(s);
        pthread_mutex_lock(&s->mu);
        if (counting) {
            s->count_rounds++;
            pthread_cond_broadcast(&s->cv);
        }
        int64_t until = tm_now_ns() + sleep_ms * 1000000LL;
        for (;;) {
            int64_t now = tm_now_ns();
            if (s->stop || s->poked || now >= until)
                break;
            tm_cond_wait_ns(&s->cv, &s->mu, until - now);
        }
    }
    pthread_mutex_unlock(&s->mu);
    tm_redis_link_close(s->rb, &s->link);
    return NULL;
}

struct tm_redis_sched *tm_redis_sched_new(struct tm_redis *rb)
{
    struct tm_redis_sched *s = tm_calloc(1, sizeof *s);
    size_t n = rb->ntasks ? rb->ntasks : 1;
    s->rb = rb;
    tm_redis_link_init(&s->link, TM_REDIS_PROMOTE_TIMEOUT_MS);
    s->keys = tm_calloc(n, sizeof *s->keys);
    s->counts = tm_calloc(n, sizeof *s->counts);
    s->argv = tm_calloc(6 + 4 * TM_REDIS_PROMOTE_CHUNK, sizeof *s->argv);
    s->names = tm_calloc(2 * n, sizeof *s->names);
    s->due = tm_calloc(n, sizeof *s->due);
    s->pick = tm_calloc(n, sizeof *s->pick);
    for (size_t i = 0; i < rb->ntasks; i++) {
        s->keys[i] = tm_redis_scheduled_key(rb->tasks[i].cfg);
        atomic_store(&s->counts[i], -1);
        s->names[s->nnames++] = (struct idx_name){s->keys[i], i, 0};
        s->names[s->nnames++] =
            (struct idx_name){rb->tasks[i].retry_key, i, 1};
    }
    qsort(s->names, s->nnames, sizeof *s->names, idx_cmp);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    return s;
}

void tm_redis_sched_start(struct tm_redis_sched *s)
{
    if (s == NULL || s->started || s->rb->ntasks == 0)
        return;
    int rc = pthread_create(&s->thread, NULL, promoter_main, s);
    if (rc != 0) {
        char eb[128];
        tm_log_write(TM_LOG_ERR, SRC, NULL, NULL,
                     "cannot start the delayed-message promoter: %s; "
                     "trying again", tm_strerror(rc, eb, sizeof eb));
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->started = 1; /* under mu too: the depth refresher reads it */
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&running.mu);
    s->next = running.head;
    running.head = s;
    pthread_mutex_unlock(&running.mu);
}

void tm_redis_sched_free(struct tm_redis_sched *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        pthread_mutex_lock(&running.mu);
        struct tm_redis_sched **pp = &running.head;
        while (*pp != NULL && *pp != s)
            pp = &(*pp)->next;
        assert(*pp == s);
        *pp = s->next;
        pthread_mutex_unlock(&running.mu);
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    assert(!tm_redis_link_up(&s->link));
    for (size_t i = 0; i < s->rb->ntasks; i++)
        tm_free(s->keys[i]);
    tm_free(s->keys);
    tm_free(s->counts);
    tm_free(s->argv);
    tm_free(s->names);
    tm_free(s->due);
    tm_free(s->pick);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    tm_free(s);
}

/* poke_all makes every promoter of the process start a round now. */
static void poke_all(void)
{
    pthread_mutex_lock(&running.mu);
    for (struct tm_redis_sched *s = running.head; s != NULL; s = s->next) {
        pthread_mutex_lock(&s->mu);
        s->poked = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&running.mu);
}

void tm_redis_sched_poke(void)
{
    poke_all();
}

/* add_script adds member ARGV[2] scored ARGV[1] to the scheduled set
 * KEYS[1] and gives the set its index entry in KEYS[2], the due-time
 * index of its slot (retry.c). */
static const char add_script[] =
    "redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])\n"
    "redis.call('ZADD', KEYS[2], 'LT', ARGV[1], KEYS[1])\n"
    "return 1\n";

/* tm_redis_publish_at adds body to the task's scheduled set, due at
 * due_ms, as {"id": UUID, "body": BODY}; the body is a JSON object
 * already checked by the caller, copied as it is. The id printed is the
 * member's id (the stream entry gets its own id when it is promoted, and
 * carries this one as scheduled_id). */
int tm_redis_publish_at(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *body, size_t len,
                        const struct tm_pub *pub, int64_t due_ms, char *id,
                        size_t idlen)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    /* a priority is refused by the config loader and the CLI on Redis */
    char uuid[40], score[24];
    int rc = -1;
    tm_uuid4(uuid, sizeof uuid);
    tm_snprintf(score, sizeof score, "%lld", (long long)due_ms);
    char *key = tm_redis_scheduled_key(t);
    char *member;
    const char *dk = tm_pub_dedup_key(pub), *tp = tm_pub_traceparent(pub);
    /* a traceparent is 55 characters of hex digits and '-': no escaping */
    char tpf[80] = "";
    if (tp != NULL)
        tm_snprintf(tpf, sizeof tpf, ",\"traceparent\":\"%s\"", tp);
    if (dk != NULL) {
        /* the key is any text: cJSON writes it as a JSON string */
        cJSON *s = cJSON_CreateString(dk);
        char *q = cJSON_PrintUnformatted(s);
        member = tm_asprintf("{\"id\":\"%s\",\"body\":%.*s,\"dedup_key\":%s%s}",
                             uuid, (int)len, body, q, tpf);
        cJSON_free(q);
        cJSON_Delete(s);
    } else {
        member = tm_asprintf("{\"id\":\"%s\",\"body\":%.*s%s}", uuid,
                             (int)len, body, tpf);
    }
    /* the member and its set's index entry in one script: the index
     * keeps the set's earliest due time (ZADD LT) */
    char *idx = tm_redis_due_key(rb->cluster,
                                 tm_redis_key_slot(t->queue,
                                                   strlen(t->queue)));
    const char *argv[] = {"EVAL", add_script, "2", key, idx, score, member};
    size_t lens[] = {4, strlen(add_script), 1, strlen(key), strlen(idx),
                     strlen(score), strlen(member)};
    redisReply *r = tm_redis_cli_command(rb, 7, argv, lens, 3, 0);
    tm_free(idx);
    if (r == NULL)
        goto out;
    freeReplyObject(r);
    tm_snprintf(id, idlen, "%s", uuid);
    /* a daemon's own message may be due before its promoters wake */
    poke_all();
    rc = 0;
out:
    tm_free(member);
    tm_free(key);
    return rc;
}

int tm_redis_scheduled(struct tm_broker *b, size_t ti, long long *n)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    *n = -1;
    if (rb->sched == NULL || ti >= rb->ntasks)
        return -1;
    struct tm_redis_sched *s = rb->sched;
    pthread_mutex_lock(&s->mu);
    if (ti == 0 && s->started) {
        /* the first task of a depth read: the promoter reads every
         * set's count (a scrape's read, at most every few seconds; an
         * idle daemon nobody scrapes reads none), waited for a second at
         * most (else the last counts are served) */
        uint64_t want = s->count_rounds + 1;
        s->count_wanted = 1;
        s->poked = 1;
        pthread_cond_broadcast(&s->cv);
        int64_t until = tm_now_ns() + 1000 * 1000000LL, now;
        while (!s->stop && s->count_rounds < want &&
               (now = tm_now_ns()) < until)
            tm_cond_wait_ns(&s->cv, &s->mu, until - now);
    }
    pthread_mutex_unlock(&s->mu);
    *n = atomic_load(&s->counts[ti]);
    return 0;
}
