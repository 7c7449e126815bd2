/* initlog.c - test plugin: its cb_init appends "init <task> <pid>" to the
 * file named by config key "path", once per call: counts the task inits
 * of each configuration and shows which process ran them; runs succeed
 * and log "run in pid <pid>". */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <stdio.h>
#include <unistd.h>

#include "path_log.h"

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    if (tm_test_path_init(env, task_data) != 0)
        return -1;
    const int *fd = *task_data;
    char line[256];
    int n = snprintf(line, sizeof line, "init %s %d\n", env->task,
                     (int)getpid());
    if (n < 0 || (size_t)n >= sizeof line ||
        write(*fd, line, (size_t)n) != n) {
        tm_test_path_fini(*task_data);
        *task_data = NULL;
        return -1;
    }
    return 0;
}

static int cb_run(struct tm_call *call)
{
    tm_log(call, TM_LOG_INFO, "run in pid %d", (int)getpid());
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-initlog",
    .version = "0.0.1",
    .description = "test plugin: logs each task init to a file",
    .cb_init = cb_init,
    .cb_fini = tm_test_path_fini,
    .cb_run = cb_run,
)
