/* plugin.h - loading task plugins: dlopen, ABI checks, init and fini. */
#ifndef TASKMILL_PLUGIN_H
#define TASKMILL_PLUGIN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "taskmill.h"

/* struct tm_plugin is one loaded plugin file bound to one task. */
struct tm_plugin {
    char *path;                  /* as loaded */
    void *dl;                    /* dlopen handle */
    struct tm_task_plugin desc;  /* copy; fields past the plugin's
                                    struct_size are zero */
    void *task_data;             /* from cb_init */
    int inited;                  /* cb_init succeeded */
    atomic_int refs;             /* owners; see tm_plugin_ref() */
    dev_t dev;                   /* identity of the file loaded, to see */
    ino_t ino;                   /* when it changes (reload) */
    off_t size;
    int64_t mtime_ns;
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
 * tm_plugin_load_fresh is tm_plugin_load for a file that may have changed
 * since an earlier load of the same path: it loads a private copy, so the
 * new code gets a handle of its own while the old one stays mapped for the
 * messages still running on it.
 */
struct tm_plugin *tm_plugin_load_fresh(const char *path, char *err,
                                       size_t errlen);

/* tm_plugin_changed returns 1 when the file at p->path is no longer the
 * one loaded (replaced, rewritten, removed), else 0. */
int tm_plugin_changed(const struct tm_plugin *p);

/*
 * tm_plugin_init calls the plugin's cb_init (if any) with env. Returns 0,
 * or -1 with a reason in err; env is borrowed for the call only.
 */
int tm_plugin_init(struct tm_plugin *p, const struct tm_task_env *env,
                   char *err, size_t errlen);

/* tm_plugin_ref adds an owner (a reloaded configuration keeps an unchanged
 * task's plugin, with its task data, running). Any thread: a retired
 * configuration drops its references from its own thread. */
void tm_plugin_ref(struct tm_plugin *p);

/* tm_plugin_free drops an owner; the last one calls cb_fini when cb_init
 * succeeded, then dlclose. NULL is accepted. */
void tm_plugin_free(struct tm_plugin *p);

#endif /* TASKMILL_PLUGIN_H */
