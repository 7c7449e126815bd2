/* initpid.c - test plugin: each run logs the pid of the process whose
 * cb_init made its task data ("init in pid N") and of the one running it
 * ("run in pid M"), to show where a worker's state comes from. */
#include <stdlib.h>
#include <unistd.h>

#include <taskmill.h>

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    (void)env;
    pid_t *pid = malloc(sizeof *pid);
    if (pid == NULL)
        return -1;
    *pid = getpid();
    *task_data = pid;
    return 0;
}

static void cb_fini(void *task_data)
{
    free(task_data);
}

static int cb_run(struct tm_call *call)
{
    const pid_t *init = call->task_data;
    tm_log(call, TM_LOG_INFO, "init in pid %d, run in pid %d", (int)*init,
           (int)getpid());
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-initpid",
    .version = "0.0.1",
    .description = "test plugin: logs where its task data was made",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
