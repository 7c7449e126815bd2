/* plugin.c - loading task plugins: dlopen, ABI checks, init and fini. */
#include "plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* TM_DESC_MIN_SIZE is the smallest descriptor the loader accepts: every
 * field up to and including cb_run, the last one ABI 1.0 requires. */
#define TM_DESC_MIN_SIZE \
    (offsetof(struct tm_task_plugin, cb_run) + \
     sizeof(((struct tm_task_plugin *)0)->cb_run))

/* set_err writes one line into err: newlines (dlerror() text may hold
 * some) become spaces so the reason stays a single line. */
static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (n < 0)
        err[0] = '\0';
    for (char *c = err; *c != '\0'; c++) {
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    }
}

/* dir_of returns a newly allocated copy of the directory part of path:
 * "." when it has none, "/" for a file in the root. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return tm_strdup(".");
    while (slash > path && slash[-1] == '/')
        slash--;
    if (slash == path)
        return tm_strdup("/");
    return tm_strndup(path, (size_t)(slash - path));
}

/* check_dir refuses a directory writable by group or others: whoever can
 * write there can swap the plugin for their own code. Returns 0 or -1. */
static int check_dir(const char *path, const char *dir, char *err,
                     size_t errlen)
{
    struct stat st;
    char ebuf[TM_STRERRNO_BUF];

    if (stat(dir, &st) != 0) {
        int e = errno;
        set_err(err, errlen, "%s: cannot open directory %s: %s", path, dir,
                tm_strerror(e, ebuf, sizeof ebuf));
        return -1;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        set_err(err, errlen,
                "%s: refused: directory %s is writable by group or others "
                "(mode %04o); run chmod go-w %s",
                path, dir, (unsigned)(st.st_mode & 07777), dir);
        return -1;
    }
    return 0;
}

/*
 * check_file checks that path names a regular file that neither it nor
 * its directory is writable by group or others. For a symbolic link the
 * directory of the link and that of its target are both checked. Returns
 * 0, or -1 with the reason in err.
 */
