/* ssl_dl.c - OpenSSL opened on first need (see ssl_dl.h). */
#include "ssl_dl.h"

TM_DLSYM_DEFINE(ERR_clear_error);
TM_DLSYM_DEFINE(ERR_error_string_n);
TM_DLSYM_DEFINE(ERR_get_error);
TM_DLSYM_DEFINE(ERR_peek_error);
TM_DLSYM_DEFINE(SSL_CTX_check_private_key);
TM_DLSYM_DEFINE(SSL_CTX_ctrl);
TM_DLSYM_DEFINE(SSL_CTX_free);
TM_DLSYM_DEFINE(SSL_CTX_get0_param);
TM_DLSYM_DEFINE(SSL_CTX_load_verify_locations);
TM_DLSYM_DEFINE(SSL_CTX_new);
TM_DLSYM_DEFINE(SSL_CTX_set_default_verify_paths);
TM_DLSYM_DEFINE(SSL_CTX_set_verify);
TM_DLSYM_DEFINE(SSL_CTX_use_PrivateKey_file);
TM_DLSYM_DEFINE(SSL_CTX_use_certificate_chain_file);
TM_DLSYM_DEFINE(SSL_connect);
TM_DLSYM_DEFINE(SSL_ctrl);
TM_DLSYM_DEFINE(SSL_free);
TM_DLSYM_DEFINE(SSL_get0_param);
TM_DLSYM_DEFINE(SSL_get_error);
TM_DLSYM_DEFINE(SSL_get_verify_result);
TM_DLSYM_DEFINE(SSL_new);
TM_DLSYM_DEFINE(SSL_read);
TM_DLSYM_DEFINE(SSL_set_fd);
TM_DLSYM_DEFINE(SSL_write);
TM_DLSYM_DEFINE(TLS_client_method);
TM_DLSYM_DEFINE(X509_VERIFY_PARAM_set1_host);
TM_DLSYM_DEFINE(X509_VERIFY_PARAM_set1_ip_asc);
TM_DLSYM_DEFINE(X509_verify_cert_error_string);

/* libcrypto's functions (ERR_*, X509_*) are found through libssl's
 * dependencies: dlsym on a handle searches them too. */
static const struct tm_dlsym ssl_syms[] = {
    TM_DLSYM_ARG(ERR_clear_error),
    TM_DLSYM_ARG(ERR_error_string_n),
    TM_DLSYM_ARG(ERR_get_error),
    TM_DLSYM_ARG(ERR_peek_error),
    TM_DLSYM_ARG(SSL_CTX_check_private_key),
    TM_DLSYM_ARG(SSL_CTX_ctrl),
    TM_DLSYM_ARG(SSL_CTX_free),
    TM_DLSYM_ARG(SSL_CTX_get0_param),
    TM_DLSYM_ARG(SSL_CTX_load_verify_locations),
    TM_DLSYM_ARG(SSL_CTX_new),
    TM_DLSYM_ARG(SSL_CTX_set_default_verify_paths),
    TM_DLSYM_ARG(SSL_CTX_set_verify),
    TM_DLSYM_ARG(SSL_CTX_use_PrivateKey_file),
    TM_DLSYM_ARG(SSL_CTX_use_certificate_chain_file),
    TM_DLSYM_ARG(SSL_connect),
    TM_DLSYM_ARG(SSL_ctrl),
    TM_DLSYM_ARG(SSL_free),
    TM_DLSYM_ARG(SSL_get0_param),
    TM_DLSYM_ARG(SSL_get_error),
    TM_DLSYM_ARG(SSL_get_verify_result),
    TM_DLSYM_ARG(SSL_new),
    TM_DLSYM_ARG(SSL_read),
    TM_DLSYM_ARG(SSL_set_fd),
    TM_DLSYM_ARG(SSL_write),
    TM_DLSYM_ARG(TLS_client_method),
    TM_DLSYM_ARG(X509_VERIFY_PARAM_set1_host),
    TM_DLSYM_ARG(X509_VERIFY_PARAM_set1_ip_asc),
    TM_DLSYM_ARG(X509_verify_cert_error_string),
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
