/* journal.c - example task: appends "<message id> <body>" to a file. */
/* Feature-test macro first: O_CLOEXEC and strerror_r() are POSIX.1-2008,
 * hidden by -std=c11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <taskmill.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Config: {"path": "/var/log/journal.log"} (required). The file is opened
 * once in cb_init with O_APPEND and each run appends its line with a
 * single write(2), so lines from several threads or forked workers never
 * interleave.
 */

struct journal {
    int fd;
};

/* errtext describes errno value e in buf, whichever strerror_r the C
 * library declares (GNU returns a string, POSIX fills buf). */
static const char *errtext(int e, char *buf, size_t size)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(e, buf, size);
#else
    if (strerror_r(e, buf, size) != 0)
        snprintf(buf, size, "error %d", e);
    return buf;
#endif
}

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    char ebuf[128];
    char *path = NULL;

    int st = tm_json_get_strdup(env->host, env->config_json, "path", &path);
    if (st == TM_JSON_ABSENT) {
        tm_env_log(env, TM_LOG_ERR, "config key 'path' is required: the "
                                    "file to append to");
        return -1;
    }
    if (st == TM_JSON_BAD_TEXT) {
        tm_env_log(env, TM_LOG_ERR, "config is not a mapping with unique "
                                    "keys");
        return -1;
    }
    if (st != TM_JSON_OK || path[0] == '\0') {
        tm_env_log(env, TM_LOG_ERR, "config key 'path' must be a "
                                    "non-empty string");
        free(path);
        return -1;
    }
    struct journal *j = malloc(sizeof *j);
    if (j == NULL) {
        tm_env_log(env, TM_LOG_ERR, "out of memory");
        free(path);
        return -1;
    }
    j->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (j->fd < 0) {
        int e = errno;
        tm_env_log(env, TM_LOG_ERR, "cannot open %s: %s", path,
                   errtext(e, ebuf, sizeof ebuf));
        free(j);
        free(path);
        return -1;
    }
    tm_env_log(env, TM_LOG_INFO, "appending to %s", path);
    free(path);
    *task_data = j;
    return 0;
}

static void cb_fini(void *task_data)
{
    struct journal *j = task_data;
    if (j == NULL)
        return;
    close(j->fd);
    free(j);
}

/* copy_line copies n bytes from s to out with line breaks made spaces, so
 * one message stays one line. */
static void copy_line(char *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = s[i] == '\n' || s[i] == '\r' ? ' ' : s[i];
}

static int cb_run(struct tm_call *call)
{
    struct journal *j = call->task_data;
    const char *id = call->id != NULL ? call->id : "-";
    size_t id_len = strlen(id);
    size_t len = id_len + 1 + call->body_len + 1;

    if (call->body_len > SIZE_MAX - id_len - 2) {
        tm_error(call, "message too large");
        return TM_TASK_ERROR;
    }
    char *line = malloc(len);
    if (line == NULL) {
        tm_error(call, "out of memory");
        return TM_TASK_ERROR;
    }
    copy_line(line, id, id_len);
    line[id_len] = ' ';
    copy_line(line + id_len + 1, call->body, call->body_len);
    line[len - 1] = '\n';

    ssize_t w;
    do {
        w = write(j->fd, line, len);
    } while (w < 0 && errno == EINTR);
    int e = errno;
    free(line);
    if (w < 0) {
        char ebuf[128];
        char msg[160];
        snprintf(msg, sizeof msg, "write failed: %s",
                 errtext(e, ebuf, sizeof ebuf));
        tm_error(call, msg);
        return TM_TASK_ERROR;
    }
    if ((size_t)w != len) {
        tm_error(call, "short write: journal line truncated");
        return TM_TASK_ERROR;
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "journal",
    .version = "1.0.0",
    .description = "Appends one line \"<message id> <body>\" per message "
                   "to the file named by its config key 'path'.",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
