/* stamp.c - test plugin: appends "<epoch ms> <body>" to a file, the time
 * being when the run started (delayed-message tests: not early, how
 * late). Config: {"path": FILE}. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <taskmill.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "path_log.h"

struct stamp {
    int fd;
};

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct stamp *s = malloc(sizeof *s);
    if (s == NULL)
        return -1;
    s->fd = tm_test_open_path(env);
    if (s->fd < 0) {
        free(s);
        return -1;
    }
    *task_data = s;
    return 0;
}

static void cb_fini(void *task_data)
{
    struct stamp *s = task_data;
    if (s == NULL)
        return;
    close(s->fd);
    free(s);
}

static int cb_run(struct tm_call *call)
{
    struct stamp *s = call->task_data;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    size_t len = call->body_len + 32;
    char *line = malloc(len);
    if (line == NULL) {
        tm_error(call, "out of memory");
        return TM_TASK_ERROR;
    }
    int n = snprintf(line, len, "%lld ", ms);
    for (size_t i = 0; i < call->body_len; i++)
        line[(size_t)n + i] = call->body[i] == '\n' ? ' ' : call->body[i];
    line[(size_t)n + call->body_len] = '\n';
    ssize_t w;
    do {
        w = write(s->fd, line, (size_t)n + call->body_len + 1);
    } while (w < 0 && errno == EINTR);
    free(line);
    if (w < 0) {
        tm_error(call, "write failed");
        return TM_TASK_ERROR;
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-stamp",
    .version = "0.0.1",
    .description = "Appends \"<epoch ms> <body>\" per run to config path.",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
