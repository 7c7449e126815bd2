/* fire_report.h - the schedules as `taskmill schedules` and the admin
 * API show them. */
#ifndef TASKMILL_SCHEDULE_FIRE_REPORT_H
#define TASKMILL_SCHEDULE_FIRE_REPORT_H

#include <stddef.h>
#include <stdint.h>

struct tm_broker;
struct tm_cfg_schedule;

/* struct tm_sched_row is one schedule: its configuration (borrowed from
 * the broker's), the last slot fired by any daemon and the next slot
 * (epoch ms; -1 when there is none or it is unknown). */
struct tm_sched_row {
    const struct tm_cfg_schedule *s;
    int64_t last_ms;
    int64_t next_ms;
};

/*
 * tm_sched_report fills rows[0 .. b->cfg->nschedules) for the time now:
 * next slots from the configuration, last slots read from the broker on
 * a read-only session of their own (it takes no part in firing). Returns
 * 0, or -1 with the reason in err when the broker could not be read (the
 * last slots are then -1, the rest is filled).
 */
int tm_sched_report(struct tm_broker *b, int64_t now,
                    struct tm_sched_row *rows, char *err, size_t errlen);

#endif /* TASKMILL_SCHEDULE_FIRE_REPORT_H */
