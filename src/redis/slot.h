/* slot.h - Redis Cluster hash slots of keys, and the rule that a task's
 * keys share one slot. No I/O, no hiredis: the configuration uses it. */
#ifndef TASKMILL_REDIS_SLOT_H
#define TASKMILL_REDIS_SLOT_H

#include <stddef.h>

#include "config.h"

#define TM_REDIS_SLOTS 16384

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

#endif /* TASKMILL_REDIS_SLOT_H */
