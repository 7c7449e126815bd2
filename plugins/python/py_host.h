/* py_host.h - the Python host's parts: interpreter, watchdog, runs. */
#ifndef TASKMILL_PY_HOST_H
#define TASKMILL_PY_HOST_H

#include <taskmill.h>

/* struct tm_pyhost_task is a task's settings, read-only after cb_init. */
struct tm_pyhost_task {
    char *task;
    char *module;
    char *function;
    char *paths_json; /* the config's path as a JSON list of directories */
    const struct tm_host *host;
};

/* tm_pyhost_runtime_start initialises the interpreter once per process (called
 * from cb_worker_init, so that in the fork pool it happens in each child,
 * after the fork). Returns 0, or -1 after logging why. */
int tm_pyhost_runtime_start(const struct tm_task_env *log_env);

/* tm_pyhost_load imports the task's module (reloading it when its file changed
 * since it was imported) and returns a new reference to its function, as
 * an opaque pointer; NULL after logging why. */
void *tm_pyhost_load(const struct tm_pyhost_task *t,
                     const struct tm_task_env *log_env);
/* tm_pyhost_probe imports the task's module and looks up its function as
 * cb_worker_init does, in a short-lived child process (so that the
 * interpreter never starts in the process that forks the workers), and
 * waits for it (at most 60 s). Returns 0, or -1 after it or the child
 * logged why. */
int tm_pyhost_probe(const struct tm_pyhost_task *t,
                    const struct tm_task_env *log_env);
/* tm_pyhost_unload drops what tm_pyhost_load returned. */
void tm_pyhost_unload(void *fn);

/* tm_pyhost_run calls fn for call and returns a tm_task_result, having set the
 * result or error. */
int tm_pyhost_run(void *fn, struct tm_call *call);

/* tm_pyhost_glue_source is the Python source of the taskmill module
 * (glue.c). */
extern const char tm_pyhost_glue_source[];

#endif /* TASKMILL_PY_HOST_H */
