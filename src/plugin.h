/* plugin.h - loading task plugins: dlopen, ABI checks, init and fini. */
#ifndef TASKMILL_PLUGIN_H
#define TASKMILL_PLUGIN_H

#include <stddef.h>

#include "taskmill.h"

/* struct tm_plugin is one loaded plugin file bound to one task. */
struct tm_plugin {
    char *path;                  /* as loaded */
    void *dl;                    /* dlopen handle */
    struct tm_task_plugin desc;  /* copy; fields past the plugin's
                                    struct_size are zero */
    void *task_data;             /* from cb_init */
    int inited;                  /* cb_init succeeded */
};

/*
 * tm_plugin_load opens the shared object at path and checks it, in order:
 * the file and its directory are not writable by group or others; dlopen
 * with RTLD_NOW | RTLD_LOCAL succeeds; the symbol TM_TASK_SYMBOL exists;
 * the descriptor's struct_size, magic, ABI major, signature, name, version
 * and cb_run are sane. Returns a plugin the caller frees with
 * tm_plugin_free(), or NULL with one line in err naming the path, the
 * reason, and the expected and found values where there are some.
 */
struct tm_plugin *tm_plugin_load(const char *path, char *err, size_t errlen);

/*
 * tm_plugin_init calls the plugin's cb_init (if any) with env. Returns 0,
 * or -1 with a reason in err; env is borrowed for the call only.
 */
int tm_plugin_init(struct tm_plugin *p, const struct tm_task_env *env,
                   char *err, size_t errlen);

/* tm_plugin_free calls cb_fini when cb_init succeeded, then dlclose.
 * NULL is accepted. */
void tm_plugin_free(struct tm_plugin *p);

#endif /* TASKMILL_PLUGIN_H */
