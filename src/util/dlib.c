/* dlib.c - optional shared libraries opened on first need (see dlib.h). */
#include "util/dlib.h"

#include <assert.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "util/util.h"

/* One lock for every library: opening is rare (a configuration load) and
 * a library's table must not be filled twice at once. */
static pthread_mutex_t dlib_lock = PTHREAD_MUTEX_INITIALIZER;

/* A library's handle is published (release) only after every pointer of
 * its table is written, so a thread that sees it loaded (acquire) sees
 * the pointers. */
static void *handle_get(struct tm_dlib *lib)
{
    return atomic_load_explicit(&lib->handle,
                                memory_order_acquire);
}

bool tm_dlib_loaded(struct tm_dlib *lib)
{
    return handle_get(lib) != NULL;
}

static void fail(const struct tm_dlib *lib, const char *why, char *err,
                 size_t errlen)
{
    tm_snprintf(err, errlen, "needs %s (Debian: apt-get install %s): %s",
                lib->soname, lib->package,
                why != NULL ? why : "unknown dlopen error");
}

int tm_dlib_open(struct tm_dlib *lib, char *err, size_t errlen)
{
    void *addr[256];
    void *h = NULL;
    int rc = -1;
    assert(lib->nsyms <= sizeof addr / sizeof addr[0]);
    pthread_mutex_lock(&dlib_lock);
    if (handle_get(lib) != NULL) {
        rc = 0;
        goto out;
    }
    h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fail(lib, dlerror(), err, errlen);
        goto out;
    }
    /* every function first, then the pointers: all of them or none */
    for (size_t i = 0; i < lib->nsyms; i++) {
        (void)dlerror();
        addr[i] = dlsym(h, lib->syms[i].name);
        if (addr[i] == NULL) {
            const char *why = dlerror();
            char buf[256];
            if (why == NULL) {
                tm_snprintf(buf, sizeof buf, "%s: no such function",
                            lib->syms[i].name);
                why = buf;
            }
            fail(lib, why, err, errlen);
            goto out;
        }
    }
    for (size_t i = 0; i < lib->nsyms; i++) {
        /* a function's address through dlsym's void *, as POSIX allows */
        assert(lib->syms[i].size == sizeof addr[i]);
        memcpy(lib->syms[i].slot, &addr[i], sizeof addr[i]);
    }
    atomic_store_explicit(&lib->handle, h,
                          memory_order_release);
    h = NULL;
    rc = 0;
out:
    if (h != NULL)
        dlclose(h);
    pthread_mutex_unlock(&dlib_lock);
    return rc;
}
