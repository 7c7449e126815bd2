/* schedules.c - `taskmill schedules`: each schedule of the configuration
 * with its last fired slot (from the broker) and its next slot. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "admin/admin.h"
#include "schedule/schedule.h"
#include "util/util.h"

/* slot_text writes a slot as RFC 3339, or "-" when there is none. */
static const char *slot_text(int64_t ms, char *buf, size_t size)
{
    if (ms < 0)
        tm_snprintf(buf, size, "-");
    else
        tm_rfc3339(ms, buf, size);
    return buf;
}

/* width_of is the width of a column: its heading or its widest value. */
static int width_of(const char *heading,
                    const struct tm_admin_sched_row *rows, size_t n,
                    const char *(*get)(const struct tm_admin_sched_row *))
{
    size_t w = strlen(heading);
    for (size_t i = 0; i < n; i++)
        if (strlen(get(&rows[i])) > w)
            w = strlen(get(&rows[i]));
    return (int)w;
}

static const char *get_name(const struct tm_admin_sched_row *r)
{
    return r->s->name;
}

static const char *get_task(const struct tm_admin_sched_row *r)
{
    return r->s->task;
}

static const char *get_spec(const struct tm_admin_sched_row *r)
{
    return r->s->spec_text;
}

static const char *get_zone(const struct tm_admin_sched_row *r)
{
    return r->s->timezone != NULL ? r->s->timezone : "-";
}

int tm_cli_schedules(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    int status = TM_EXIT_FAIL;
    struct tm_broker *b = NULL;
    struct tm_admin_sched_row *rows = NULL;
    struct tm_admin_err err;
    char last[40], next[40];
    if (a->npos != 0) {
        status = tm_cli_usage_error("schedules takes no argument");
        goto out;
    }
    b = tm_cli_broker(cfg);
    if (b == NULL)
        goto out;
    size_t n = cfg->nschedules;
    rows = tm_calloc(n ? n : 1, sizeof *rows);
    if (tm_admin_schedules(b, tm_sched_now_ms(), rows, &err) != 0) {
        fprintf(stderr, "taskmill: cannot read the last slots from the "
                "broker: %s\n", err.msg);
        goto out;
    }
    int wn = width_of("NAME", rows, n, get_name);
    int wt = width_of("TASK", rows, n, get_task);
    int ws = width_of("SPEC", rows, n, get_spec);
    int wz = width_of("ZONE", rows, n, get_zone);
    printf("%-*s  %-*s  %-*s  %-*s  %-24s  %s\n", wn, "NAME", wt, "TASK", ws,
           "SPEC", wz, "ZONE", "LAST", "NEXT");
    for (size_t i = 0; i < n; i++)
        printf("%-*s  %-*s  %-*s  %-*s  %-24s  %s\n", wn, get_name(&rows[i]),
               wt, get_task(&rows[i]), ws, get_spec(&rows[i]), wz,
               get_zone(&rows[i]),
               slot_text(rows[i].last_ms, last, sizeof last),
               slot_text(rows[i].next_ms, next, sizeof next));
    status = TM_EXIT_OK;
out:
    tm_free(rows);
    tm_cli_broker_close(b);
    tm_cfg_free(cfg);
    return status;
}
