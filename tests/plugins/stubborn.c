/* stubborn.c - test plugin whose runs ignore should_stop(): a run sleeps
 * {"ms": N} in one piece, then checks that its task data (cb_init) and
 * worker data (cb_worker_init) are still alive, and appends
 * "v<N> <message id>" to the file named by config key "path" (N is
 * -DTM_TEST_VERSION, 0 by default). Used to prove that a reload keeps the
 * code and the state of a running call until it returns. */
#define _POSIX_C_SOURCE 200809L
#include <taskmill.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "path_log.h"

#ifndef TM_TEST_VERSION
#define TM_TEST_VERSION 0
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

/* Stamps of live data; fini overwrites them before freeing. */
#define STUBBORN_TASK_MAGIC 0x5354424bu   /* "STBK" */
#define STUBBORN_WORKER_MAGIC 0x5354424cu /* "STBL" */

struct stubborn_task {
    uint32_t magic;
    int fd;
};

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct stubborn_task *t = malloc(sizeof *t);
    if (t == NULL)
        return -1;
    t->magic = STUBBORN_TASK_MAGIC;
    t->fd = tm_test_open_path(env);
    if (t->fd < 0) {
        free(t);
        return -1;
    }
    *task_data = t;
    return 0;
}

static void cb_fini(void *task_data)
{
    struct stubborn_task *t = task_data;
    t->magic = 0;
    close(t->fd);
    free(t);
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    (void)task_data;
    uint32_t *w = malloc(sizeof *w);
    if (w == NULL)
        return -1;
    *w = STUBBORN_WORKER_MAGIC;
    *worker_data = w;
    return 0;
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)task_data;
    uint32_t *w = worker_data;
    *w = 0;
    free(w);
}

static int cb_run(struct tm_call *call)
{
    const char *ms = strstr(call->body, "\"ms\"");
    if (ms != NULL) {
        long n = strtol(strchr(ms, ':') + 1, NULL, 10);
        struct timespec ts = {n / 1000, (n % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    const struct stubborn_task *t = call->task_data;
    const uint32_t *w = call->worker_data;
    if (t->magic != STUBBORN_TASK_MAGIC) {
        tm_error(call, "task data was finalised under a running call");
        return TM_TASK_ERROR;
    }
    if (w == NULL || *w != STUBBORN_WORKER_MAGIC) {
        tm_error(call, "worker data was finalised under a running call");
        return TM_TASK_ERROR;
    }
    char line[256];
    int n = snprintf(line, sizeof line, "v%d %s\n", TM_TEST_VERSION,
                     call->id);
    if (write(t->fd, line, (size_t)n) != n)
        return TM_TASK_ERROR;
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-stubborn",
    .version = "1.0." STR(TM_TEST_VERSION),
    .description = "test plugin: sleeps ignoring should_stop()",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
)
