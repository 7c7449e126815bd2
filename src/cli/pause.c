/* pause.c - `taskmill pause|resume TASK`: stop or restart the intake of a
 * task on every daemon, through the state the broker keeps. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "broker/broker.h"

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
    if (b->ops->pause->pause_set == NULL) {
        fprintf(stderr, "taskmill: %s: the %s broker cannot pause a task\n",
                a->cmd, b->ops->kind);
        goto out;
    }
    if (b->ops->pause->pause_set(b, t, paused) != 0) {
        fprintf(stderr, "taskmill: %s: %s\n", a->cmd, b->errstr);
        goto out;
    }
    printf("%s task '%s'\n", paused ? "paused" : "resumed", t->name);
    status = TM_EXIT_OK;
out:
    tm_cli_broker_close(b);
    tm_cfg_free(cfg);
    return status;
}
