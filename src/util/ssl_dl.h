/* ssl_dl.h - OpenSSL (libssl.so.3, and libcrypto through it), opened the
 * first time a configuration names a rediss:// or amqps:// broker (see
 * dlib.h). The TLS code calls OpenSSL only through these sym_ pointers;
 * types and constants come from OpenSSL's own headers. The macros that
 * OpenSSL defines over SSL_ctrl / SSL_CTX_ctrl are written out at their
 * call sites. */
#ifndef TASKMILL_SSL_DL_H
#define TASKMILL_SSL_DL_H

#include <stddef.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include "util/dlib.h"

/* every OpenSSL function the daemon calls, once: X(function) for each
 * (see dlib.h) */
#define TM_SSL_FUNCS(X)                                                     \
    X(ERR_clear_error)                                                      \
    X(ERR_error_string_n)                                                   \
    X(ERR_get_error)                                                        \
    X(ERR_peek_error)                                                       \
    X(SSL_CTX_check_private_key)                                            \
    X(SSL_CTX_ctrl)                                                         \
    X(SSL_CTX_free)                                                         \
    X(SSL_CTX_get0_param)                                                   \
    X(SSL_CTX_load_verify_locations)                                        \
    X(SSL_CTX_new)                                                          \
    X(SSL_CTX_set_default_verify_paths)                                     \
    X(SSL_CTX_set_verify)                                                   \
    X(SSL_CTX_use_PrivateKey_file)                                          \
    X(SSL_CTX_use_certificate_chain_file)                                   \
    X(SSL_connect)                                                          \
    X(SSL_ctrl)                                                             \
    X(SSL_free)                                                             \
    X(SSL_get0_param)                                                       \
    X(SSL_get_error)                                                        \
    X(SSL_get_verify_result)                                                \
    X(SSL_new)                                                              \
    X(SSL_read)                                                             \
    X(SSL_set_fd)                                                           \
    X(SSL_write)                                                            \
    X(TLS_client_method)                                                    \
    X(X509_VERIFY_PARAM_set1_host)                                          \
    X(X509_VERIFY_PARAM_set1_ip_asc)                                        \
    X(X509_verify_cert_error_string)

TM_SSL_FUNCS(TM_DLSYM_EXTERN)

/* tm_ssl_dl_open opens libssl.so.3 and fills every sym_ pointer above
 * (see tm_dlib_open): 0, or -1 with the reason in err. Called where a
 * configuration names a TLS broker; every sym_ call comes after it. */
int tm_ssl_dl_open(char *err, size_t errlen);

#endif
