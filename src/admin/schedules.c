/* schedules.c - what `taskmill schedules` and GET /api/v1/schedules
 * show: each schedule with its last fired slot (read from the broker)
 * and its next slot. */
#include "admin/admin.h"

#include <stddef.h>

#include "schedule/schedule.h"

int tm_admin_schedules(struct tm_broker *b, int64_t now,
                       struct tm_admin_sched_row *rows,
                       struct tm_admin_err *e)
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
        tm_admin_error(e, TM_ADMIN_E_NO_SCHEDULES, "this broker keeps no "
                       "schedule state");
        rc = -1;
        goto out;
    }
    e->code = TM_ADMIN_E_BROKER;
    e->at = 0;
    ss = b->ops->sched->sched_open(b, /* fire = */ 0, e->msg, sizeof e->msg);
    if (ss == NULL) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < cfg->nschedules; i++) {
        if (b->ops->sched->sched_last(ss, rows[i].s, &rows[i].last_ms) != 0) {
            tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", ss->errstr);
            rc = -1;
            goto out;
        }
    }
out:
    if (ss != NULL)
        b->ops->sched->sched_close(ss);
    return rc;
}
