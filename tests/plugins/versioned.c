/* versioned.c - test plugin whose code version is fixed at build time
 * (-DTM_TEST_VERSION=N): each run sleeps {"ms": N} if asked, then appends
 * "v<N> <message id>" to the file named by config key "path". Used to see
 * which code a reload runs. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "path_log.h"

#ifndef TM_TEST_VERSION
#define TM_TEST_VERSION 0
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

static int cb_run(struct tm_call *call)
{
    const char *ms = strstr(call->body, "\"ms\"");
    if (ms != NULL) {
        long n = strtol(strchr(ms, ':') + 1, NULL, 10);
        struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    char line[256];
    int n = snprintf(line, sizeof line, "v%d %s\n", TM_TEST_VERSION,
                     call->id);
    if (write(*(int *)call->task_data, line, (size_t)n) != n)
        return TM_TASK_ERROR;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-versioned",
    .version = "1.0." STR(TM_TEST_VERSION),
    .description = "writes its build-time version per run",
    .cb_init = tm_test_path_init,
    .cb_fini = tm_test_path_fini,
    .cb_run = cb_run,
)
