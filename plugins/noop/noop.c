/* noop.c - example task: succeeds at once, whatever the body. */
#include <taskmill.h>

/* cb_run does nothing: the plugin measures the daemon's own overhead in
 * the benchmark. */
static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "noop",
    .version = "1.0.0",
    .description = "Succeeds at once, whatever the body; the benchmark "
                   "task.",
    .cb_run = cb_run,
)
