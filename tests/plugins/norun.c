/* norun.c - test plugin: a descriptor without cb_run. */
#include <taskmill.h>

TM_TASK_DECLARE(
    .name = "test-norun",
    .version = "0.0.1",
    .description = "test plugin: has nothing to run",
)
