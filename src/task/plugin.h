/* plugin.h - loading task plugins: dlopen, ABI checks, init and fini. */
#ifndef TASKMILL_PLUGIN_H
#define TASKMILL_PLUGIN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "taskmill.h"

struct tm_plugin_obj;

/* struct tm_plugin is one loaded plugin file bound to one task. Tasks that
 * load the same file while it is loaded (same device, inode, size and
 * modification time) share one loaded copy, its code and static data: a
 * plugin keeps per-task state in task_data. Each task has its own
 * cb_init/cb_fini and task data all the same. */
struct tm_plugin {
    char *path;                  /* as configured */
    struct tm_plugin_obj *obj;   /* the loaded copy, shared */
    void *dl;                    /* its dlopen handle (the object's) */
    struct tm_task_plugin desc;  /* copy; fields past the plugin's
                                    struct_size are zero */
    void *task_data;             /* from cb_init */
    int inited;                  /* cb_init succeeded */
    atomic_int refs;             /* owners; see tm_plugin_ref() */
    dev_t dev;                   /* identity of the file checked and */
    ino_t ino;                   /* copied, to see when it changes */
    off_t size;                  /* (reload) */
    int64_t mtime_ns;
};

/*
 * tm_plugin_load opens the shared object at path and checks it, in order:
 *  - the name is the file itself (opened with O_NOFOLLOW, so a symbolic
 *    link is refused) and a regular file;
 *  - the file, and every directory above it up to /, is owned by root or
 *    the daemon's effective user and is not writable by group or others;
 *    a sticky directory above the plugin's own directory (like /tmp) may
 *    be; one refusal names every problem found, with the commands that
 *    fix them;
 *  - what was checked (the same descriptor, fstat-ed) is copied into a
 *    sealed memory file, which is what gets loaded: no window between
 *    check and load, and a later write into the file (cp over it) never
 *    changes code that runs;
 *  - dlopen with RTLD_NOW | RTLD_LOCAL succeeds; the symbol TM_TASK_SYMBOL
 *    exists; the descriptor's struct_size, magic, ABI major, signature,
 *    name, version and cb_run are sane.
 * A file that is loaded already (unchanged: same device, inode, size and
 * modification time) is checked again but not copied or loaded again: the
 * new plugin shares the loaded copy, so 500 tasks of one plugin cost one
 * copy. A changed file (reload) is a new copy with its own static data.
 * Returns a plugin the caller frees with tm_plugin_free(), or NULL with
 * one line in err naming the path, the reason, and the expected and found
 * values where there are some.
 */
struct tm_plugin *tm_plugin_load(const char *path, char *err, size_t errlen);

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

/* ---- the plugins of a configuration's tasks (plugin_tasks.c) ---- */

struct tm_cfg;
struct tm_cfg_task;
struct tm_task;

/* tm_plugin_keep_fn returns a plugin loaded already that task t may keep,
 * task data and all (tm_plugin_load_tasks adds an owner), or NULL to load
 * t's file anew; arg is the one given to tm_plugin_load_tasks. Each
 * caller says which plugins a task keeps: the daemon's reload keeps the
 * previous generation's plugin of an unchanged task (daemon/gen.c), the
 * zygote one of any generation it holds (fork/zygote.c). */
typedef struct tm_plugin *(*tm_plugin_keep_fn)(void *arg,
                                               const struct tm_cfg_task *t);

/* flags of tm_plugin_load_tasks */
enum {
    /* try every task: err has one line per refused task (else the first
     * refusal ends the loading) */
    TM_PLUGIN_TASKS_ALL = 1,
    /* load and check the plugins but run no cb_init (a fork pool's
     * reload: its zygote runs them) */
    TM_PLUGIN_TASKS_NO_INIT = 2,
};

/*
 * tm_plugin_load_tasks sets tasks[i].cfg, .index and .plugin for the
 * tasks of cfg (cfg->ntasks entries, their plugins NULL), in order: a
 * plugin keep returns (keep may be NULL), else tm_plugin_load of the
 * task's file, checked against the plugins of the tasks before it (no
 * two files of one plugin name) and against the task's config: keys
 * (those the descriptor lists, when it lists them, and those the daemon
 * reads), then its cb_init with the task's env (unless
 * TM_PLUGIN_TASKS_NO_INIT). A refusal is placed in cfg->path as the
 * configuration reader places errors: a plugin that does not load or
 * whose name is taken, at the task's plugin: value; an unknown key, at
 * the key; a refusal by cb_init (a script or module that does not load,
 * a missing executable), at the task's config: key (plugin: when the
 * task has none). Returns 0, or -1 with the refusal(s) in err; the
 * plugins set so far stay set either way, for the caller to free
 * (tm_plugin_free, which runs cb_fini only after a cb_init succeeded).
 */
int tm_plugin_load_tasks(const struct tm_cfg *cfg, struct tm_task *tasks,
                         tm_plugin_keep_fn keep, void *arg, int flags,
                         char *err, size_t errlen);

#endif /* TASKMILL_PLUGIN_H */
