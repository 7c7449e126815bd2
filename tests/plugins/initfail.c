/* initfail.c - test plugin: cb_init logs a reason and fails. */
#include <stdlib.h>

#include <taskmill.h>

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    (void)task_data;
    tm_env_log(env, TM_LOG_ERR, "test-initfail refuses to start");
    return -1;
}

static void cb_fini(void *task_data)
{
    /* Never called: cb_init failed. Crash loudly if the loader does. */
    (void)task_data;
    abort();
}

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-initfail",
    .version = "0.0.1",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
