/* check.c - `taskmill check`: the config and every plugin, then exit. */
#include "cli.h"

#include <stdio.h>

#include "daemon.h"
#include "util.h"

int tm_cli_check(struct tm_cfg *cfg)
{
    struct tm_task *tasks = tm_calloc(cfg->ntasks, sizeof *tasks);
    char err[1024];
    int rc = tm_tasks_load(cfg, tasks, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    else
        printf("%s: ok (%zu task%s)\n", cfg->path, cfg->ntasks,
               cfg->ntasks == 1 ? "" : "s");
    tm_tasks_unload(tasks, cfg->ntasks);
    tm_free(tasks);
    tm_cfg_free(cfg);
    return rc == 0 ? TM_EXIT_OK : TM_EXIT_USAGE;
}
