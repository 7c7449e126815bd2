/* workerlog.c - test plugin: each worker appends "init <pid>" when its
 * worker init runs and "fini <pid>" when its worker fini runs to the file
 * named by config key "path"; runs succeed. Shows that a worker process
 * was stopped in order (its fini ran), not killed. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <stdio.h>
#include <unistd.h>

#include "path_log.h"

static int say(const int *fd, const char *what)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, (int)getpid());
    return write(*fd, line, (size_t)n) == n ? 0 : -1;
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    *worker_data = NULL;
    return say(task_data, "init");
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)worker_data;
    if (say(task_data, "fini") != 0) {
        /* nothing to tell it to */
    }
}

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-workerlog",
    .version = "0.0.1",
    .description = "test plugin: logs its workers' init and fini",
    .cb_init = tm_test_path_init,
    .cb_fini = tm_test_path_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
)
