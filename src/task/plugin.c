/* plugin.c - loading task plugins: dlopen, ABI checks, init and fini. */
#include "task/plugin.h"

#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h> /* memfd_create */
#include <sys/stat.h>
#include <unistd.h>

#include "util/crash.h"
#include "util/log.h"
#include "util/util.h"

/* TM_MFD_EXEC is memfd_create's MFD_EXEC (Linux 6.3, uapi
 * linux/memfd.h), which older C library headers lack. */
#ifdef MFD_EXEC
#define TM_MFD_EXEC MFD_EXEC
#else
#define TM_MFD_EXEC 0x0010U
#endif

/* TM_DESC_MIN_SIZE is the smallest descriptor the loader accepts: every
 * field up to and including cb_run, the last one ABI 1.0 requires. */
#define TM_DESC_MIN_SIZE \
    (offsetof(struct tm_task_plugin, cb_run) + \
     sizeof(((struct tm_task_plugin *)0)->cb_run))

/*
 * struct tm_plugin_obj is one loaded copy of a plugin file: the sealed
 * memory file and its dlopen handle. Every task that loads the same file
 * while the copy is loaded shares it (objs_find), so the cost of a plugin
 * is paid once, not once per task. Invariants, under objs_lock: a copy is
 * on the objs list exactly while users > 0; users counts the tm_plugin
 * structs pointing at it; its identity (dev, ino, size, mtime_ns) is that
 * of the file when it was copied and never changes.
 */
struct tm_plugin_obj {
    struct tm_plugin_obj *next;
    char *path;          /* the first path it was loaded by (crash names) */
    void *dl;            /* dlopen handle of the sealed copy */
    void *base;          /* its load address, named for crash reports */
    int fd;              /* the sealed copy; open while it is loaded */
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    const struct tm_task_plugin *desc; /* the plugin's own descriptor */
    size_t users;
};

static pthread_mutex_t objs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tm_plugin_obj *objs;

static int64_t mtime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

/* objs_find returns the loaded copy of the file st describes, with one
 * more user, or NULL. */
static struct tm_plugin_obj *objs_find(const struct stat *st)
{
    pthread_mutex_lock(&objs_lock);
    struct tm_plugin_obj *o = objs;
    while (o != NULL && (o->dev != st->st_dev || o->ino != st->st_ino ||
                         o->size != st->st_size ||
                         o->mtime_ns != mtime_ns_of(st)))
        o = o->next;
    if (o != NULL) {
        assert(o->users > 0);
        o->users++;
    }
    pthread_mutex_unlock(&objs_lock);
    return o;
}

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

/* The owner a plugin file and each directory above it may have: root or
 * the daemon's effective user. Anyone else could replace the code. */
