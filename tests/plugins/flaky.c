/* flaky.c - test plugin: each run appends "<message id> <attempt>" to the
 * file named by config key "path"; attempt 1 then sleeps {"first_ms": N}
 * if asked and fails (an error), later attempts sleep {"ms": N} if asked
 * and succeed. Used to count the runs of a message across consumers and
 * connection faults. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "path_log.h"

static int cb_run(struct tm_call *call)
{
    char line[256];
    int n = snprintf(line, sizeof line, "%s %u\n", call->id, call->attempt);
    if (write(*(int *)call->task_data, line, (size_t)n) != n)
        return TM_TASK_ERROR;
    const char *ms = strstr(call->body, call->attempt == 1 ? "\"first_ms\""
                                                           : "\"ms\"");
    if (ms != NULL) {
        long t = strtol(strchr(ms, ':') + 1, NULL, 10);
        struct timespec ts = {t / 1000, (t % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return call->attempt == 1 ? TM_TASK_ERROR : TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-flaky",
    .version = "1.0.0",
    .description = "fails its first attempt, journals every run",
    .cb_init = tm_test_path_init,
    .cb_fini = tm_test_path_fini,
    .cb_run = cb_run,
)
