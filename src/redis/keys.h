/* keys.h - the names of a task's Redis keys, their Redis Cluster hash
 * slots, and the rule that a task's keys share one slot. No I/O, no
 * hiredis: the adapter builds its keys here, and its check op (redis.c)
 * applies the rule to a loaded config. */
#ifndef TASKMILL_REDIS_KEYS_H
#define TASKMILL_REDIS_KEYS_H

#include <stddef.h>

#include "config/config.h"

#define TM_REDIS_SLOTS 16384

/* Every key of a task is built from its queue name first, so that a hash
 * tag in the queue carries over to it. Each returns a string the caller
 * frees with tm_free. */

/* tm_redis_retry_key: "<queue>.retry.<group>", the retry schedule
 * (retry.c). */
char *tm_redis_retry_key(const struct tm_cfg_task *t);
/* tm_redis_scheduled_key: "<queue>.scheduled", the delayed messages of
 * the queue (scheduled.c). */
char *tm_redis_scheduled_key(const struct tm_cfg_task *t);
/* tm_redis_rate_key: "<queue>.rate.<group>", the rate_limit bucket
 * (rate.c). */
char *tm_redis_rate_key(const struct tm_cfg_task *t);
/* tm_redis_pause_key: "<queue>.paused.<group>", the pause state
 * (pause.c). */
char *tm_redis_pause_key(const struct tm_cfg_task *t);
/* tm_redis_dedup_key: "<queue>.dedup.<key>", the result of the message
 * with dedup key key[0 .. len) (dedup.c). */
char *tm_redis_dedup_key(const struct tm_cfg_task *t, const char *key,
                         size_t len);
/* tm_redis_sched_key: "<queue>.sched.<schedule>", the last slot of the
 * schedule fired (schedule.c). */
char *tm_redis_sched_key(const struct tm_cfg_task *t, const char *schedule);
/* tm_redis_due_key is the key of the due-time index (see retry.c) of the
 * sets of slot slot: "taskmill.due", or in a cluster "taskmill.due.{N}"
 * hashing to slot. */
char *tm_redis_due_key(int cluster, unsigned slot);

/* tm_redis_key_slot is the cluster slot of a key: CRC16 (XMODEM) of the
 * key, or of its hash tag (what is between the first '{' and the next
 * '}', when that is not empty), modulo 16384. */
unsigned tm_redis_key_slot(const char *key, size_t len);

/* tm_redis_has_hash_tag says whether key has a hash tag: a '{' followed,
 * after at least one byte, by a '}'. Every key that starts with such a
 * key hashes as it does, whatever follows. */
int tm_redis_has_hash_tag(const char *key);

/* tm_redis_task_slots_check checks that the keys of task t (its stream,
 * its retry set, its rate bucket, its dead-letter stream, and with
 * dedup_ttl its dedup keys "<queue>.dedup.<key>") hash to one slot: every
 * script and multi-key step of a task runs on one node of a cluster. 0,
 * or -1 with the reason and a hash tag that would do in err. */
int tm_redis_task_slots_check(const struct tm_cfg_task *t, char *err,
                              size_t errlen);

/* tm_redis_schedule_slot_check checks that the key of schedule
 * ("<queue>.sched.<schedule>", its last fired slot) hashes to the slot of
 * its task's stream t: the script that fires a slot sets that key and
 * adds to the stream. 0, or -1 with the reason and a hash tag in err. */
int tm_redis_schedule_slot_check(const struct tm_cfg_task *t,
                                 const char *schedule, char *err,
                                 size_t errlen);

/* tm_redis_cfg_slots_check applies the two checks above to every task and
 * schedule of cfg when it names a Redis Cluster (nothing otherwise),
 * reporting each refusal into e at the task's queue (queue_at) or the
 * schedule's task: value (task_at), until e is full. 0, or -1 when one
 * was refused. */
int tm_redis_cfg_slots_check(const struct tm_cfg *cfg,
                             struct tm_cfg_errors *e);

#endif /* TASKMILL_REDIS_KEYS_H */
