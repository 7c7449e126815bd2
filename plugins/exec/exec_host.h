/* exec_host.h - the exec plugin's parts: its settings and one child run. */
#ifndef TASKMILL_EXEC_HOST_H
#define TASKMILL_EXEC_HOST_H

#include <taskmill.h>

#include <stddef.h>
#include <stdint.h>

/* EXEC_EX_DATAERR is the exit status that rejects the message (sysexits.h
 * EX_DATAERR, written out so the plugin needs no BSD header). */
#define EXEC_EX_DATAERR 65

/* struct tm_exhost_task is a task's settings, made by cb_init and read-only
 * afterwards, so every worker thread may share it. */
struct tm_exhost_task {
    char *task;          /* the task's name, for TASKMILL_TASK */
    char *path;          /* argv[0] resolved against PATH at init */
    char **argv;         /* NULL-terminated command */
    char **env;          /* NULL-terminated "K=V": PATH, LANG and TZ of
                            the daemon (PATH defaulted) with the config's
                            env applied; nothing else of the daemon's */
    size_t nenv;
    char *cwd;           /* NULL: the daemon's */
    size_t max_output;   /* stdout bytes kept; more fails the run */
    unsigned max_log_lines; /* stderr lines logged per run */
    int64_t kill_grace_ms;  /* SIGTERM to SIGKILL */
};

/* tm_exhost_task_new reads the config; NULL after logging the reason. */
struct tm_exhost_task *tm_exhost_task_new(const struct tm_task_env *env);
void tm_exhost_task_free(struct tm_exhost_task *t);

/* tm_exhost_run runs the command once for call and returns a tm_task_result,
 * having set the result or error. The child is always reaped and its
 * process group killed before it returns. */
int tm_exhost_run(const struct tm_exhost_task *t, struct tm_call *call);

#endif /* TASKMILL_EXEC_HOST_H */
