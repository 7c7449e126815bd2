/* pause.c - `taskmill pause|resume TASK`: stop or restart the intake of a
 * task on every daemon, through the state the broker keeps. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "admin/admin.h"

int tm_cli_pause(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    int paused = strcmp(a->cmd, "pause") == 0;
    int status = TM_EXIT_USAGE;
    struct tm_broker *b = NULL;
    const struct tm_cfg_task *t = NULL;
    if (a->npos != 1) {
        tm_cli_usage_error("%s needs one TASK", a->cmd);
        goto out;
    }
    t = tm_cli_find_task(cfg, a->pos[0]);
    if (t == NULL)
        goto out;
    b = tm_cli_broker(cfg);
    if (b == NULL)
        goto out;
    status = TM_EXIT_FAIL;
    struct tm_admin_err err;
    if (tm_admin_pause(b, t, paused, &err) != 0) {
        fprintf(stderr, "taskmill: %s: %s\n", a->cmd, err.msg);
        goto out;
    }
    printf("%s task '%s'\n", paused ? "paused" : "resumed", t->name);
    status = TM_EXIT_OK;
out:
    tm_cli_broker_close(b);
    tm_cfg_free(cfg);
    return status;
}
