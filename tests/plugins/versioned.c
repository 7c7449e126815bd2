/* versioned.c - test plugin whose code version is fixed at build time
 * (-DTM_TEST_VERSION=N): each run sleeps {"ms": N} if asked, then appends
 * "v<N> <message id>" to the file named by config key "path". Used to see
 * which code a reload runs. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef TM_TEST_VERSION
#define TM_TEST_VERSION 0
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    const char *k = strstr(env->config_json, "\"path\"");
    const char *q1 = k ? strchr(k + 6, '"') : NULL;
    const char *q2 = q1 ? strchr(q1 + 1, '"') : NULL;
    if (q2 == NULL) {
        tm_env_log(env, TM_LOG_ERR, "config key 'path' is required");
        return -1;
    }
    char path[1024];
    snprintf(path, sizeof path, "%.*s", (int)(q2 - q1 - 1), q1 + 1);
    int *fd = malloc(sizeof *fd);
    if (fd == NULL)
        return -1;
    *fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) {
        free(fd);
        return -1;
    }
    *task_data = fd;
    return 0;
}

static void cb_fini(void *task_data)
{
    int *fd = task_data;
    close(*fd);
    free(fd);
}

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
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
