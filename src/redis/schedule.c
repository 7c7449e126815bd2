/* schedule.c - Redis side of periodic schedules: each slot is published
 * once, whatever the number of daemons, by one script that compares and
 * sets the schedule's last fired slot and adds the message. */
#include "redis/redis.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "schedule/schedule.h"
#include "util/util.h"

#define SRC TM_REDIS_SRC

/* Command timeout of a schedule session. */
#define TM_REDIS_SCHED_TIMEOUT_MS 5000

/*
 * fire_script publishes one slot unless it or a later one was fired, or
 * it is still in the future on the broker's clock.
 * KEYS[1] the task's stream, KEYS[2] the schedule's last-slot key
 * ("<queue>.sched.<schedule>", in the stream's hash slot). ARGV[1] the
 * slot (epoch ms), ARGV[2] the body, ARGV[3] the schedule's name,
 * ARGV[4] the entry's dedup key, ARGV[5] how far ahead of the server's
 * TIME a slot may be (ms).
 * Returns {2, now} (the server's TIME, epoch ms) when the slot is later
 * than now + ARGV[5]: nothing changed; {0, last} when the key already
 * held this slot or a later one; {1, slot} when it added the entry. The
 * key only ever grows, to a slot at most ARGV[5] past the server's
 * TIME, and it changes in the same script as the XADD: a slot is added
 * once, a slot older than one fired is never added, and no daemon's
 * clock can mark a future slot fired. TIME before a write is allowed:
 * scripts replicate their effects (the default from Redis 5 on; the
 * call asks for it on older servers).
 */
static const char fire_script[] =
    "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local slot = tonumber(ARGV[1])\n"
    "if slot > now + tonumber(ARGV[5]) then\n"
    "  return {2, now}\n"
    "end\n"
    "local v = redis.call('GET', KEYS[2])\n"
    "if v and tonumber(v) and tonumber(v) >= slot then\n"
    "  return {0, v}\n"
    "end\n"
    "redis.call('SET', KEYS[2], ARGV[1])\n"
    "redis.call('XADD', KEYS[1], '*', 'body', ARGV[2], 'schedule', ARGV[3],"
    " 'slot', ARGV[1], 'dedup_key', ARGV[4])\n"
    "return {1, ARGV[1]}\n";

/* struct tm_redis_sched is the Redis schedule session: a link of its own
 * (a connection per node it used), used by one thread. Each script
 * touches one task's keys, in the task's slot (the one-slot rule). */
struct tm_redis_sched {
    struct tm_sched_session base;
    struct tm_rlink link;
};

struct tm_sched_session *tm_redis_sched_open(struct tm_broker *b, int fire,
                                             char *err, size_t errlen)
{
    struct tm_redis *rb = (struct tm_redis *)b;
    (void)fire; /* Redis needs no election: the script decides */
    struct tm_redis_sched *rs = tm_calloc(1, sizeof *rs);
    rs->base.b = b;
    tm_redis_link_init(&rs->link, TM_REDIS_SCHED_TIMEOUT_MS);
    /* reach the broker now, so that a failure is told at once: the one
     * server (or the sentinels' master), or a cluster's slot map */
    int ok = rb->cluster
                 ? tm_redis_topo_refresh(rb, 0, err, errlen) == 0
                 : tm_redis_link_get(rb, &rs->link, 0, err, errlen) != NULL;
    if (!ok) {
        tm_redis_link_close(rb, &rs->link);
        tm_free(rs);
        return NULL;
    }
    return &rs->base;
}

/* parse_slot reads a slot number out of a reply element; -1 when it is
 * not one. */
static int64_t parse_slot(const redisReply *r)
{
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type != REDIS_REPLY_STRING || r->len == 0)
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(r->str, &end, 10);
    return errno == 0 && end != NULL && *end == '\0' ? v : -1;
}

