/* otel/curl.c - libcurl opened on first need (see curl_private.h). */
#include "otel/curl_private.h"

#include <pthread.h>

#include "util/util.h"

TM_CURL_FUNCS(TM_DLSYM_STORAGE)

static const struct tm_dlsym curl_syms[] = {
    TM_CURL_FUNCS(TM_DLSYM_ROW)
};

static struct tm_dlib curl_lib = {
    .soname = "libcurl.so.4",
    .package = "libcurl4",
    .syms = curl_syms,
    .nsyms = sizeof curl_syms / sizeof curl_syms[0],
};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_done;

int tm_curl_dl_open(char *err, size_t errlen)
{
    if (tm_dlib_open(&curl_lib, err, errlen) != 0)
        return -1;
    int rc = 0;
    /* curl_global_init is not thread-safe in every libcurl: once, under a
     * lock */
    pthread_mutex_lock(&init_mu);
    if (!init_done) {
        if (sym_curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            tm_snprintf(err, errlen, "libcurl: curl_global_init failed");
            rc = -1;
        } else {
            init_done = 1;
        }
    }
    pthread_mutex_unlock(&init_mu);
    return rc;
}
