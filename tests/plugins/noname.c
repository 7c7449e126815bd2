/* noname.c - test plugin: a descriptor without a name. */
#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .version = "0.0.1",
    .cb_run = cb_run,
)
