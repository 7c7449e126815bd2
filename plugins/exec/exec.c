/* exec.c - task code as any executable: one process per run. */
#include "exec_host.h"

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct tm_exhost_task *t = tm_exhost_task_new(env);
    if (t == NULL)
        return -1;
    *task_data = t;
    return 0;
}

static void cb_fini(void *task_data)
{
    tm_exhost_task_free(task_data);
}

static int cb_run(struct tm_call *call)
{
    return tm_exhost_run(call->task_data, call);
}

/* the keys of a task's config: (the daemon refuses others) */
static const char *const config_keys[] = {"command", "env", "cwd",
                                          "max_output", "max_log_lines",
                                          "kill_grace_ms", NULL};

TM_TASK_DECLARE(
    .name = "exec",
    .version = "1.0.0",
    .description = "Runs the configured command once per message: the "
                   "body on stdin, the JSON result from stdout; exit 0 "
                   "succeeds, 65 rejects, anything else is an error.",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
    .config_keys = config_keys,
    .flags = TM_TASK_F_INIT_ON_RELOAD,
)
