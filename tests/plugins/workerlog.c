/* workerlog.c - test plugin: each worker appends "init <pid>" when its
 * worker init runs and "fini <pid>" when its worker fini runs to the file
 * named by config key "path"; runs succeed. Shows that a worker process
 * was stopped in order (its fini ran), not killed. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    const char *k = strstr(env->config_json, "\"path\"");
    const char *q1 = k != NULL ? strchr(k + 6, '"') : NULL;
    const char *q2 = q1 != NULL ? strchr(q1 + 1, '"') : NULL;
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

static int say(const int *fd, const char *what)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, (int)getpid());
    return write(*fd, line, (size_t)n) == n ? 0 : -1;
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    *worker_data = NULL;
    return say(task_data, "init");
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)worker_data;
    if (say(task_data, "fini") != 0) {
        /* nothing to tell it to */
    }
}

static int cb_run(struct tm_call *call)
{
    (void)call;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-workerlog",
    .version = "0.0.1",
    .description = "test plugin: logs its workers' init and fini",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
)
