/* slots.h - the slots of a schedule: next and previous firing instant. */
#ifndef TASKMILL_SCHEDULE_SLOTS_H
#define TASKMILL_SCHEDULE_SLOTS_H

#include <stdint.h>

#include "schedule/cron.h"
#include "schedule/tz.h"

enum tm_sched_kind { TM_SCHED_CRON = 1, TM_SCHED_EVERY = 2 };

/*
 * struct tm_sched_spec is what decides a schedule's slots.
 *  - TM_SCHED_CRON: cron on the wall clock of zone tz (borrowed, never
 *    NULL). A matching wall-clock minute that occurs twice (clocks turned
 *    back) is one slot, at its first occurrence; one that does not occur
 *    (clocks turned forward) is one slot at the instant of the change,
 *    and all the skipped minutes of one change share that one slot.
 *  - TM_SCHED_EVERY: slot k is k * every_ms milliseconds after the Unix
 *    epoch (UTC; no zone).
 * Slots are strictly increasing instants, each once.
 */
struct tm_sched_spec {
    enum tm_sched_kind kind;
    struct tm_cron cron;
    const struct tm_tz *tz;
    int64_t every_ms;  /* > 0 */
};

/* TM_SCHED_MIN_MS .. TM_SCHED_MAX_MS: the instants slots are computed
 * for, years 1900 to 9999 UTC. */
#define TM_SCHED_MIN_MS (-2208988800000LL)
#define TM_SCHED_MAX_MS (253402300799999LL)

/*
 * tm_sched_next stores in *slot_ms the first slot strictly after t_ms,
 * tm_sched_prev the last slot at or before t_ms (epoch milliseconds,
 * UTC). Both return 0, or -1 when there is none between TM_SCHED_MIN_MS
 * and TM_SCHED_MAX_MS (or t_ms lies outside them).
 */
int tm_sched_next(const struct tm_sched_spec *s, int64_t t_ms,
                  int64_t *slot_ms);
int tm_sched_prev(const struct tm_sched_spec *s, int64_t t_ms,
                  int64_t *slot_ms);

/*
 * tm_sched_wall_to_instant maps wall-clock time w of zone z (civil
 * seconds, local time counted as if it were UTC) to the instant the
 * schedule fires it at: its first occurrence, or when w does not occur,
 * the instant of the change that skips it. Returns 0 when w occurs, 1
 * when it was skipped.
 */
int tm_sched_wall_to_instant(const struct tm_tz *z, int64_t w,
                             int64_t *u);

/*
 * tm_sched_dedup_key is the dedup key each fired message of slot slot_ms
 * of schedule name carries, "schedule:<name>:<slot>" with the slot in
 * epoch milliseconds (UTC, decimal, as the message's slot field): the
 * same on every daemon and broker, so that a task with dedup_ttl runs a
 * slot published twice (after a failover) once. The caller frees it.
 */
char *tm_sched_dedup_key(const char *name, int64_t slot_ms);

#endif /* TASKMILL_SCHEDULE_SLOTS_H */
