/* ok.c - test plugin: a valid descriptor whose runs succeed. cb_init
 * allocates and cb_fini frees, so a leak checker notices a missed fini. */
#include <stdlib.h>
#include <string.h>

#include <taskmill.h>

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    size_t n = strlen(env->task) + 1;
    char *copy = malloc(n);
    if (copy == NULL)
        return -1;
    memcpy(copy, env->task, n);
    *task_data = copy;
    return 0;
}

static void cb_fini(void *task_data)
{
    free(task_data);
}

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-ok",
    .version = "0.0.1",
    .description = "test plugin: valid, succeeds",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