static int trusted_owner(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* struct problems collects every reason to refuse one file, so that one
 * refusal names them all, with the commands that fix them. */
struct problems {
    char text[1024];             /* "a; b; c" */
    size_t len;
    char chmod[1024];            /* paths for "chmod go-w" */
    size_t chmod_len;
    char chown[1024];            /* paths for "chown root" */
    size_t chown_len;
};

static void problem(struct problems *pr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void problem(struct problems *pr, const char *fmt, ...)
{
    if (pr->len > 0)
        pr->len += tm_snprintf(pr->text + pr->len, sizeof pr->text - pr->len,
                               "; ");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(pr->text + pr->len, sizeof pr->text - pr->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        pr->len += (size_t)n < sizeof pr->text - pr->len
                       ? (size_t)n
                       : sizeof pr->text - pr->len - 1;
}

/* add_path appends " path" to one of the fix lists. */
static void add_path(char *buf, size_t size, size_t *len, const char *path)
{
    *len += tm_snprintf(buf + *len, size - *len, " %s", path);
}

/*
 * check_node records what is wrong with one file or directory st at path:
 * an owner other than root or the daemon's user, or write permission for
 * group or others. A sticky directory (mode 1777, like /tmp) above the
 * plugin's own directory is accepted: others may add entries there, but
 * may not rename or remove the ones they do not own, so the path below
 * it stays ours. The plugin's own directory must not be writable by
 * others at all, sticky or not: that is where plugin_watch looks and
 * where a plugin name is looked up. (OpenSSH's secure_filename, which
 * stops at the user's home directory, accepts no sticky ancestor; this
 * walk goes up to / and so meets /tmp.)
 */
static void check_node(struct problems *pr, const char *label,
                       const char *fix_path, const struct stat *st,
                       int sticky_ok)
{
    if (!trusted_owner(st->st_uid)) {
        problem(pr, "%s is owned by uid %u, neither root nor uid %u", label,
                (unsigned)st->st_uid, (unsigned)geteuid());
        add_path(pr->chown, sizeof pr->chown, &pr->chown_len, fix_path);
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
        !(sticky_ok && (st->st_mode & S_ISVTX) != 0)) {
        problem(pr, "%s is writable by group or others (mode %04o)", label,
                (unsigned)(st->st_mode & 07777));
        add_path(pr->chmod, sizeof pr->chmod, &pr->chmod_len, fix_path);
    }
}

/* real_path returns the absolute path of the file open on fd, as the
 * kernel knows it (symbolic links in the directories above resolved), in
 * a new string; NULL when it cannot tell. */
static char *real_path(int fd)
{
    char link[64], buf[PATH_MAX];
    tm_snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, sizeof buf - 1);
    if (n <= 0 || buf[0] != '/')
        return NULL;
    buf[n] = '\0';
    return tm_strdup(buf);
}

/*
 * check_chain records the problems of the file st (open on fd, named path)
 * and of every directory that holds it, up to /. The directories are those
 * of the file actually opened, so a symbolic link among them is judged by
 * where it leads. Returns 0, or -1 with err when the path cannot be
 * resolved or a directory cannot be examined.
 */
static int check_chain(const char *path, int fd, const struct stat *st,
                       struct problems *pr, char *err, size_t errlen)
{
    char ebuf[TM_STRERRNO_BUF];
    int rc = -1;
    check_node(pr, "file", path, st, 0);
    char *real = real_path(fd);
    if (real == NULL) {
        /* no /proc: resolve the name instead */
        char *r = realpath(path, NULL);
        if (r == NULL) {
            int e = errno;
            set_err(err, errlen, "%s: cannot resolve: %s", path,
                    tm_strerror(e, ebuf, sizeof ebuf));
            goto out;
        }
        real = tm_strdup(r);
        free(r); /* from realpath(3): plain malloc */
    }
    /* from the file's own directory up to the root */
    int own = 1;
    for (char *slash = strrchr(real, '/'); slash != NULL;
         slash = strrchr(real, '/')) {
        if (slash == real)
            slash[1] = '\0'; /* "/" itself */
        else
            slash[0] = '\0';
        struct stat ds;
        if (stat(real, &ds) != 0) {
            int e = errno;
            set_err(err, errlen, "%s: cannot examine directory %s: %s",
                    path, real, tm_strerror(e, ebuf, sizeof ebuf));
            goto out;
        }
        char label[PATH_MAX + 16];
        tm_snprintf(label, sizeof label, "directory %s", real);
        check_node(pr, label, real, &ds, !own);
        own = 0;
        if (strcmp(real, "/") == 0)
            break;
    }
    rc = 0;
out:
    tm_free(real);
    return rc;
}

/* refuse writes the one-line refusal of path from pr. */
static void refuse(const char *path, const struct problems *pr, char *err,
                   size_t errlen)
{
    char fix[2200];
    size_t n = 0;
    fix[0] = '\0';
    if (pr->chmod_len > 0)
        n += tm_snprintf(fix + n, sizeof fix - n, "; run chmod go-w%s",
                         pr->chmod);
    if (pr->chown_len > 0)
        n += tm_snprintf(fix + n, sizeof fix - n, "; run chown root%s",
                         pr->chown);
    set_err(err, errlen, "%s: refused: %s%s", path, pr->text, fix);
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

/* copy_sealed copies the file open on fd (st as fstat saw it) into a new
 * sealed memory file and returns its descriptor, or -1 with err. The copy
 * is what gets mapped: a later write into the plugin file (cp over it)
 * cannot change code that runs, and nothing can change the copy. */
static int copy_sealed(const char *path, int fd, const struct stat *st,
                       char *err, size_t errlen)
{
    char ebuf[TM_STRERRNO_BUF];
    char buf[65536];
    const char *base = strrchr(path, '/');
    char name[64];
    tm_snprintf(name, sizeof name, "taskmill-plugin:%s",
                base != NULL ? base + 1 : path);
    /* MFD_EXEC: where vm.memfd_noexec makes memory files non-executable
     * by default (Linux 6.3+), ask for an executable one; older kernels
     * do not know the flag (EINVAL) and make them executable anyway */
    int mfd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING |
                                     TM_MFD_EXEC);
    if (mfd < 0 && errno == EINVAL)
        mfd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0) {
        int e = errno;
        set_err(err, errlen, "%s: cannot make a sealed copy: memfd_create: "
                "%s", path, tm_strerror(e, ebuf, sizeof ebuf));
        return -1;
    }
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            set_err(err, errlen, "%s: cannot read: %s", path,
                    tm_strerror(e, ebuf, sizeof ebuf));
            goto fail;
        }
        if (n == 0)
            break;
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(mfd, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                int e = errno;
                set_err(err, errlen, "%s: cannot make a sealed copy: %s",
                        path, tm_strerror(e, ebuf, sizeof ebuf));
                goto fail;
            }
            w += k;
        }
        off += n;
    }
    /* the file was written while it was read: not what was checked */
    struct stat now;
    if (fstat(fd, &now) != 0 || off != st->st_size ||
        now.st_size != st->st_size ||
        now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != st->st_mtim.tv_nsec) {
        set_err(err, errlen, "%s: refused: the file changed while it was "
                "read; load it again once it is complete", path);
        goto fail;
    }
    if (fcntl(mfd, F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) !=
        0) {
        int e = errno;
        set_err(err, errlen, "%s: cannot seal its copy: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        goto fail;
    }
    return mfd;
fail:
    close(mfd);
    return -1;
}

