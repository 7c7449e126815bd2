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

#include "dlib.h"

TM_DLSYM_PROTOTYPE(ERR_clear_error);
TM_DLSYM_PROTOTYPE(ERR_error_string_n);
TM_DLSYM_PROTOTYPE(ERR_get_error);
TM_DLSYM_PROTOTYPE(ERR_peek_error);
TM_DLSYM_PROTOTYPE(SSL_CTX_check_private_key);
TM_DLSYM_PROTOTYPE(SSL_CTX_ctrl);
TM_DLSYM_PROTOTYPE(SSL_CTX_free);
TM_DLSYM_PROTOTYPE(SSL_CTX_get0_param);
TM_DLSYM_PROTOTYPE(SSL_CTX_load_verify_locations);
TM_DLSYM_PROTOTYPE(SSL_CTX_new);
TM_DLSYM_PROTOTYPE(SSL_CTX_set_default_verify_paths);
TM_DLSYM_PROTOTYPE(SSL_CTX_set_verify);
TM_DLSYM_PROTOTYPE(SSL_CTX_use_PrivateKey_file);
TM_DLSYM_PROTOTYPE(SSL_CTX_use_certificate_chain_file);
TM_DLSYM_PROTOTYPE(SSL_connect);
TM_DLSYM_PROTOTYPE(SSL_ctrl);
TM_DLSYM_PROTOTYPE(SSL_free);
TM_DLSYM_PROTOTYPE(SSL_get0_param);
TM_DLSYM_PROTOTYPE(SSL_get_error);
TM_DLSYM_PROTOTYPE(SSL_get_verify_result);
TM_DLSYM_PROTOTYPE(SSL_new);
TM_DLSYM_PROTOTYPE(SSL_read);
TM_DLSYM_PROTOTYPE(SSL_set_fd);
TM_DLSYM_PROTOTYPE(SSL_write);
TM_DLSYM_PROTOTYPE(TLS_client_method);
TM_DLSYM_PROTOTYPE(X509_VERIFY_PARAM_set1_host);
TM_DLSYM_PROTOTYPE(X509_VERIFY_PARAM_set1_ip_asc);
TM_DLSYM_PROTOTYPE(X509_verify_cert_error_string);

/* tm_ssl_dl_open opens libssl.so.3 and fills every sym_ pointer above
 * (see tm_dlib_open): 0, or -1 with the reason in err. Called where a
 * configuration names a TLS broker; every sym_ call comes after it. */
int tm_ssl_dl_open(char *err, size_t errlen);

#endif
