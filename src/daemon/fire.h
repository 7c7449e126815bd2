/* fire.h - firing periodic schedules in the daemon: one thread for all
 * the schedules of a configuration, and the counts the metrics show. */
#ifndef TASKMILL_SCHEDULE_FIRE_H
#define TASKMILL_SCHEDULE_FIRE_H

#include <stdint.h>

struct tm_broker;

/* A slot found later than this after its time (a daemon that was
 * stopped, a broker that was unreachable) is no longer fired late: it
 * counts as missed, and catch_up decides. */
#define TM_FIRE_GRACE_MS 60000

/*
 * struct tm_sched_stats keeps, per schedule name, the fires this process
 * made and the last slot fired as this process knows it (its own fires
 * and what it read from the broker). It outlives configurations, so that
 * counters do not go back on a reload. Thread-safe.
 */
struct tm_sched_stats;

struct tm_sched_stats *tm_sched_stats_new(void);
void tm_sched_stats_free(struct tm_sched_stats *st);

/* tm_sched_stats_note adds one fire of schedule name when fired is set,
 * and raises its last fired slot to last_ms (ignored when negative). */
void tm_sched_stats_note(struct tm_sched_stats *st, const char *name,
                         int fired, int64_t last_ms);

/* tm_sched_stats_get reads them: 0 fires and -1 (unknown) for a schedule
 * never noted. */
void tm_sched_stats_get(struct tm_sched_stats *st, const char *name,
                        unsigned long long *fired, int64_t *last_ms);

/*
 * struct tm_fire is the firing thread of one configuration: it computes
 * the slots of every schedule of b->cfg (now from tm_sched_now_ms),
 * sleeps until the next one, and asks the broker to publish it (the
 * broker makes sure each slot is published once across daemons).
 */
struct tm_fire;

/*
 * tm_fire_start starts the thread for b's schedules, counting into st
 * (borrowed; it outlives the thread). With prev (a stopped firing thread
 * of the configuration this one replaces), schedules unchanged in name,
 * task and spec go on from the slots prev reached, so that a reload
 * neither skips nor repeats a slot; the others start afresh: the next
 * slot from now, or, with catch_up: once, the latest slot missed when no
 * daemon fired it. Returns NULL when b has no schedules or its broker
 * cannot fire them (then nothing is to be stopped).
 */
struct tm_fire *tm_fire_start(struct tm_broker *b, struct tm_sched_stats *st,
                              const struct tm_fire *prev);

/* tm_fire_stop stops the thread and closes its session; the object stays
 * for a tm_fire_start to go on from. Idempotent; NULL accepted. */
void tm_fire_stop(struct tm_fire *f);

/* tm_fire_free stops f if need be and frees it; NULL accepted. */
void tm_fire_free(struct tm_fire *f);

#endif /* TASKMILL_SCHEDULE_FIRE_H */
