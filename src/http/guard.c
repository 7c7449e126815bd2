/* guard.c - who may ask and what every answer carries: the bearer token
 * (http.token), the Host header against DNS rebinding
 * (http.allowed_hosts), the security headers, and the marker of a
 * request whose headers were seen. Below the endpoints, the admin API and
 * the console, which all use it. */
#include "http/http_private.h"

#include <string.h>
#include <strings.h>

#include <arpa/inet.h>

#include <microhttpd.h>

#include "daemon/daemon.h"
#include "util/util.h"

void tm_http_secure_headers(struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; "
                            "style-src 'self'; connect-src 'self'; "
                            "img-src 'self' data:; frame-ancestors 'none'");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
}

/* same_secret compares a and b in time that depends on b's length only
 * (b is the configured token). Returns 1 when equal. */
static int same_secret(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    volatile unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) {
        unsigned char x = alen > 0 ? (unsigned char)a[i % alen] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}

/* authorized checks "Authorization: Bearer <token>". Returns 1 when it
 * matches; otherwise 0 with *presented set when a token was given. */
static int authorized(struct MHD_Connection *conn, const char *token,
                      int *presented)
{
    *presented = 0;
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (v == NULL || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    v += 7;
    while (*v == ' ')
        v++;
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    *presented = 1;
    return same_secret(v, n, token);
}

int tm_http_token_ok(struct tm_daemon *d, struct MHD_Connection *conn,
                     int *presented)
{
    *presented = 0;
    pthread_rwlock_rdlock(&d->gen_lock);
    const char *token = d->cfg->http_token;
    int ok = token == NULL || authorized(conn, token, presented);
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}

/* port_ok accepts the ":PORT" part of a Host header: "" or ':' and 1 to
 * 5 digits. */
static int port_ok(const char *p)
{
    if (*p == '\0')
        return 1;
    if (*p != ':')
        return 0;
    size_t n = strspn(p + 1, "0123456789");
    return n >= 1 && n <= 5 && p[1 + n] == '\0';
}

/*
 * host_ok checks a Host header value against DNS rebinding: an IPv4
 * literal, a bracketed IPv6 literal, "localhost" (each with or without a
 * port), or one of http.allowed_hosts (as configured now; gen_lock is
 * taken here). A name may end in one dot; names compare without regard
 * to case.
 */
static int host_ok(struct tm_daemon *d, const char *v)
{
    char host[256];
    unsigned char addr[16];
    if (v[0] == '[') {
        const char *end = strchr(v, ']');
        if (end == NULL || (size_t)(end - v - 1) >= sizeof host)
            return 0;
        tm_snprintf(host, sizeof host, "%.*s", (int)(end - v - 1), v + 1);
        return port_ok(end + 1) && inet_pton(AF_INET6, host, addr) == 1;
    }
    size_t n = strcspn(v, ":");
    if (n == 0 || n >= sizeof host || !port_ok(v + n))
        return 0;
    memcpy(host, v, n);
    host[n] = '\0';
    if (inet_pton(AF_INET, host, addr) == 1)
        return 1;
    if (host[n - 1] == '.')
        host[--n] = '\0';
    if (strcasecmp(host, "localhost") == 0)
        return 1;
    int ok = 0;
    pthread_rwlock_rdlock(&d->gen_lock);
    for (size_t i = 0; i < d->cfg->http_nallowed_hosts && !ok; i++)
        ok = strcasecmp(host, d->cfg->http_allowed_hosts[i]) == 0;
    pthread_rwlock_unlock(&d->gen_lock);
    return ok;
}

int tm_http_host_ok(struct tm_daemon *d, struct MHD_Connection *conn)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_HOST);
    /* no Host at all (HTTP/1.0; MHD refuses an HTTP/1.1 request without
     * one): not a browser, which always sends it, so no rebinding */
    return v == NULL || host_ok(d, v);
}

/* Marks a request whose headers were seen (MHD's per-request pointer). */
static int request_seen;

void *tm_http_seen_marker(void)
{
    return &request_seen;
}
