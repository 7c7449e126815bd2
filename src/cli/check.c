/* check.c - `taskmill check`: the config and every plugin, then exit. */
#include "cli.h"

#include <stdio.h>

#include "daemon/daemon.h"
#include "util/util.h"

/* CHECK_ERR_MAX: the refusals told, a line per refused task. */
#define CHECK_ERR_MAX 65536

int tm_cli_check(struct tm_cfg *cfg)
{
    struct tm_task *tasks = tm_calloc(cfg->ntasks, sizeof *tasks);
    char *err = tm_calloc(1, CHECK_ERR_MAX);
    /* every task's plugin is loaded and initialised as `run` does it
     * (a host loads its script or module there); every refusal is told */
    int rc = tm_tasks_load(cfg, tasks, err, CHECK_ERR_MAX);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    else
        printf("%s: ok (%zu task%s)\n", cfg->path, cfg->ntasks,
               cfg->ntasks == 1 ? "" : "s");
    tm_tasks_unload(tasks, cfg->ntasks);
    tm_free(err);
    tm_free(tasks);
    tm_cfg_free(cfg);
    return rc == 0 ? TM_EXIT_OK : TM_EXIT_USAGE;
}
