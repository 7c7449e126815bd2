/* noversion.c - test plugin: a descriptor with an empty version. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-noversion",
    .version = "",
    .cb_run = cb_run,
)
