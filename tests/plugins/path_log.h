/* path_log.h - what the test plugins that append lines to the file named
 * by their config key "path" share (flaky.c, flowlog.c, stamp.c,
 * stubborn.c, versioned.c, workerlog.c): opening that file at task init.
 *
 * Included by test plugins only: a header, so that the Makefile's test
 * plugin rule (every .c file of tests/plugins is one plugin) does not
 * build it as a plugin of its own. Every function is static inline: a
 * plugin that uses only one of them compiles cleanly. */
#ifndef TASKMILL_TEST_PATH_LOG_H
#define TASKMILL_TEST_PATH_LOG_H

#include <taskmill.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* tm_test_open_path opens the file named by the task's config key "path"
 * for appending (created if need be). Returns its descriptor, or -1 when
 * the key is missing or empty (logged) or the file cannot be opened. */
static inline int tm_test_open_path(const struct tm_task_env *env)
{
    char *path = NULL;
    if (tm_json_get_strdup(env->host, env->config_json, "path", &path) !=
            TM_JSON_OK ||
        path[0] == '\0') {
        tm_env_log(env, TM_LOG_ERR, "config key 'path' is required");
        free(path);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    free(path);
    return fd;
}

/* tm_test_path_init and tm_test_path_fini: a task whose only data is
 * that descriptor, in a malloc'd int. */
static inline int tm_test_path_init(const struct tm_task_env *env,
                                    void **task_data)
{
    int *fd = malloc(sizeof *fd);
    if (fd == NULL)
        return -1;
    *fd = tm_test_open_path(env);
    if (*fd < 0) {
        free(fd);
        return -1;
    }
    *task_data = fd;
    return 0;
}

static inline void tm_test_path_fini(void *task_data)
{
    int *fd = task_data;
    close(*fd);
    free(fd);
}

#endif
