/* flaky.c - test plugin: each run appends "<message id> <attempt>" to the
 * file named by config key "path"; attempt 1 then sleeps {"first_ms": N}
 * if asked and fails (an error), later attempts sleep {"ms": N} if asked
 * and succeed. Used to count the runs of a message across consumers and
 * connection faults. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
