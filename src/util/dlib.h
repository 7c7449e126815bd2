/* dlib.h - optional shared libraries, opened the first time a
 * configuration needs them (the pattern of systemd's dlfcn-util.h).
 *
 * A library used only by some configurations (librabbitmq for an amqp://
 * broker, libssl for a rediss:// or amqps:// one) is not linked: an idle
 * daemon that does not use it maps none of its pages, and a missing or
 * broken copy is an error of the configuration that names it rather
 * than a binary that cannot start.
 *
 * Every function of such a library is called through a pointer named
 * sym_<function>. Its type is taken from the real prototype in the real
 * header (TM_DLSYM_PROTOTYPE), so a header change breaks the build, not
 * the run; TM_DLSYM_ARG checks again that the pointer it fills has that
 * type. A loader lists its pointers in one table and tm_dlib_open
 * resolves them all or none.
 */
#ifndef TASKMILL_DLIB_H
#define TASKMILL_DLIB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* the pointer sym_<symbol>, of the type of &symbol */
#define TM_DLSYM_PROTOTYPE(symbol) extern __typeof__(&symbol) sym_##symbol
#define TM_DLSYM_DEFINE(symbol) __typeof__(&symbol) sym_##symbol

/* one row of a loader's table: the name dlsym looks up and the pointer it
 * fills; the build fails when the pointer's type is not that of &symbol */
#define TM_DLSYM_ARG(symbol)                                               \
    { #symbol,                                                             \
      (char *)&sym_##symbol +                                              \
          0 * sizeof(struct {                                              \
              _Static_assert(__builtin_types_compatible_p(                 \
                                 __typeof__(sym_##symbol),                 \
                                 __typeof__(&symbol)),                     \
                             "sym_" #symbol " is not of the type of &"     \
                             #symbol);                                     \
              char c;                                                      \
          }),                                                              \
      sizeof sym_##symbol }

/* A loader names each function once, in a list macro LIST(X) that calls
 * X(function) for each, and expands it three times: LIST(TM_DLSYM_EXTERN)
 * in its header, LIST(TM_DLSYM_STORAGE) and { LIST(TM_DLSYM_ROW) } in its
 * .c (amqp/rmq_dl.h, ssl_dl.h). */
#define TM_DLSYM_EXTERN(symbol) TM_DLSYM_PROTOTYPE(symbol);
#define TM_DLSYM_STORAGE(symbol) TM_DLSYM_DEFINE(symbol);
#define TM_DLSYM_ROW(symbol) TM_DLSYM_ARG(symbol),

struct tm_dlsym {
    const char *name;
    void *slot;   /* where the function's address goes */
    size_t size;  /* sizeof the pointer at slot: a function pointer's */
};

/* One library: its soname, the Debian package that ships it (named in
 * the error), the table of its functions. handle is set (and stays set
 * until exit) once every function resolved. */
struct tm_dlib {
    const char *soname;
    const char *package;
    const struct tm_dlsym *syms;
    size_t nsyms;
    _Atomic(void *) handle;
};

/* tm_dlib_open opens lib by its soname (RTLD_NOW | RTLD_LOCAL) and fills
 * every pointer of its table; 0 when done now or before. On failure
 * (the library is missing or broken, or lacks a function) -1, no pointer
 * is set, the handle is closed, and err holds "needs SONAME (Debian:
 * apt-get install PACKAGE): <the loader's reason>". A later call tries
 * again. Serialised by one lock: callable from any thread. */
int tm_dlib_open(struct tm_dlib *lib, char *err, size_t errlen);

/* tm_dlib_loaded: whether tm_dlib_open succeeded on lib. */
bool tm_dlib_loaded(struct tm_dlib *lib);

#endif