int tm_redis_sched_fire(struct tm_sched_session *ss,
                        const struct tm_cfg_schedule *s, int64_t slot_ms,
                        int64_t *last_ms)
{
    struct tm_redis_sched *rs = (struct tm_redis_sched *)ss;
    const struct tm_cfg_task *t = tm_cfg_find_task(ss->b->cfg, s->task);
    char slot[24], early[24], eb[256];
    int rc = -1, dead = 0;
    char *key = NULL, *dkey = NULL;
    redisReply *r = NULL;
    if (last_ms != NULL)
        *last_ms = -1;
    /* the configuration checked that the task exists */
    if (t == NULL) {
        tm_sched_session_error(ss, "schedule '%s': no task '%s'", s->name,
                               s->task);
        goto out;
    }
    key = tm_redis_sched_key(t, s->name);
    tm_snprintf(slot, sizeof slot, "%lld", (long long)slot_ms);
    tm_snprintf(early, sizeof early, "%d", TM_SCHED_EARLY_MS);
    dkey = tm_sched_dedup_key(s->name, slot_ms);
    const char *argv[] = {"EVAL", fire_script, "2",  t->queue, key,
                          slot,   s->body_json, s->name, dkey, early};
    r = tm_redis_link_run((struct tm_redis *)ss->b, &rs->link,
                          tm_redis_key_slot(t->queue, strlen(t->queue)), 10,
                          argv, NULL, 0, 0, eb, sizeof eb, &dead);
    if (r == NULL) {
        tm_sched_session_error(ss, "schedule '%s': %s", s->name, eb);
        goto out;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER) {
        tm_sched_session_error(
            ss, "schedule '%s': unexpected reply of the fire script", s->name);
        goto out;
    }
    if (last_ms != NULL)
        *last_ms = parse_slot(r->element[1]);
    rc = r->element[0]->integer == 1   ? 1
         : r->element[0]->integer == 2 ? 2
                                       : 0;
out:
    if (r != NULL)
        freeReplyObject(r);
    tm_free(dkey);
    tm_free(key);
    return rc;
}

int tm_redis_sched_last(struct tm_sched_session *ss,
                        const struct tm_cfg_schedule *s, int64_t *slot_ms)
{
    struct tm_redis_sched *rs = (struct tm_redis_sched *)ss;
    const struct tm_cfg_task *t = tm_cfg_find_task(ss->b->cfg, s->task);
    char eb[256];
    int dead = 0;
    *slot_ms = -1;
    if (t == NULL)
        return 0;
    char *key = tm_redis_sched_key(t, s->name);
    const char *argv[] = {"GET", key};
    redisReply *r = tm_redis_link_run(
        (struct tm_redis *)ss->b, &rs->link,
        tm_redis_key_slot(t->queue, strlen(t->queue)), 2, argv, NULL, 0, 0,
        eb, sizeof eb, &dead);
    tm_free(key);
    if (r == NULL) {
        tm_sched_session_error(ss, "schedule '%s': %s", s->name, eb);
        return -1;
    }
    *slot_ms = parse_slot(r);
    freeReplyObject(r);
    return 0;
}

int tm_redis_sched_clock(struct tm_sched_session *ss, int64_t *skew_ms)
{
    struct tm_redis_sched *rs = (struct tm_redis_sched *)ss;
    const struct tm_cfg *cfg = ss->b->cfg;
    char eb[256];
    int dead = 0, rc = -1;
    *skew_ms = 0;
    /* the server that runs the schedules' scripts: the first schedule's
     * task's (each server of a cluster has its own clock; they are
     * expected to agree) */
    const struct tm_cfg_task *t =
        cfg->nschedules > 0 ? tm_cfg_find_task(cfg, cfg->schedules[0].task)
                            : NULL;
    unsigned hslot =
        t != NULL ? tm_redis_key_slot(t->queue, strlen(t->queue)) : 0;
    const char *argv[] = {"TIME"};
    int64_t t0 = tm_sched_now_ms();
    redisReply *r = tm_redis_link_run((struct tm_redis *)ss->b, &rs->link,
                                      hslot, 1, argv, NULL, 0, 0, eb,
                                      sizeof eb, &dead);
    int64_t t1 = tm_sched_now_ms();
    if (r == NULL) {
        tm_sched_session_error(ss, "schedules: TIME: %s", eb);
        return -1;
    }
    int64_t sec = r->type == REDIS_REPLY_ARRAY && r->elements == 2
                      ? parse_slot(r->element[0])
                      : -1;
    int64_t usec = sec >= 0 ? parse_slot(r->element[1]) : -1;
    if (sec < 0 || usec < 0) {
        tm_sched_session_error(ss, "schedules: unexpected reply of TIME");
    } else {
        /* the server read its clock about half-way through the trip */
        *skew_ms = t0 + (t1 - t0) / 2 - (sec * 1000 + usec / 1000);
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

void tm_redis_sched_close(struct tm_sched_session *ss)
{
    if (ss == NULL)
        return;
    struct tm_redis_sched *rs = (struct tm_redis_sched *)ss;
    tm_redis_link_close((struct tm_redis *)ss->b, &rs->link);
    tm_free(rs);
}