/* mapped_name writes the name the dynamic loader knows the copy on mfd
 * by. glibc returns an already loaded object for a name it has seen, so
 * the descriptor stays open (its number unused by any other copy) for as
 * long as the object is loaded. */
static void mapped_name(int mfd, char *buf, size_t size)
{
    tm_snprintf(buf, size, "/proc/self/fd/%d", mfd);
}

/* bind loads the sealed copy mfd of the checked file path (st) and checks
 * its descriptor. Returns the loaded copy with one user, on the objs list,
 * which owns mfd from then on, or NULL with err (mfd is then left to the
 * caller). */
static struct tm_plugin_obj *bind(const char *path, int mfd,
                                  const struct stat *st, char *err,
                                  size_t errlen)
{
    typedef const struct tm_task_plugin *(*descriptor_fn)(void);
    char name[64];
    mapped_name(mfd, name, sizeof name);
    /* a file that is no ELF object at all (a text file, a script) gets
     * told so, rather than advice about its dependencies */
    unsigned char magic[4] = {0};
    if (pread(mfd, magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
        memcmp(magic, "\177ELF", 4) != 0) {
        set_err(err, errlen,
                "%s: cannot load: not a shared object (no ELF header); "
                "build it with cc -shared -fPIC", path);
        return NULL;
    }
    void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        const char *why = dl_reason(name);
        /* ldd(1) helps when a library or a symbol is missing */
        int deps = strstr(why, "cannot open shared object") != NULL ||
                   strstr(why, "undefined symbol") != NULL ||
                   strstr(why, "version `") != NULL;
        set_err(err, errlen, "%s: cannot load: %s%s", path, why,
                deps ? "; check its dependencies with ldd(1)" : "");
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
    /* crash reports name the file, not the private copy it runs from */
    Dl_info di;
    void *base = dladdr(sym, &di) != 0 ? di.dli_fbase : NULL;
    if (base != NULL)
        tm_crash_name_object(base, path);

    struct tm_plugin_obj *o = tm_calloc(1, sizeof *o);
    o->path = tm_strdup(path);
    o->dl = dl;
    o->base = base;
    o->fd = mfd;
    o->dev = st->st_dev;
    o->ino = st->st_ino;
    o->size = st->st_size;
    o->mtime_ns = mtime_ns_of(st);
    o->desc = d;
    o->users = 1;
    tm_log_debug("plugin", "loaded %s: %s %s (ABI %u.%u)", path, d->name,
                 d->version, (unsigned)d->abi_major, (unsigned)d->abi_minor);
    pthread_mutex_lock(&objs_lock);
    o->next = objs;
    objs = o;
    pthread_mutex_unlock(&objs_lock);
    return o;

fail:
    dlclose(dl);
    return NULL;
}

/* obj_release drops a user of o; the last one unloads the copy. */
static void obj_release(struct tm_plugin_obj *o)
{
    pthread_mutex_lock(&objs_lock);
    assert(o->users > 0);
    int last = --o->users == 0;
    if (last) {
        struct tm_plugin_obj **pp = &objs;
        while (*pp != o)
            pp = &(*pp)->next;
        *pp = o->next;
    }
    pthread_mutex_unlock(&objs_lock);
    if (!last)
        return;
    if (o->base != NULL)
        tm_crash_forget_object(o->base);
    dlclose(o->dl);
    /* An object the loader keeps mapped (marked NODELETE, e.g. by unique
     * C++ symbols) keeps its name: its copy's descriptor then stays open,
     * so that no later copy gets that name. */
    char name[64];
    mapped_name(o->fd, name, sizeof name);
    void *still = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (still != NULL)
        dlclose(still);
    else
        close(o->fd);
    tm_free(o->path);
    tm_free(o);
}

/* plugin_of binds the loaded copy o (whose user the caller hands over) to
 * a new task plugin loaded by the name path. */
static struct tm_plugin *plugin_of(const char *path, struct tm_plugin_obj *o)
{
    struct tm_plugin *p = tm_calloc(1, sizeof *p);
    p->path = tm_strdup(path);
    p->obj = o;
    p->dl = o->dl;
    atomic_init(&p->refs, 1);
    p->dev = o->dev;
    p->ino = o->ino;
    p->size = o->size;
    p->mtime_ns = o->mtime_ns;
    /* A plugin built against an older minor has a shorter descriptor:
     * copy what it has, the rest stays zero. */
    size_t n = o->desc->struct_size < sizeof p->desc ? o->desc->struct_size
                                                     : sizeof p->desc;
    memcpy(&p->desc, o->desc, n);
    return p;
}

struct tm_plugin *tm_plugin_load(const char *path, char *err, size_t errlen)
{
    char ebuf[TM_STRERRNO_BUF];
    struct problems pr;
    struct tm_plugin *p = NULL;
    int mfd = -1;
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    /* O_NOFOLLOW: the name itself must be the file; O_NONBLOCK: a FIFO
     * put in its place cannot hang the open */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            set_err(err, errlen, "%s: refused: is a symbolic link (plugins "
                    "are opened without following links; name the file "
                    "itself)", path);
        else
            set_err(err, errlen, "%s: cannot open: %s", path,
                    tm_strerror(e, ebuf, sizeof ebuf));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        set_err(err, errlen, "%s: cannot examine: %s", path,
                tm_strerror(e, ebuf, sizeof ebuf));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: refused: not a regular file", path);
        goto out;
    }
    memset(&pr, 0, sizeof pr);
    if (check_chain(path, fd, &st, &pr, err, errlen) != 0)
        goto out;
    if (pr.len > 0) {
        refuse(path, &pr, err, errlen);
        goto out;
    }
    /* a file loaded already (unchanged) shares that copy */
    struct tm_plugin_obj *o = objs_find(&st);
    if (o == NULL) {
        /* what is loaded is a copy of exactly the file checked (the same
         * descriptor), never the name again */
        mfd = copy_sealed(path, fd, &st, err, errlen);
        if (mfd < 0)
            goto out;
        o = bind(path, mfd, &st, err, errlen);
        if (o == NULL)
            goto out;
        mfd = -1; /* the copy's now */
    }
    p = plugin_of(path, o);
out:
    if (mfd >= 0)
        close(mfd);
    if (fd >= 0)
        close(fd);
    return p;
}

int tm_plugin_changed(const struct tm_plugin *p)
{
    struct stat st;
    if (lstat(p->path, &st) != 0)
        return 1;
    return st.st_dev != p->dev || st.st_ino != p->ino ||
           st.st_size != p->size || mtime_ns_of(&st) != p->mtime_ns;
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
    obj_release(p->obj);
    tm_free(p->path);
    tm_free(p);
}
