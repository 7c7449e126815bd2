/* curl_private.h - libcurl (libcurl.so.4), opened when a configuration
 * sets telemetry.otlp_endpoint (see util/dlib.h): a daemon that exports
 * nothing maps none of it. The exporter calls libcurl only through these
 * sym_ pointers. */
#ifndef TASKMILL_OTEL_CURL_PRIVATE_H
#define TASKMILL_OTEL_CURL_PRIVATE_H

#include <stddef.h>

/* the pointers are typed from the real prototypes, not typecheck-gcc.h's
 * macros */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

#include "util/dlib.h"

#define TM_CURL_FUNCS(X)                                                    \
    X(curl_global_init)                                                     \
    X(curl_easy_init)                                                       \
    X(curl_easy_setopt)                                                     \
    X(curl_easy_perform)                                                    \
    X(curl_easy_getinfo)                                                    \
    X(curl_easy_cleanup)                                                    \
    X(curl_easy_strerror)                                                   \
    X(curl_slist_append)                                                    \
    X(curl_slist_free_all)

TM_CURL_FUNCS(TM_DLSYM_EXTERN)

/* tm_curl_dl_open opens libcurl.so.4, fills every sym_ pointer above and
 * runs curl_global_init once: 0, or -1 with the reason in err. */
int tm_curl_dl_open(char *err, size_t errlen);

#endif
