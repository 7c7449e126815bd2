/* fire_report.c - what `taskmill schedules` and GET /api/v1/schedules
 * show: each schedule with its last fired slot (read from the broker)
 * and its next slot. */
#include "daemon/fire_report.h"

#include <stddef.h>

#include "broker/broker.h"
#include "config/config.h"
#include "schedule/schedule.h"
#include "util/util.h"

int tm_sched_report(struct tm_broker *b, int64_t now,
                    struct tm_sched_row *rows, char *err, size_t errlen)
{
    const struct tm_cfg *cfg = b->cfg;
    int rc = 0;
    struct tm_sched_session *ss = NULL;
    for (size_t i = 0; i < cfg->nschedules; i++) {
        rows[i].s = &cfg->schedules[i];
        rows[i].last_ms = -1;
        if (tm_sched_next(&cfg->schedules[i].spec, now, &rows[i].next_ms) !=
            0)
            rows[i].next_ms = -1;
    }
    if (cfg->nschedules == 0)
        goto out;
    if (b->ops->sched->sched_open == NULL) {
        tm_snprintf(err, errlen, "this broker keeps no schedule state");
        rc = -1;
        goto out;
    }
    ss = b->ops->sched->sched_open(b, 0, err, errlen);
    if (ss == NULL) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < cfg->nschedules; i++) {
        if (b->ops->sched->sched_last(ss, rows[i].s, &rows[i].last_ms) != 0) {
            tm_snprintf(err, errlen, "%s", ss->errstr);
            rc = -1;
            goto out;
        }
    }
out:
    if (ss != NULL)
        b->ops->sched->sched_close(ss);
    return rc;
}
