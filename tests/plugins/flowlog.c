/* flowlog.c - test plugin for flow control: each run sleeps the body's
 * "ms", else the config's (default 0), and appends one line "<id> <attempt> <start_us>
 * <end_us> <task>" (wall clock, microseconds) to the config's "path", in
 * one write(2): the plugin's own journal of when each run started and
 * ended, across threads and forked workers. */
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

struct flowlog {
    int fd;
    int64_t ms;
    char task[64];
};

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct flowlog *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    if (tm_json_get_int_range(env->host, env->config_json, "ms", 0, 60000,
                              &f->ms) != TM_JSON_OK)
        f->ms = 0;
    snprintf(f->task, sizeof f->task, "%s", env->task);
    f->fd = tm_test_open_path(env);
    if (f->fd < 0) {
        free(f);
        return -1;
    }
    *task_data = f;
    return 0;
}

static void cb_fini(void *task_data)
{
    struct flowlog *f = task_data;
    if (f == NULL)
        return;
    close(f->fd);
    free(f);
}

static int cb_run(struct tm_call *call)
{
    struct flowlog *f = call->task_data;
    int64_t start = wall_us();
    int64_t ms = f->ms;
    if (tm_json_get_int_range(call->host, call->body, "ms", 0, 60000, &ms) !=
        TM_JSON_OK)
        ms = f->ms;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    int64_t end = wall_us();
    char line[256];
    int n = snprintf(line, sizeof line, "%s %u %lld %lld %s\n",
                     call->id != NULL ? call->id : "-", call->attempt,
                     (long long)start, (long long)end, f->task);
    if (n <= 0 || (size_t)n >= sizeof line ||
        write(f->fd, line, (size_t)n) != n) {
        tm_error(call, "journal write failed");
        return TM_TASK_ERROR;
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-flowlog",
    .version = "0.0.1",
    .description = "Sleeps body or config 'ms', then journals the run's start and "
                   "end times.",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
