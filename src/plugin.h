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
    char *path;                  /* as configured */
    void *dl;                    /* dlopen handle of the sealed copy */
    void *desc_base;             /* its load address, named for crash
                                    reports (tm_crash_name_object) */
    int fd;                      /* the sealed copy (a memfd); open while
                                    the copy is loaded */
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
 * Every load is a separate object with its own static data, also for a
 * file loaded before (a changed plugin on reload). Returns a plugin the
 * caller frees with tm_plugin_free(), or NULL with one line in err naming
 * the path, the reason, and the expected and found values where there are
 * some.
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

#endif /* TASKMILL_PLUGIN_H */