static int check_file(const char *path, struct stat *out, char *err,
                      size_t errlen)
{
    struct stat st;
    char ebuf[TM_STRERRNO_BUF];
    char *dir = NULL;
    char *real = NULL;
    char *real_dir = NULL;
    int rc = -1;

    if (stat(path, &st) != 0) {
        int e = errno;
        set_err(err, errlen, "%s: cannot open: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: refused: not a regular file", path);
        goto out;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        set_err(err, errlen,
                "%s: refused: file is writable by group or others "
                "(mode %04o); run chmod go-w %s",
                path, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    dir = dir_of(path);
    if (check_dir(path, dir, err, errlen) != 0)
        goto out;

    /* The file may be reached through symbolic links; the directory that
     * really holds it must be safe too. */
    real = realpath(path, NULL);
    if (real == NULL) {
        int e = errno;
        set_err(err, errlen, "%s: cannot resolve: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        goto out;
    }
    real_dir = dir_of(real);
    if (strcmp(real_dir, dir) != 0 &&
        check_dir(path, real_dir, err, errlen) != 0)
        goto out;
    *out = st;
    rc = 0;
out:
    tm_free(dir);
    free(real); /* from realpath(3): plain malloc */
    tm_free(real_dir);
    return rc;
}

/* dl_reason returns dlerror()'s text without the leading "<path>: " that
 * glibc adds, since the caller's line already starts with the path. */
static const char *dl_reason(const char *path)
{
    const char *e = dlerror();
    if (e == NULL)
        return "unknown dynamic loader error";
    size_t n = strlen(path);
    if (strncmp(e, path, n) == 0 && e[n] == ':' && e[n + 1] == ' ')
        return e + n + 2;
    return e;
}

/*
 * check_desc checks the descriptor fields in the order that makes each
 * read safe: size first (so the rest may be read), then magic, ABI major,
 * build signature, and the required fields. Returns 0 or -1 with err.
 */
static int check_desc(const char *path, const struct tm_task_plugin *d,
                      char *err, size_t errlen)
{
    if (d == NULL) {
        set_err(err, errlen, "%s: refused: %s() returned NULL", path,
                TM_TASK_SYMBOL);
        return -1;
    }
    if (d->struct_size < TM_DESC_MIN_SIZE) {
        set_err(err, errlen,
                "%s: refused: descriptor size %u, expected at least %zu "
                "(rebuild against this taskmill.h)",
                path, (unsigned)d->struct_size, TM_DESC_MIN_SIZE);
        return -1;
    }
    if (d->magic != TM_TASK_MAGIC) {
        set_err(err, errlen,
                "%s: refused: bad descriptor magic 0x%08x instead of "
                "0x%08x (not built with TM_TASK_DECLARE)",
                path, (unsigned)d->magic, (unsigned)TM_TASK_MAGIC);
        return -1;
    }
    if (d->abi_major != TM_TASK_ABI_MAJOR) {
        set_err(err, errlen,
                "%s: refused: ABI version %u.%u instead of %u.%u "
                "(rebuild against this taskmill.h)",
                path, (unsigned)d->abi_major, (unsigned)d->abi_minor,
                (unsigned)TM_TASK_ABI_MAJOR, (unsigned)TM_TASK_ABI_MINOR);
        return -1;
    }
    if (d->signature != (uint32_t)TM_TASK_SIGNATURE) {
        set_err(err, errlen,
                "%s: refused: not binary compatible (signature 0x%04x "
                "instead of 0x%04x)",
                path, (unsigned)d->signature, (unsigned)TM_TASK_SIGNATURE);
        return -1;
    }
    if (d->name == NULL || d->name[0] == '\0') {
        set_err(err, errlen, "%s: refused: descriptor has no name", path);
        return -1;
    }
    if (d->version == NULL || d->version[0] == '\0') {
        set_err(err, errlen, "%s: refused: plugin '%s' has no version",
                path, d->name);
        return -1;
    }
    if (d->cb_run == NULL) {
        set_err(err, errlen, "%s: refused: plugin '%s' has no cb_run",
                path, d->name);
        return -1;
    }
    return 0;
}

/* copy_private copies path into a new private directory and returns the
 * copy's name (caller frees), or NULL with err. glibc's dlopen returns an
 * already loaded object for a path, or a file, it has seen, so a changed
 * plugin is loaded from a copy with a new name and inode. */
static char *copy_private(const char *path, char *err, size_t errlen)
{
    char ebuf[TM_STRERRNO_BUF];
    const char *tmp = getenv("TMPDIR");
    char *dir = tm_asprintf("%s/taskmill-plugin-XXXXXX",
                            tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        int e = errno;
        set_err(err, errlen, "%s: cannot make a private copy: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        tm_free(dir);
        return NULL;
    }
    const char *base = strrchr(path, '/');
    char *copy = tm_asprintf("%s/%s", dir, base != NULL ? base + 1 : path);
    int in = open(path, O_RDONLY | O_CLOEXEC);
    int out = open(copy, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0500);
    int ok = in >= 0 && out >= 0;
    char buf[65536];
    while (ok) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0)
            break;
        if (n < 0 || write(out, buf, (size_t)n) != n)
            ok = 0;
    }
    int e = errno;
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        ok = 0;
    if (!ok) {
        set_err(err, errlen, "%s: cannot make a private copy: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        unlink(copy);
        rmdir(dir);
        tm_free(copy);
        copy = NULL;
    }
    tm_free(dir);
    return copy;
}

/* load loads the checked file path from load_path (the same file, or a
 * private copy of it). */
static struct tm_plugin *load(const char *path, const char *load_path,
                              const struct stat *st, char *err,
                              size_t errlen)
{
    typedef const struct tm_task_plugin *(*descriptor_fn)(void);
    void *dl = dlopen(load_path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        set_err(err, errlen,
                "%s: cannot load: %s; check its dependencies with ldd(1)",
                path, dl_reason(load_path));
        return NULL;
    }

    dlerror(); /* clear any earlier error */
    void *sym = dlsym(dl, TM_TASK_SYMBOL);
    if (sym == NULL) {
        set_err(err, errlen,
                "%s: not a taskmill plugin: no %s symbol", path,
                TM_TASK_SYMBOL);
        goto fail;
    }
    /* POSIX guarantees a dlsym() result converts to a function pointer;
     * memcpy says so without an ISO C object/function pointer cast. */
    descriptor_fn fn;
    memcpy(&fn, &sym, sizeof fn);

    const struct tm_task_plugin *d = fn();
    if (check_desc(path, d, err, errlen) != 0)
        goto fail;

    struct tm_plugin *p = tm_calloc(1, sizeof *p);
    p->path = tm_strdup(path);
    p->dl = dl;
    atomic_init(&p->refs, 1);
    p->dev = st->st_dev;
    p->ino = st->st_ino;
    p->size = st->st_size;
    p->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL +
                  st->st_mtim.tv_nsec;
    /* A plugin built against an older minor has a shorter descriptor:
     * copy what it has, the rest stays zero. */
    size_t n = d->struct_size < sizeof p->desc ? d->struct_size
                                               : sizeof p->desc;
    memcpy(&p->desc, d, n);
    tm_log_debug("plugin", "loaded %s: %s %s (ABI %u.%u)", path,
                 p->desc.name, p->desc.version, (unsigned)d->abi_major,
                 (unsigned)d->abi_minor);
    return p;

fail:
    dlclose(dl);
    return NULL;
}

static struct tm_plugin *load_checked(const char *path, int fresh, char *err,
                                      size_t errlen)
{
    struct stat st;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    if (check_file(path, &st, err, errlen) != 0)
        return NULL;
    char *load_path;
    if (fresh) {
        load_path = copy_private(path, err, errlen);
        if (load_path == NULL)
            return NULL;
    } else {
        /* A name without a slash would make dlopen search the library
         * path instead of loading the file just checked. */
        load_path = strchr(path, '/') != NULL ? tm_strdup(path)
                                              : tm_asprintf("./%s", path);
    }
    struct tm_plugin *p = load(path, load_path, &st, err, errlen);
    if (fresh) {
        /* the mapping stays; the name and directory go */
        char *dir = dir_of(load_path);
        unlink(load_path);
        rmdir(dir);
        tm_free(dir);
    }
    tm_free(load_path);
    return p;
}

struct tm_plugin *tm_plugin_load(const char *path, char *err, size_t errlen)
{
    return load_checked(path, 0, err, errlen);
}

struct tm_plugin *tm_plugin_load_fresh(const char *path, char *err,
                                       size_t errlen)
{
    return load_checked(path, 1, err, errlen);
}

int tm_plugin_changed(const struct tm_plugin *p)
{
    struct stat st;
    if (stat(p->path, &st) != 0)
        return 1;
    int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    return st.st_dev != p->dev || st.st_ino != p->ino ||
           st.st_size != p->size || mt != p->mtime_ns;
}

int tm_plugin_init(struct tm_plugin *p, const struct tm_task_env *env,
                   char *err, size_t errlen)
{
    const char *task = env != NULL && env->task != NULL ? env->task : "?";

    if (p->inited) {
        set_err(err, errlen, "%s: task '%s': plugin already initialised",
                p->path, task);
        return -1;
    }
    if (p->desc.cb_init != NULL) {
        void *data = NULL;
        if (p->desc.cb_init(env, &data) != 0) {
            /* The plugin logged its own reason through env->host->log. */
            set_err(err, errlen, "%s: init failed for task '%s'", p->path,
                    task);
            return -1;
        }
        p->task_data = data;
    }
    p->inited = 1;
    return 0;
}

void tm_plugin_ref(struct tm_plugin *p)
{
    atomic_fetch_add(&p->refs, 1);
}

void tm_plugin_free(struct tm_plugin *p)
{
    if (p == NULL || atomic_fetch_sub(&p->refs, 1) > 1)
        return;
    if (p->inited && p->desc.cb_fini != NULL)
        p->desc.cb_fini(p->task_data);
    if (p->dl != NULL)
        dlclose(p->dl);
    tm_free(p->path);
    tm_free(p);
}
