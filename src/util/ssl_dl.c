/* ssl_dl.c - OpenSSL opened on first need (see ssl_dl.h). */
#include "util/ssl_dl.h"

TM_SSL_FUNCS(TM_DLSYM_STORAGE)

/* libcrypto's functions (ERR_*, X509_*) are found through libssl's
 * dependencies: dlsym on a handle searches them too. */
static const struct tm_dlsym ssl_syms[] = {
    TM_SSL_FUNCS(TM_DLSYM_ROW)
};

static struct tm_dlib ssl_lib = {
    .soname = "libssl.so.3",
    .package = "libssl3",
    .syms = ssl_syms,
    .nsyms = sizeof ssl_syms / sizeof ssl_syms[0],
};

int tm_ssl_dl_open(char *err, size_t errlen)
{
    return tm_dlib_open(&ssl_lib, err, errlen);
}
