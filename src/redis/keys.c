/* keys.c - the names of a task's Redis keys, Redis Cluster hash slots,
 * and the one-slot rule for a task's keys. */
#include "redis/keys.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

char *tm_redis_retry_key(const struct tm_cfg_task *t)
{
    return tm_asprintf("%s.retry.%s", t->queue, t->group);
}

char *tm_redis_scheduled_key(const struct tm_cfg_task *t)
{
    return tm_asprintf("%s.scheduled", t->queue);
}

char *tm_redis_rate_key(const struct tm_cfg_task *t)
{
    return tm_asprintf("%s.rate.%s", t->queue, t->group);
}

char *tm_redis_pause_key(const struct tm_cfg_task *t)
{
    return tm_asprintf("%s.paused.%s", t->queue, t->group);
}

char *tm_redis_dedup_key(const struct tm_cfg_task *t, const char *key,
                         size_t len)
{
    return tm_asprintf("%s.dedup.%.*s", t->queue, (int)len, key);
}

char *tm_redis_sched_key(const struct tm_cfg_task *t, const char *schedule)
{
    return tm_asprintf("%s.sched.%s", t->queue, schedule);
}

char *tm_redis_due_key(int cluster, unsigned slot)
{
    if (!cluster)
        return tm_strdup("taskmill.due");
    /* the first decimal tag that hashes to the slot: CRC16 spreads
     * short strings over all slots, so one is found within a few
     * hundred thousand tries at worst */
    char tag[24];
    for (unsigned long n = 0;; n++) {
        int len = snprintf(tag, sizeof tag, "%lu", n);
        if (tm_redis_key_slot(tag, (size_t)len) == slot)
            return tm_asprintf("taskmill.due.{%s}", tag);
    }
}

/* crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis
 * Cluster computes it. */
static uint16_t crc16(const char *p, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                                 : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned tm_redis_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        if (close != NULL && close > key + from)
            return crc16(key + from, (size_t)(close - (key + from))) %
                   TM_REDIS_SLOTS;
    }
    return crc16(key, len) % TM_REDIS_SLOTS;
}

static unsigned slot_of(const char *key)
{
    return tm_redis_key_slot(key, strlen(key));
}

int tm_redis_has_hash_tag(const char *key)
{
    const char *open = strchr(key, '{');
    return open != NULL && open[1] != '\0' && open[1] != '}' &&
           strchr(open + 2, '}') != NULL;
}

int tm_redis_task_slots_check(const struct tm_cfg_task *t, char *err,
                              size_t errlen)
{
    char *retry = tm_redis_retry_key(t);
    char *rate = tm_redis_rate_key(t), *pause = tm_redis_pause_key(t);
    char *sched = tm_redis_scheduled_key(t);
    unsigned q = slot_of(t->queue), r = slot_of(retry),
             d = slot_of(t->dead_letter), b = slot_of(rate),
             p = slot_of(pause), s = slot_of(sched);
    int rc = 0;
    if (q != r || q != d || q != b || q != p || q != s) {
        tm_snprintf(err, errlen,
                    "in broker.redis.mode: cluster, a task's keys must share "
                    "one hash slot (its scripts run on one node), but "
                    "queue '%s' is in slot %u, its retry set '%s' in %u, "
                    "its rate bucket '%s' in %u, its pause key '%s' in %u, "
                    "its scheduled set '%s' in %u and dead_letter '%s' in "
                    "%u; give them one hash tag, e.g. queue: '{%s}' and "
                    "dead_letter: '{%s}.dlq'",
                    t->queue, q, retry, r, rate, b, pause, p, sched, s,
                    t->dead_letter, d, t->queue, t->queue);
        rc = -1;
    } else if (t->dedup_ttl_ms > 0 && !tm_redis_has_hash_tag(t->queue)) {
        /* "<queue>.dedup.<key>": the key is the producer's, any text, so
         * only the queue's own hash tag keeps it in the queue's slot */
        tm_snprintf(err, errlen,
                    "in broker.redis.mode: cluster, a task with dedup_ttl "
                    "keeps its keys '%s.dedup.<dedup_key>' in its queue's "
                    "hash slot, which needs a hash tag in the queue name, "
                    "e.g. queue: '{%s}' and dead_letter: '{%s}.dlq'",
                    t->queue, t->queue, t->queue);
        rc = -1;
    }
    tm_free(sched);
    tm_free(retry);
    tm_free(rate);
    tm_free(pause);
    return rc;
}

int tm_redis_schedule_slot_check(const struct tm_cfg_task *t,
                                 const char *schedule, char *err,
                                 size_t errlen)
{
    char *key = tm_redis_sched_key(t, schedule);
    unsigned q = slot_of(t->queue), k = slot_of(key);
    int rc = 0;
    if (q != k) {
        tm_snprintf(err, errlen,
                    "in broker.redis.mode: cluster, a schedule's key must "
                    "share its task's hash slot (one script fires it), but "
                    "queue '%s' is in slot %u and '%s' in %u; give the "
                    "queue a hash tag, e.g. queue: '{%s}'",
                    t->queue, q, key, k, t->queue);
        rc = -1;
    }
    tm_free(key);
    return rc;
}

int tm_redis_cfg_slots_check(const struct tm_cfg *cfg,
                             struct tm_cfg_errors *e)
{
    char why[600];
    int bad = 0;
    if (cfg->url.kind != TM_BROKER_REDIS ||
        cfg->redis_mode != TM_REDIS_CLUSTER)
        return 0;
    for (size_t i = 0; i < cfg->ntasks && !(bad && tm_cfg_errors_full(e));
         i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        if (tm_redis_task_slots_check(t, why, sizeof why) != 0) {
            tm_cfg_error(e, t->queue_at, "tasks.%s: %s", t->name, why);
            bad = 1;
        }
    }
    for (size_t i = 0;
         i < cfg->nschedules && !(bad && tm_cfg_errors_full(e)); i++) {
        const struct tm_cfg_schedule *s = &cfg->schedules[i];
        const struct tm_cfg_task *t = tm_cfg_find_task(cfg, s->task);
        if (t != NULL &&
            tm_redis_schedule_slot_check(t, s->name, why, sizeof why) != 0) {
            tm_cfg_error(e, s->task_at, "schedules.%s.task: %s", s->name,
                         why);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}
