/* config/url.c - broker URLs: parsing, checking, redacting. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif

#include "config/config_private.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <yaml.h>

#include "taskmill.h" /* TM_LOG_* levels */
#include "util/util.h"

/* -------------------------------------------------------------- URLs */

int tm_cfg_hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* pct_decode decodes s[0..n); NULL on a bad or NUL escape. */
static char *pct_decode(const char *s, size_t n)
{
    char *d = tm_malloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            d[o++] = s[i];
            continue;
        }
        int hi = -1, lo = -1;
        if (i + 2 < n) {
            hi = tm_cfg_hexval((unsigned char)s[i + 1]);
            lo = tm_cfg_hexval((unsigned char)s[i + 2]);
        }
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            tm_free(d);
            return NULL;
        }
        d[o++] = (char)(hi * 16 + lo);
        i += 2;
    }
    d[o] = '\0';
    return d;
}

static int is_unreserved(int ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
           tm_cfg_is_digit(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

int tm_cfg_is_host_char(int ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
           tm_cfg_is_digit(ch) || ch == '-' || ch == '.' || ch == '_';
}

int tm_cfg_is_ip6_char(int ch)
{
    return tm_cfg_hexval(ch) >= 0 || ch == ':' || ch == '.';
}

/* parse_port reads 1..65535 from s[0..n). */
static int parse_port(const char *s, size_t n, int *port)
{
    if (n == 0 || n > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!tm_cfg_is_digit(s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *port = v;
    return 0;
}

void tm_url_clear(struct tm_url *url)
{
    if (url == NULL)
        return;
    tm_free(url->scheme);
    tm_free(url->user);
    tm_free(url->password);
    tm_free(url->host);
    tm_free(url->vhost);
    tm_free(url->redacted);
    memset(url, 0, sizeof *url);
}

static char *url_redact(const struct tm_url *url)
{
    struct sbuf b = {0};
    char num[32];
    tm_cfg_sb_adds(&b, url->scheme);
    tm_cfg_sb_adds(&b, "://");
    if (strchr(url->host, ':') != NULL) {
        tm_cfg_sb_adds(&b, "[");
        tm_cfg_sb_adds(&b, url->host);
        tm_cfg_sb_adds(&b, "]");
    } else {
        tm_cfg_sb_adds(&b, url->host);
    }
    tm_snprintf(num, sizeof num, ":%d/", url->port);
    tm_cfg_sb_adds(&b, num);
    if (url->kind == TM_BROKER_REDIS) {
        tm_snprintf(num, sizeof num, "%d", url->db);
        tm_cfg_sb_adds(&b, num);
    } else {
        for (const char *p = url->vhost; *p; p++) {
            if (is_unreserved((unsigned char)*p)) {
                tm_cfg_sb_add(&b, p, 1);
            } else {
                tm_snprintf(num, sizeof num, "%%%02X", (unsigned char)*p);
                tm_cfg_sb_adds(&b, num);
            }
        }
    }
    return tm_cfg_sb_take(&b);
}

int tm_url_parse(const char *s, struct tm_url *url, char *err, size_t errlen)
{
    char shown[CFG_CLIP + 8], dummy[8];
    memset(url, 0, sizeof *url);
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    const char *sep = strstr(s, "://");
    if (sep == NULL) {
        tm_snprintf(err, errlen, "expected a URL like redis://host:6379/0 "
                    "or amqp://user:password@host:5672/vhost");
        return -1;
    }
    size_t slen = (size_t)(sep - s);
    char scheme[16];
    if (slen >= sizeof scheme)
        slen = sizeof scheme - 1;
    for (size_t i = 0; i < slen; i++) {
        char ch = s[i];
        scheme[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
    }
    scheme[slen] = '\0';
    if (strcmp(scheme, "redis") == 0) {
        url->kind = TM_BROKER_REDIS;
        url->port = 6379;
    } else if (strcmp(scheme, "amqp") == 0) {
        url->kind = TM_BROKER_AMQP;
        url->port = 5672;
    } else if (strcmp(scheme, "amqps") == 0) {
        url->kind = TM_BROKER_AMQP;
        url->tls = true;
        url->port = 5671;
    } else if (strcmp(scheme, "rediss") == 0) {
        url->kind = TM_BROKER_REDIS;
        url->tls = true;
        url->port = 6379;
    } else {
        tm_snprintf(err, errlen, "unknown scheme '%s'; expected one of: "
                    "redis, rediss, amqp, amqps",
                    tm_cfg_clip(scheme, shown, sizeof shown));
        return -1;
    }
    url->scheme = tm_strdup(scheme);

    const char *auth = sep + 3;
    size_t alen = strcspn(auth, "/?#");
    const char *rest = auth + alen;
    /* Never echo userinfo: a '/', '?' or '#' left unencoded in a password
     * would otherwise split it into host, port and path. */
    if (memchr(auth, '@', alen) == NULL && strchr(rest, '@') != NULL) {
        tm_snprintf(err, errlen, "unexpected '@' after the host; "
                    "percent-encode '/', '?' and '#' in the user name and "
                    "password");
        goto fail;
    }
    if (strpbrk(rest, "?#") != NULL) {
        tm_snprintf(err, errlen, "query strings and fragments are not "
                    "supported in a broker URL");
        goto fail;
    }
    /* The last '@' ends the userinfo, so an unencoded '@' in a password
     * still works. */
    const char *at = memrchr(auth, '@', alen);
    const char *hp = auth;
    size_t hlen = alen;
    if (at != NULL) {
        size_t ulen = (size_t)(at - auth);
        const char *colon = memchr(auth, ':', ulen);
        size_t namelen = colon ? (size_t)(colon - auth) : ulen;
        url->user = pct_decode(auth, namelen);
        if (url->user == NULL) {
            tm_snprintf(err, errlen, "invalid percent-encoding in the "
                        "user name");
            goto fail;
        }
        if (colon != NULL) {
            url->password = pct_decode(colon + 1, ulen - namelen - 1);
            if (url->password == NULL) {
                tm_snprintf(err, errlen, "invalid percent-encoding in the "
                            "password");
                goto fail;
            }
        }
        if (url->user[0] == '\0') {
            tm_free(url->user);
            url->user = NULL;
        }
        if (url->password != NULL && url->password[0] == '\0') {
            tm_free(url->password);
            url->password = NULL;
        }
        hp = at + 1;
        hlen = alen - ulen - 1;
    }

    const char *portp = NULL;
    size_t portlen = 0;
    if (hlen > 0 && hp[0] == '[') {
        const char *close = memchr(hp, ']', hlen);
        if (close == NULL) {
            tm_snprintf(err, errlen, "unterminated '[' in the host");
            goto fail;
        }
        size_t n = (size_t)(close - hp - 1);
        for (size_t i = 0; i < n; i++) {
            if (!tm_cfg_is_ip6_char((unsigned char)hp[1 + i])) {
                n = 0;
                break;
            }
        }
        if (n == 0) {
            tm_snprintf(err, errlen, "invalid IPv6 address in the host");
            goto fail;
        }
        url->host = tm_strndup(hp + 1, n);
        const char *after = close + 1;
        size_t left = hlen - (size_t)(after - hp);
        if (left > 0) {
            if (after[0] != ':') {
                tm_snprintf(err, errlen, "unexpected text after ']' in the "
                            "host");
                goto fail;
            }
            portp = after + 1;
            portlen = left - 1;
        }
    } else {
        const char *colon = memchr(hp, ':', hlen);
        size_t n = colon ? (size_t)(colon - hp) : hlen;
        if (colon != NULL && memchr(colon + 1, ':', hlen - n - 1) != NULL) {
            tm_snprintf(err, errlen, "an IPv6 host must be in brackets, "
                        "e.g. [::1]");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            if (!tm_cfg_is_host_char((unsigned char)hp[i])) {
                tm_snprintf(err, errlen, "invalid host '%s'",
                            tm_cfg_clip_n(hp, n, shown, sizeof shown));
                goto fail;
            }
        }
        url->host = n ? tm_strndup(hp, n) : tm_strdup("127.0.0.1");
        if (colon != NULL) {
            portp = colon + 1;
            portlen = hlen - n - 1;
        }
    }
    if (portp != NULL && parse_port(portp, portlen, &url->port) < 0) {
        tm_snprintf(err, errlen, "invalid port '%s'; expected 1 to 65535",
                    tm_cfg_clip_n(portp, portlen, shown, sizeof shown));
        goto fail;
    }

    const char *path = *rest == '/' ? rest + 1 : rest;
    if (url->kind == TM_BROKER_REDIS) {
        int64_t db = 0;
        if (*path != '\0' && (tm_cfg_parse_i64(path, &db) < 0 || *path == '-' ||
                              db > INT_MAX)) {
            tm_snprintf(err, errlen, "invalid database number '%s' in the "
                        "path; expected an integer >= 0",
                        tm_cfg_clip(path, shown, sizeof shown));
            goto fail;
        }
        url->db = (int)db;
        url->vhost = NULL;
    } else if (*path == '\0') {
        url->vhost = tm_strdup("/");
    } else {
        if (strchr(path, '/') != NULL) {
            tm_snprintf(err, errlen, "a '/' in the vhost must be written "
                        "as %%2f");
            goto fail;
        }
        url->vhost = pct_decode(path, strlen(path));
        if (url->vhost == NULL) {
            tm_snprintf(err, errlen, "invalid percent-encoding in the "
                        "vhost");
            goto fail;
        }
    }
    url->redacted = url_redact(url);
    return 0;

fail:
    tm_url_clear(url);
    return -1;
}
