/* config.c - the YAML configuration, loaded and validated. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif

#include "config.h"

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

#include "redis/slot.h"
#include "taskmill.h" /* TM_LOG_* levels */
#include "util.h"

/* CFG_MAX_FILE bounds the config file: a task map is a few KiB, anything
 * past 16 MiB is a mistake (a log file given by -c, say). */
#define CFG_MAX_FILE (16u << 20)
/* CFG_MAX_SECRET bounds a password_file: a secret, not a document. */
#define CFG_MAX_SECRET 65536
/* CFG_MAX_DEPTH bounds nesting in a task's config: mapping, so neither a
 * hostile file nor a self-referencing alias exhausts the stack. */
#define CFG_MAX_DEPTH 64
/* CFG_MAX_JSON_NODES bounds the values converted from one config: mapping,
 * against alias bombs (an alias repeated into an exponential tree). */
#define CFG_MAX_JSON_NODES 100000
/* CFG_MAX_DURATION_MS keeps every duration convertible to int64 ns. */
#define CFG_MAX_DURATION_MS (INT64_MAX / 1000000)
/* CFG_MAX_PAYLOAD is the largest max_payload accepted, 512 MiB. */
#define CFG_MAX_PAYLOAD ((size_t)512 << 20)
/* CFG_PATH_LEN holds a key path such as "tasks.NAME.max_backoff". */
#define CFG_PATH_LEN 512
/* CFG_CLIP is how much of an offending value an error message echoes. */
#define CFG_CLIP 80
/* CFG_ENV_DEPTH bounds nested defaults, ${A:-${B:-${C:-x}}}. */
#define CFG_ENV_DEPTH 8
/* AMQP short strings (queue names) hold at most 255 bytes. */
#define AMQP_NAME_MAX 255

#define DEFAULT_BROKER_URL "redis://127.0.0.1:6379/0"
#define DURATION_HINT "a duration like 250ms, 30s, 5m, 1h"
#define SIZE_HINT "a size like 512B, 64KiB, 1MiB"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------ buffers */

/* struct sbuf is a growable string; p is NUL-terminated once non-empty. */
struct sbuf {
    char *p;
    size_t len;
    size_t cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = tm_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_adds(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* sb_take returns the string (never NULL) and leaves b empty. */
static char *sb_take(struct sbuf *b)
{
    char *p = b->p ? b->p : tm_strdup("");
    memset(b, 0, sizeof *b);
    return p;
}

/* clip_n copies s[0..n) into buf (CFG_CLIP + 8 bytes at least), cut to
 * CFG_CLIP bytes and "..." when longer. Returns buf. */
static const char *clip_n(const char *s, size_t n, char *buf, size_t size)
{
    if (n > CFG_CLIP)
        tm_snprintf(buf, size, "%.*s...", CFG_CLIP, s);
    else
        tm_snprintf(buf, size, "%.*s", (int)n, s);
    return buf;
}

/* clip is clip_n for a whole string. */
static const char *clip(const char *s, char *buf, size_t size)
{
    return clip_n(s, strlen(s), buf, size);
}

static int is_digit(int ch)
{
    return ch >= '0' && ch <= '9';
}

/* -------------------------------------------------------- durations */

int tm_parse_duration(const char *s, int64_t *ms)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    const char *p = s;
    uint64_t whole = 0;
    int ndigits = 0;
    for (; is_digit(*p); p++, ndigits++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return -1;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (ndigits == 0)
        return -1;
    /* A fraction keeps 9 digits at most; a finer one is truncated. */
    uint64_t frac = 0, scale = 1;
    if (*p == '.') {
        p++;
        int nfrac = 0;
        for (; is_digit(*p); p++, nfrac++) {
            if (scale < 1000000000u) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                scale *= 10;
            }
        }
        if (nfrac == 0)
            return -1;
    }
    uint64_t unit;
    if (strcmp(p, "ms") == 0)
        unit = 1;
    else if (strcmp(p, "s") == 0)
        unit = 1000;
    else if (strcmp(p, "m") == 0)
        unit = 60000;
    else if (strcmp(p, "h") == 0)
        unit = 3600000;
    else
        return -1;
    if (whole > (uint64_t)INT64_MAX / unit)
        return -1;
    uint64_t v = whole * unit + frac * unit / scale;
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *ms = (int64_t)v;
    return 0;
}

int tm_parse_size(const char *s, size_t *bytes)
{
    if (s == NULL || !is_digit(*s))
        return -1;
    const char *p = s;
    size_t n = 0;
    for (; is_digit(*p); p++) {
        size_t d = (size_t)(*p - '0');
        if (n > (SIZE_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    size_t unit;
    if (*p == '\0' || strcmp(p, "B") == 0)
        unit = 1;
    else if (strcmp(p, "KiB") == 0)
        unit = (size_t)1 << 10;
    else if (strcmp(p, "MiB") == 0)
        unit = (size_t)1 << 20;
    else if (strcmp(p, "GiB") == 0)
        unit = (size_t)1 << 30;
    else
        return -1;
    if (n > SIZE_MAX / unit)
        return -1;
    *bytes = n * unit;
    return 0;
}

/* fmt_ms writes a duration in its largest exact unit, e.g. "5m". */
static const char *fmt_ms(int64_t ms, char *buf, size_t size)
{
    if (ms != 0 && ms % 3600000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "h", ms / 3600000);
    else if (ms != 0 && ms % 60000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "m", ms / 60000);
    else if (ms != 0 && ms % 1000 == 0)
        tm_snprintf(buf, size, "%" PRId64 "s", ms / 1000);
    else
        tm_snprintf(buf, size, "%" PRId64 "ms", ms);
    return buf;
}

/* parse_i64 accepts an optional '-' and decimal digits, nothing else. */
static int parse_i64(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (!is_digit(*p))
        return -1;
    uint64_t v = 0;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; is_digit(*p); p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (*p != '\0')
        return -1;
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

/* ------------------------------------------------------ environment */

static int env_name_start(int ch)
{
    return ch == '_' || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

static int env_name_char(int ch)
{
    return env_name_start(ch) || is_digit(ch);
}

static const char env_syntax[] = "expected ${NAME} or ${NAME:-default}";

/* expand_into appends s[0..len) to b with ${...} expanded. */
static int expand_into(struct sbuf *b, const char *s, size_t len, int depth,
                       char *err, size_t errlen)
{
    char shown[CFG_CLIP + 8];
    size_t i = 0;
    while (i < len) {
        if (s[i] != '$') {
            size_t j = i;
            while (j < len && s[j] != '$')
                j++;
            sb_add(b, s + i, j - i);
            i = j;
            continue;
        }
        /* "$${" is a literal "${"; any other '$' stays as it is. */
        if (i + 2 < len && s[i + 1] == '$' && s[i + 2] == '{') {
            sb_add(b, "${", 2);
            i += 3;
            continue;
        }
        if (i + 1 >= len || s[i + 1] != '{') {
            sb_add(b, "$", 1);
            i++;
            continue;
        }
        size_t name = i + 2, j = name;
        while (j < len && env_name_char((unsigned char)s[j]))
            j++;
        clip_n(s + i, len - i, shown, sizeof shown);
        if (j >= len) {
            tm_snprintf(err, errlen, "unterminated '%s'; %s", shown,
                        env_syntax);
            return -1;
        }
        if (j == name || !env_name_start((unsigned char)s[name]) ||
            (s[j] != '}' && !(s[j] == ':' && j + 1 < len && s[j + 1] == '-'))) {
            tm_snprintf(err, errlen, "invalid variable reference '%s'; %s",
                        shown, env_syntax);
            return -1;
        }
        char *var = tm_strndup(s + name, j - name);
        const char *val = getenv(var);
        if (s[j] == '}') {
            if (val == NULL) {
                tm_snprintf(err, errlen,
                            "environment variable '%s' is not set "
                            "(use ${%s:-default} for a default)", var, var);
                tm_free(var);
                return -1;
            }
            sb_adds(b, val);
            tm_free(var);
            i = j + 1;
            continue;
        }
        /* ${NAME:-default}: find the matching '}', nesting allowed. */
        size_t def = j + 2, k = def;
        int level = 0;
        for (; k < len; k++) {
            if (s[k] == '$' && k + 1 < len && s[k + 1] == '{') {
                level++;
                k++;
            } else if (s[k] == '}') {
                if (level == 0)
                    break;
                level--;
            }
        }
        if (k >= len) {
            tm_snprintf(err, errlen, "unterminated '%s'; %s", shown,
                        env_syntax);
            tm_free(var);
            return -1;
        }
        if (val != NULL && *val != '\0') {
            sb_adds(b, val);
        } else if (depth >= CFG_ENV_DEPTH) {
            tm_snprintf(err, errlen, "defaults of '${%s:-...}' are nested "
                        "too deeply", var);
            tm_free(var);
            return -1;
        } else if (expand_into(b, s + def, k - def, depth + 1, err,
                               errlen) < 0) {
            tm_free(var);
            return -1;
        }
        tm_free(var);
        i = k + 1;
    }
    return 0;
}

char *tm_expand_env(const char *s, char *err, size_t errlen)
{
    char dummy[8];
    struct sbuf b = {0};
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (expand_into(&b, s, strlen(s), 0, err, errlen) < 0) {
        tm_free(b.p);
        return NULL;
    }
    return sb_take(&b);
}

/* -------------------------------------------------------------- URLs */

static int hexval(int ch)
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
            hi = hexval((unsigned char)s[i + 1]);
            lo = hexval((unsigned char)s[i + 2]);
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
           is_digit(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

static int is_host_char(int ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
           is_digit(ch) || ch == '-' || ch == '.' || ch == '_';
}

static int is_ip6_char(int ch)
{
    return hexval(ch) >= 0 || ch == ':' || ch == '.';
}

/* parse_port reads 1..65535 from s[0..n). */
static int parse_port(const char *s, size_t n, int *port)
{
    if (n == 0 || n > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
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
    sb_adds(&b, url->scheme);
    sb_adds(&b, "://");
    if (strchr(url->host, ':') != NULL) {
        sb_adds(&b, "[");
        sb_adds(&b, url->host);
        sb_adds(&b, "]");
    } else {
        sb_adds(&b, url->host);
    }
    tm_snprintf(num, sizeof num, ":%d/", url->port);
    sb_adds(&b, num);
    if (url->kind == TM_BROKER_REDIS) {
        tm_snprintf(num, sizeof num, "%d", url->db);
        sb_adds(&b, num);
    } else {
        for (const char *p = url->vhost; *p; p++) {
            if (is_unreserved((unsigned char)*p)) {
                sb_add(&b, p, 1);
            } else {
                tm_snprintf(num, sizeof num, "%%%02X", (unsigned char)*p);
                sb_adds(&b, num);
            }
        }
    }
    return sb_take(&b);
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
                    clip(scheme, shown, sizeof shown));
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
            if (!is_ip6_char((unsigned char)hp[1 + i])) {
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
            if (!is_host_char((unsigned char)hp[i])) {
                tm_snprintf(err, errlen, "invalid host '%s'",
                            clip_n(hp, n, shown, sizeof shown));
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
                    clip_n(portp, portlen, shown, sizeof shown));
        goto fail;
    }

    const char *path = *rest == '/' ? rest + 1 : rest;
    if (url->kind == TM_BROKER_REDIS) {
        int64_t db = 0;
        if (*path != '\0' && (parse_i64(path, &db) < 0 || *path == '-' ||
                              db > INT_MAX)) {
            tm_snprintf(err, errlen, "invalid database number '%s' in the "
                        "path; expected an integer >= 0",
                        clip(path, shown, sizeof shown));
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

/* ------------------------------------------------------------ context */

/* struct task_marks remembers where keys were, for checks that need the
 * whole document (the broker kind may come after the tasks). */
struct task_marks {
    struct tm_mark queue_at;
    struct tm_mark dead_letter_at;
    struct tm_mark priority_at;     /* the key, for the Redis refusal */
    struct tm_mark priority_val_at; /* the value, for the range check */
    struct tm_mark max_priority_at;
    bool has_queue;
    bool has_dead_letter;
    bool ok;        /* the task parsed without error */
};

struct ctx {
    const char *path;
    char *err;          /* the errors so far, one per line */
    size_t errlen;
    size_t errused;     /* bytes of err in use, without the NUL */
    size_t nerrors;     /* errors recorded, at most max_errors */
    size_t max_errors;  /* >= 1; parsing stops when it is reached */
    int failed;
    yaml_document_t *doc;
    struct tm_cfg *cfg;
    struct task_marks *marks; /* one per task */
    size_t json_nodes;
    bool url_done;
    bool url_bad;       /* broker.url is given but unusable */
    bool has_tasks;     /* the tasks key is present */
};

static void cfg_fail(struct ctx *c, struct tm_mark at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* cfg_fail records an error as one line "FILE:LINE:COL: message" (a mark
 * of line 0 means no position: "FILE: message"), after the earlier ones,
 * until max_errors are recorded. Control characters become '?', so each
 * error stays one line. */
static void cfg_fail(struct ctx *c, struct tm_mark at, const char *fmt, ...)
{
    c->failed = 1;
    if (c->nerrors >= c->max_errors)
        return;
    c->nerrors++;
    if (c->err == NULL || c->errlen == 0)
        return;
    assert(c->errused < c->errlen && c->err[c->errused] == '\0');
    char *line = c->err + c->errused;
    size_t room = c->errlen - c->errused;
    size_t n = 0;
    if (c->nerrors > 1 && room > 1) {
        line[n++] = '\n';
        line[n] = '\0';
    }
    const size_t sep = n; /* the separator is the one control kept */
    if (at.line > 0)
        n += tm_snprintf(line + n, room - n, "%s:%d:%d: ", c->path,
                         at.line, at.col);
    else
        n += tm_snprintf(line + n, room - n, "%s: ", c->path);
    if (n + 1 < room) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line + n, room - n, fmt, ap);
        va_end(ap);
    }
    for (char *p = line + sep; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
    c->errused += strlen(line);
}

/* cfg_stop tells that no further error would be recorded: parsing ends. */
static bool cfg_stop(const struct ctx *c)
{
    return c->nerrors >= c->max_errors;
}

static struct tm_mark mark_of(const yaml_node_t *n)
{
    struct tm_mark m = { (int)n->start_mark.line + 1,
                         (int)n->start_mark.column + 1 };
    return m;
}

static yaml_node_t *node_at(struct ctx *c, int id)
{
    return yaml_document_get_node(c->doc, id);
}

static const char *node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

static const char *scalar_raw(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static int is_null_word(const char *s)
{
    return strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* is_null tells a YAML null: an empty plain value, "~" or "null". */
static int is_null(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE &&
           n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (n->data.scalar.length == 0 || is_null_word(scalar_raw(n)));
}

static void join_path(char *buf, const char *where, const char *key)
{
    if (where == NULL)
        tm_snprintf(buf, CFG_PATH_LEN, "%s", key);
    else
        tm_snprintf(buf, CFG_PATH_LEN, "%s.%s", where, key);
}

/* scalar_text returns the scalar's value with ${VAR} expanded (the caller
 * frees), or NULL after reporting an error at the value. */
static char *scalar_text(struct ctx *c, const yaml_node_t *n,
                         const char *path)
{
    char why[256];
    if (strlen(scalar_raw(n)) != n->data.scalar.length) {
        cfg_fail(c, mark_of(n), "%s: contains a NUL character", path);
        return NULL;
    }
    char *s = tm_expand_env(scalar_raw(n), why, sizeof why);
    if (s == NULL)
        cfg_fail(c, mark_of(n), "%s: %s", path, why);
    return s;
}

/* get_scalar reports a missing value at the key and a non-scalar at the
 * value; else returns the expanded text (the caller frees). */
static char *get_scalar(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path)
{
    if (is_null(v)) {
        cfg_fail(c, mark_of(k), "%s: missing value", path);
        return NULL;
    }
    if (v->type != YAML_SCALAR_NODE) {
        cfg_fail(c, mark_of(v), "%s: expected a scalar value, got %s",
                 path, node_kind(v));
        return NULL;
    }
    return scalar_text(c, v, path);
}

static int get_string(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v, const char *path, char **out)
{
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    if (*s == '\0') {
        cfg_fail(c, mark_of(v), "%s: must not be empty", path);
        tm_free(s);
        return -1;
    }
    tm_free(*out);
    *out = s;
    return 0;
}

static int get_int(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                   const char *path, int64_t min, int64_t max, int64_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    int64_t x;
    if (parse_i64(s, &x) < 0 || x < min || x > max) {
        if (max >= INT_MAX)
            cfg_fail(c, mark_of(v), "%s: expected an integer >= %" PRId64
                     ", got '%s'", path, min, clip(s, shown, sizeof shown));
        else
            cfg_fail(c, mark_of(v), "%s: expected an integer from %" PRId64
                     " to %" PRId64 ", got '%s'", path, min, max,
                     clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    tm_free(s);
    *out = x;
    return 0;
}

/* get_duration reads a duration of at least min_ms milliseconds. */
static int get_duration(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        int64_t min_ms, int64_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    int64_t ms;
    size_t digits = strspn(s, "0123456789.");
    if (tm_parse_duration(s, &ms) < 0 && digits > 0 &&
        (strcmp(s + digits, "ms") == 0 || strcmp(s + digits, "s") == 0 ||
         strcmp(s + digits, "m") == 0 || strcmp(s + digits, "h") == 0) &&
        strchr(s, '.') == strrchr(s, '.') && s[0] != '.' &&
        s[digits - 1] != '.') {
        ms = CFG_MAX_DURATION_MS + 1; /* well-formed, but overflows */
    } else if (tm_parse_duration(s, &ms) < 0) {
        if (strspn(s, "-0123456789.") == strlen(s))
            cfg_fail(c, mark_of(v), "%s: expected " DURATION_HINT
                     ", got '%s' (a bare number is ambiguous: add a unit)",
                     path, clip(s, shown, sizeof shown));
        else
            cfg_fail(c, mark_of(v), "%s: expected " DURATION_HINT
                     ", got '%s'", path, clip(s, shown, sizeof shown));
        goto fail;
    }
    if (ms > CFG_MAX_DURATION_MS) {
        cfg_fail(c, mark_of(v), "%s: duration '%s' is too long", path,
                 clip(s, shown, sizeof shown));
        goto fail;
    }
    if (ms < min_ms) {
        cfg_fail(c, mark_of(v), "%s: must be greater than 0, got '%s'",
                 path, clip(s, shown, sizeof shown));
        goto fail;
    }
    tm_free(s);
    *out = ms;
    return 0;
fail:
    tm_free(s);
    return -1;
}

static int get_size(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, size_t *out)
{
    char shown[CFG_CLIP + 8];
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    size_t n;
    if (tm_parse_size(s, &n) < 0) {
        cfg_fail(c, mark_of(v), "%s: expected " SIZE_HINT ", got '%s'",
                 path, clip(s, shown, sizeof shown));
        goto fail;
    }
    if (n < 1 || n > CFG_MAX_PAYLOAD) {
        cfg_fail(c, mark_of(v), "%s: expected a size from 1B to 512MiB, "
                 "got '%s'", path, clip(s, shown, sizeof shown));
        goto fail;
    }
    tm_free(s);
    *out = n;
    return 0;
fail:
    tm_free(s);
    return -1;
}

static int get_bool(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, bool *out)
{
    static const char *const yes[] = { "true", "yes", "on" };
    static const char *const no[] = { "false", "no", "off" };
    char shown[CFG_CLIP + 8];
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < NELEM(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out = strcasecmp(s, yes[i]) == 0;
            tm_free(s);
            return 0;
        }
    }
    cfg_fail(c, mark_of(v), "%s: expected true or false, got '%s'", path,
             clip(s, shown, sizeof shown));
    tm_free(s);
    return -1;
}

/* struct choice maps an enum value's name to its number; the first
 * alias-free entries (shown != 0) are listed in errors. */
struct choice {
    const char *name;
    int value;
    int shown;
};

static int get_enum(struct ctx *c, const yaml_node_t *k, const yaml_node_t *v,
                    const char *path, const struct choice *ch, size_t n,
                    int *out)
{
    char shown[CFG_CLIP + 8];
    char *s = get_scalar(c, k, v, path);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, ch[i].name) == 0) {
            *out = ch[i].value;
            tm_free(s);
            return 0;
        }
    }
    struct sbuf list = {0};
    for (size_t i = 0; i < n; i++) {
        if (!ch[i].shown)
            continue;
        if (list.len > 0)
            sb_adds(&list, ", ");
        sb_adds(&list, ch[i].name);
    }
    cfg_fail(c, mark_of(v), "%s: unknown value '%s'; expected one of: %s",
             path, clip(s, shown, sizeof shown), list.p);
    tm_free(list.p);
    tm_free(s);
    return -1;
}

/* want_mapping checks that v is a mapping; a null is "absent" (returns 1)
 * when allow_null, else an error. Returns 0 for a mapping, -1 on error. */
static int want_mapping(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *path,
                        bool allow_null)
{
    if (is_null(v)) {
        if (allow_null)
            return 1;
        cfg_fail(c, mark_of(k), "%s: missing value", path);
        return -1;
    }
    if (v->type != YAML_MAPPING_NODE) {
        cfg_fail(c, mark_of(v), "%s: expected a mapping, got %s", path,
                 node_kind(v));
        return -1;
    }
    return 0;
}

/*
 * key_index checks one key of a fixed-key mapping: a scalar, one of
 * keys[], not seen before in this mapping (seen is a bit set). where is
 * the mapping's path, NULL at the top level. Returns the key's index, or
 * -1 after reporting an error at the key.
 */
static int key_index(struct ctx *c, const yaml_node_t *k, const char *where,
                     const char *const *keys, size_t n, uint32_t *seen)
{
    char shown[CFG_CLIP + 8];
    const char *in = where ? " in " : "";
    const char *wh = where ? where : "";
    if (k->type != YAML_SCALAR_NODE) {
        cfg_fail(c, mark_of(k), "expected a key name%s%s, got %s", in, wh,
                 node_kind(k));
        return -1;
    }
    const char *name = scalar_raw(k);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(name, keys[i]) != 0)
            continue;
        if (*seen & (UINT32_C(1) << i)) {
            cfg_fail(c, mark_of(k), "duplicate key '%s'%s%s", name, in, wh);
            return -1;
        }
        *seen |= UINT32_C(1) << i;
        return (int)i;
    }
    struct sbuf list = {0};
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            sb_adds(&list, ", ");
        sb_adds(&list, keys[i]);
    }
    cfg_fail(c, mark_of(k), "unknown key '%s'%s%s; expected one of: %s",
             clip(name, shown, sizeof shown), in, wh, list.p);
    tm_free(list.p);
    return -1;
}

/* --------------------------------------------------------------- paths */

/* path_join resolves rel against dir (rel as it is when absolute). */
static char *path_join(const char *dir, const char *rel)
{
    if (rel[0] == '/')
        return tm_strdup(rel);
    while (rel[0] == '.' && rel[1] == '/') {
        rel += 2;
        while (*rel == '/')
            rel++;
    }
    if (*rel == '\0' || strcmp(rel, ".") == 0)
        return tm_strdup(dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    if (dl == 1 && dir[0] == '/')
        return tm_asprintf("/%s", rel);
    return tm_asprintf("%.*s/%s", (int)dl, dir, rel);
}

/* trim_slashes drops trailing slashes, keeping a lone "/". */
static void trim_slashes(char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
}

/* config_dir returns the absolute directory of the config file, so that
 * relative paths keep working after a chdir. */
static char *config_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (slash == NULL)
        dir = tm_strdup(".");
    else if (slash == path)
        dir = tm_strdup("/");
    else
        dir = tm_strndup(path, (size_t)(slash - path));
    if (dir[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) != NULL) {
            char *abs = path_join(cwd, dir);
            tm_free(dir);
            dir = abs;
        }
    }
    trim_slashes(dir);
    return dir;
}

/* read_file reads at most max bytes of path into a NUL-terminated buffer.
 * Returns 0, or -1 with errno set and *opened telling open from read. */
static int read_file(const char *path, size_t max, char **out, size_t *len,
                     int *opened)
{
    *opened = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    *opened = 1;
    struct stat st;
    if (fstat(fd, &st) < 0)
        goto fail;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        goto fail;
    }
    struct sbuf b = {0};
    char chunk[8192];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            tm_free(b.p);
            errno = e;
            goto fail;
        }
        if (n == 0)
            break;
        if (b.len + (size_t)n > max) {
            tm_free(b.p);
            errno = EFBIG;
            goto fail;
        }
        sb_add(&b, chunk, (size_t)n);
    }
    close(fd);
    *len = b.len;
    *out = sb_take(&b);
    return 0;

fail:
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return -1;
}

/* ---------------------------------------------------------------- JSON */

static int match_int(const char *s, int *base)
{
    const char *p = s;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'o') && p[2] != '\0') {
        *base = p[1] == 'x' ? 16 : 8;
        for (p += 2; *p; p++) {
            int v = hexval((unsigned char)*p);
            if (v < 0 || v >= *base)
                return 0;
        }
        return 1;
    }
    *base = 10;
    if (*p == '-' || *p == '+')
        p++;
    if (!is_digit(*p))
        return 0;
    while (is_digit(*p))
        p++;
    return *p == '\0';
}

/* match_float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
static int match_float(const char *s)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    int digits = 0;
    while (is_digit(*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (is_digit(*p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '-' || *p == '+')
            p++;
        if (!is_digit(*p))
            return 0;
        while (is_digit(*p))
            p++;
    }
    return *p == '\0';
}

/* plain_to_json resolves a plain scalar the way YAML's core schema does:
 * null, true/false, integers, floats, otherwise a string. Integers are
 * kept as exact text rather than going through a double. */
static cJSON *plain_to_json(const char *raw, const char *v)
{
    char num[48];
    int base;
    if (*raw == '\0' || is_null_word(v))
        return cJSON_CreateNull();
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 ||
        strcmp(v, "TRUE") == 0)
        return cJSON_CreateTrue();
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 ||
        strcmp(v, "FALSE") == 0)
        return cJSON_CreateFalse();
    if (match_int(v, &base)) {
        if (base == 10) {
            /* JSON integers have no size limit: keep every digit, drop a
             * '+' and leading zeros. */
            const char *p = v;
            int neg = *p == '-';
            if (*p == '-' || *p == '+')
                p++;
            while (p[0] == '0' && p[1] != '\0')
                p++;
            char *text = tm_asprintf("%s%s", neg && *p != '0' ? "-" : "",
                                     p);
            cJSON *j = cJSON_CreateRaw(text);
            tm_free(text);
            return j;
        }
        errno = 0;
        unsigned long long x = strtoull(v + 2, NULL, base);
        if (errno != 0)
            return cJSON_CreateString(v);
        tm_snprintf(num, sizeof num, "%llu", x);
        return cJSON_CreateRaw(num);
    }
    if (match_float(v)) {
        double d = strtod(v, NULL);
        if (isfinite(d))
            return cJSON_CreateNumber(d);
    }
    return cJSON_CreateString(v);
}

static cJSON *yaml_to_json(struct ctx *c, const yaml_node_t *n,
                           const char *path, int depth)
{
    if (depth > CFG_MAX_DEPTH) {
        cfg_fail(c, mark_of(n), "%s: nested more than %d levels deep",
                 path, CFG_MAX_DEPTH);
        return NULL;
    }
    if (++c->json_nodes > CFG_MAX_JSON_NODES) {
        cfg_fail(c, mark_of(n), "%s: more than %d values (a repeated "
                 "alias?)", path, CFG_MAX_JSON_NODES);
        return NULL;
    }
    char sub[CFG_PATH_LEN];
    cJSON *j = NULL;
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        char *v = scalar_text(c, n, path);
        if (v == NULL)
            return NULL;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
            j = plain_to_json(scalar_raw(n), v);
        else
            j = cJSON_CreateString(v);
        tm_free(v);
        break;
    }
    case YAML_SEQUENCE_NODE: {
        j = cJSON_CreateArray();
        int i = 0;
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             j != NULL && it < n->data.sequence.items.top; it++, i++) {
            tm_snprintf(sub, sizeof sub, "%s[%d]", path, i);
            cJSON *item = yaml_to_json(c, node_at(c, *it), sub, depth + 1);
            if (item == NULL)
                goto fail;
            cJSON_AddItemToArray(j, item);
        }
        break;
    }
    case YAML_MAPPING_NODE:
        j = cJSON_CreateObject();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
             j != NULL && p < n->data.mapping.pairs.top; p++) {
            const yaml_node_t *k = node_at(c, p->key);
            if (k->type != YAML_SCALAR_NODE) {
                cfg_fail(c, mark_of(k), "%s: expected a key name, got %s",
                         path, node_kind(k));
                goto fail;
            }
            const char *name = scalar_raw(k);
            if (cJSON_GetObjectItemCaseSensitive(j, name) != NULL) {
                cfg_fail(c, mark_of(k), "duplicate key '%s' in %s", name,
                         path);
                goto fail;
            }
            tm_snprintf(sub, sizeof sub, "%s.%s", path, name);
            cJSON *item = yaml_to_json(c, node_at(c, p->value), sub,
                                       depth + 1);
            if (item == NULL)
                goto fail;
            cJSON_AddItemToObject(j, name, item);
        }
        break;
    default:
        cfg_fail(c, mark_of(n), "%s: unexpected empty node", path);
        return NULL;
    }
    if (j == NULL)
        cfg_fail(c, mark_of(n), "%s: out of memory", path);
    return j;

fail:
    cJSON_Delete(j);
    return NULL;
}

/* get_mapping_json turns the mapping val (or null: nothing changes) into
 * compact JSON text in *out, replacing what was there (a task's config:, a
 * schedule's body:). Returns 0, or -1 with the error reported. */
static int get_mapping_json(struct ctx *c, const yaml_node_t *val,
                            const char *path, char **out)
{
    if (is_null(val))
        return 0;
    if (val->type != YAML_MAPPING_NODE) {
        cfg_fail(c, mark_of(val), "%s: expected a mapping, got %s", path,
                 node_kind(val));
        return -1;
    }
    cJSON *j = yaml_to_json(c, val, path, 0);
    if (j == NULL)
        return -1;
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (text == NULL) {
        cfg_fail(c, mark_of(val), "%s: out of memory", path);
        return -1;
    }
    tm_free(*out);
    *out = tm_strdup(text);
    cJSON_free(text);
    return 0;
}

/* ---------------------------------------------------------------- tasks */

enum task_key {
    TK_PLUGIN, TK_QUEUE, TK_GROUP, TK_PREFETCH, TK_TIMEOUT, TK_CLAIM_IDLE,
    TK_MAXLEN, TK_ON_ERROR, TK_MAX_RETRIES, TK_BACKOFF, TK_MAX_BACKOFF,
    TK_DEAD_LETTER, TK_MAX_PAYLOAD, TK_MAX_PRIORITY, TK_PRIORITY, TK_CONFIG,
    TK_CIRCUIT_FAILURES, TK_CIRCUIT_COOL_OFF, TK_CIRCUIT_MAX_COOL_OFF
};

static const char *const task_keys[] = {
    "plugin", "queue", "group", "prefetch", "timeout", "claim_idle",
    "maxlen", "on_error", "max_retries", "backoff", "max_backoff",
    "dead_letter", "max_payload", "max_priority", "priority", "config",
    "circuit_failures", "circuit_cool_off", "circuit_max_cool_off"
};

static const struct choice on_error_choices[] = {
    { "requeue", TM_ON_ERROR_REQUEUE, 1 },
    { "reject", TM_ON_ERROR_REJECT, 1 },
};

static int valid_task_name(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s; s++) {
        if (!is_host_char((unsigned char)*s))
            return 0;
    }
    return 1;
}

static void task_defaults(struct tm_cfg_task *t)
{
    t->group = tm_strdup("taskmill");
    t->prefetch = 16;
    t->timeout_ms = 30000;
    t->claim_idle_ms = 60000;
    t->maxlen = 0;
    t->on_error = TM_ON_ERROR_REQUEUE;
    t->max_retries = 3;
    t->backoff_ms = 1000;
    t->max_backoff_ms = 300000;
    t->max_payload = (size_t)1 << 20;
    t->max_priority = 0;
    t->priority = 0;
    t->circuit_failures = 5;
    t->circuit_cool_off_ms = 5000;
    t->circuit_max_cool_off_ms = 300000;
}

/* section_fn handles key keys[i] of a section, its full path in path. */
typedef int (*section_fn)(struct ctx *c, int i, const yaml_node_t *key,
                          const yaml_node_t *val, const char *path,
                          void *arg);

/*
 * walk_section checks that v, under key k, is a mapping (or null) whose
 * keys are among keys[], each once, and calls fn for each key in file
 * order, going on after a bad key until cfg_stop(). Returns 0, or -1
 * after one or more errors were reported.
 */
static int walk_section(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v, const char *where,
                        const char *const *keys, size_t n, section_fn fn,
                        void *arg)
{
    char path[CFG_PATH_LEN];
    int rc = want_mapping(c, k, v, where, true);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    uint32_t seen = 0;
    int bad = 0;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start;
         p < v->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = node_at(c, p->key);
        const yaml_node_t *val = node_at(c, p->value);
        int i = key_index(c, key, where, keys, n, &seen);
        if (i >= 0) {
            join_path(path, where, keys[i]);
            if (fn(c, i, key, val, path, arg) == 0)
                continue;
        }
        /* an error was reported: go on with the next key */
        bad = 1;
        if (cfg_stop(c))
            break;
    }
    return bad ? -1 : 0;
}

/* task_walk is what a task's keys need besides the task itself. */
struct task_walk {
    struct tm_cfg_task *t;
    struct task_marks *tmk;
    bool has_max_backoff;
    const yaml_node_t *max_backoff_v;
    const yaml_node_t *max_cool_off_v;  /* circuit_max_cool_off, if given */
};

static int cb_task_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct task_walk *tw = arg;
    struct tm_cfg_task *t = tw->t;
    int64_t x = 0;
    int e = 0, r = 0;
    switch ((enum task_key)i) {
    case TK_PLUGIN:
        r = get_string(c, key, val, path, &t->plugin);
        if (r == 0)
            t->plugin_at = mark_of(val);
        break;
    case TK_QUEUE:
        r = get_string(c, key, val, path, &t->queue);
        tw->tmk->queue_at = mark_of(val);
        tw->tmk->has_queue = true;
        break;
    case TK_GROUP:
        r = get_string(c, key, val, path, &t->group);
        break;
    case TK_PREFETCH:
        r = get_int(c, key, val, path, 1, 65535, &x);
        t->prefetch = (unsigned)x;
        break;
    case TK_TIMEOUT:
        r = get_duration(c, key, val, path, 0, &t->timeout_ms);
        break;
    case TK_CLAIM_IDLE:
        r = get_duration(c, key, val, path, 1, &t->claim_idle_ms);
        break;
    case TK_MAXLEN:
        r = get_int(c, key, val, path, 0, INT64_MAX, &t->maxlen);
        break;
    case TK_ON_ERROR:
        r = get_enum(c, key, val, path, on_error_choices,
                     NELEM(on_error_choices), &e);
        t->on_error = (enum tm_on_error)e;
        break;
    case TK_MAX_RETRIES:
        r = get_int(c, key, val, path, -1, INT_MAX, &x);
        t->max_retries = (int)x;
        break;
    case TK_BACKOFF:
        r = get_duration(c, key, val, path, 1, &t->backoff_ms);
        break;
    case TK_MAX_BACKOFF:
        r = get_duration(c, key, val, path, 0, &t->max_backoff_ms);
        tw->has_max_backoff = true;
        tw->max_backoff_v = val;
        break;
    case TK_DEAD_LETTER:
        r = get_string(c, key, val, path, &t->dead_letter);
        tw->tmk->dead_letter_at = mark_of(val);
        tw->tmk->has_dead_letter = true;
        break;
    case TK_MAX_PAYLOAD:
        r = get_size(c, key, val, path, &t->max_payload);
        break;
    case TK_MAX_PRIORITY:
        r = get_int(c, key, val, path, 0, 255, &x);
        t->max_priority = (int)x;
        t->has_max_priority = true;
        tw->tmk->max_priority_at = mark_of(key);
        break;
    case TK_PRIORITY:
        r = get_int(c, key, val, path, 0, 255, &x);
        t->priority = (int)x;
        t->has_priority = true;
        tw->tmk->priority_at = mark_of(key);
        tw->tmk->priority_val_at = mark_of(val);
        break;
    case TK_CONFIG:
        r = get_mapping_json(c, val, path, &t->config_json);
        break;
    case TK_CIRCUIT_FAILURES:
        r = get_int(c, key, val, path, 0, 1000000, &x);
        t->circuit_failures = (unsigned)x;
        break;
    case TK_CIRCUIT_COOL_OFF:
        r = get_duration(c, key, val, path, 1, &t->circuit_cool_off_ms);
        break;
    case TK_CIRCUIT_MAX_COOL_OFF:
        r = get_duration(c, key, val, path, 1, &t->circuit_max_cool_off_ms);
        tw->max_cool_off_v = val;
        break;
    }
    return r < 0 ? -1 : 0;
}

/* parse_task fills t from the mapping v (or null) under the name key k. */
static int parse_task(struct ctx *c, struct tm_cfg_task *t,
                      struct task_marks *tmk, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    char where[CFG_PATH_LEN], a[32], b[32];
    join_path(where, "tasks", t->name);
    struct task_walk tw = { t, tmk, false, NULL, NULL };
    if (walk_section(c, k, v, where, task_keys, NELEM(task_keys),
                     cb_task_key, &tw) < 0)
        return -1;
    bool has_max_backoff = tw.has_max_backoff;
    const yaml_node_t *max_backoff_v = tw.max_backoff_v;
    if (t->plugin == NULL) {
        cfg_fail(c, mark_of(k), "%s: missing required key 'plugin'", where);
        return -1;
    }
    if (has_max_backoff && t->max_backoff_ms < t->backoff_ms) {
        cfg_fail(c, mark_of(max_backoff_v), "%s.max_backoff: must be at "
                 "least backoff (%s), got %s", where,
                 fmt_ms(t->backoff_ms, a, sizeof a),
                 fmt_ms(t->max_backoff_ms, b, sizeof b));
        return -1;
    }
    if (!has_max_backoff && t->max_backoff_ms < t->backoff_ms)
        t->max_backoff_ms = t->backoff_ms;
    if (t->circuit_max_cool_off_ms < t->circuit_cool_off_ms) {
        if (tw.max_cool_off_v != NULL) {
            cfg_fail(c, mark_of(tw.max_cool_off_v), "%s.circuit_max_cool_off:"
                     " must be at least circuit_cool_off (%s), got %s", where,
                     fmt_ms(t->circuit_cool_off_ms, a, sizeof a),
                     fmt_ms(t->circuit_max_cool_off_ms, b, sizeof b));
            return -1;
        }
        t->circuit_max_cool_off_ms = t->circuit_cool_off_ms;
    }
    if (t->queue == NULL)
        t->queue = tm_asprintf("taskmill.%s", t->name);
    if (t->dead_letter == NULL)
        t->dead_letter = tm_asprintf("%s.dlq", t->queue);
    if (strcmp(t->dead_letter, t->queue) == 0) {
        cfg_fail(c, tmk->has_dead_letter ? tmk->dead_letter_at : t->at,
                 "%s.dead_letter: must differ from the queue '%s'", where,
                 t->queue);
        return -1;
    }
    if (t->config_json == NULL)
        t->config_json = tm_strdup("{}");
    return 0;
}

static int parse_tasks(struct ctx *c, const yaml_node_t *k,
                       const yaml_node_t *v)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    c->has_tasks = true;
    if (want_mapping(c, k, v, "tasks", false) < 0)
        return -1;
    size_t n = (size_t)(v->data.mapping.pairs.top -
                        v->data.mapping.pairs.start);
    if (n == 0) {
        cfg_fail(c, mark_of(v), "tasks: expected at least one task");
        return -1;
    }
    cfg->tasks = tm_calloc(n, sizeof *cfg->tasks);
    c->marks = tm_calloc(n, sizeof *c->marks);
    /* a task with a bad name is left out (and reported); one whose keys
     * are bad is kept with marks.ok unset, for check_whole to skip */
    for (size_t i = 0; i < n && !(bad && cfg_stop(c)); i++) {
        const yaml_node_pair_t *p = &v->data.mapping.pairs.start[i];
        const yaml_node_t *key = node_at(c, p->key);
        char shown[CFG_CLIP + 8];
        if (key->type != YAML_SCALAR_NODE) {
            cfg_fail(c, mark_of(key), "tasks: expected a task name, got %s",
                     node_kind(key));
            bad = 1;
            continue;
        }
        const char *name = scalar_raw(key);
        if (!valid_task_name(name) ||
            strlen(name) != key->data.scalar.length) {
            cfg_fail(c, mark_of(key), "tasks: invalid task name '%s'; use "
                     "letters, digits, '_', '.' and '-'",
                     clip(name, shown, sizeof shown));
            bad = 1;
            continue;
        }
        int dup = 0;
        for (size_t j = 0; j < cfg->ntasks && !dup; j++)
            dup = strcmp(cfg->tasks[j].name, name) == 0;
        if (dup) {
            cfg_fail(c, mark_of(key), "duplicate key '%s' in tasks", name);
            bad = 1;
            continue;
        }
        /* marks[] is indexed like tasks[], not like the mapping's pairs */
        struct task_marks *tmk = &c->marks[cfg->ntasks];
        struct tm_cfg_task *t = &cfg->tasks[cfg->ntasks++];
        t->name = tm_strdup(name);
        t->at = mark_of(key);
        task_defaults(t);
        if (parse_task(c, t, tmk, key, node_at(c, p->value)) < 0)
            bad = 1;
        else
            tmk->ok = true;
    }
    return bad ? -1 : 0;
}

/* ------------------------------------------------------------ schedules */

enum schedule_key {
    SK_TASK, SK_CRON, SK_EVERY, SK_TIMEZONE, SK_BODY, SK_CATCH_UP
};

static const char *const schedule_keys[] = {
    "task", "cron", "every", "timezone", "body", "catch_up"
};

static const struct choice catch_up_choices[] = {
    { "skip", TM_CATCH_UP_SKIP, 1 },
    { "once", TM_CATCH_UP_ONCE, 1 },
};

/* schedule_clear frees what a schedule owns (the struct itself stays). */
static void schedule_clear(struct tm_cfg_schedule *s)
{
    tm_free(s->name);
    tm_free(s->task);
    tm_free(s->spec_text);
    tm_free(s->timezone);
    tm_tz_free(s->tz);
    tm_free(s->body_json);
    memset(s, 0, sizeof *s);
}

/* cron_mark places a cron error at the offending field: col is its
 * 1-based column in the spec text. That is exact when the value is the
 * file's text on one line (no ${VAR} expanded, no escapes); otherwise
 * the error stays at the value's start. */
static struct tm_mark cron_mark(const yaml_node_t *v, const char *text,
                                int col)
{
    struct tm_mark m = mark_of(v);
    const char *raw = scalar_raw(v);
    if (col < 1 || v->start_mark.line != v->end_mark.line ||
        strcmp(text, raw) != 0)
        return m;
    switch (v->data.scalar.style) {
    case YAML_PLAIN_SCALAR_STYLE:
        m.col += col - 1;
        break;
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        if (strpbrk(raw, "'\\\"") == NULL)
            m.col += col; /* past the opening quote */
        break;
    default:
        break;
    }
    return m;
}

/* schedule_walk is what a schedule's keys need besides the schedule. */
struct schedule_walk {
    struct tm_cfg_schedule *s;
    const yaml_node_t *spec_key;  /* cron: or every:, whichever came */
    const yaml_node_t *tz_key;    /* timezone:, if given */
};

static int cb_schedule_key(struct ctx *c, int i, const yaml_node_t *key,
                           const yaml_node_t *val, const char *path,
                           void *arg)
{
    struct schedule_walk *sw = arg;
    struct tm_cfg_schedule *s = sw->s;
    char why[512];
    int e = 0, r = 0;
    switch ((enum schedule_key)i) {
    case SK_TASK:
        r = get_string(c, key, val, path, &s->task);
        s->task_at = mark_of(val);
        break;
    case SK_CRON:
    case SK_EVERY: {
        if (sw->spec_key != NULL) {
            cfg_fail(c, mark_of(key), "%s: give either cron or every, not "
                     "both", path);
            return -1;
        }
        sw->spec_key = key;
        if (i == SK_EVERY) {
            r = get_duration(c, key, val, path, 1, &s->spec.every_ms);
            if (r == 0) {
                s->spec.kind = TM_SCHED_EVERY;
                s->spec_text = scalar_text(c, val, path);
                r = s->spec_text != NULL ? 0 : -1;
            }
            break;
        }
        char *text = NULL;
        int col = 0;
        r = get_string(c, key, val, path, &text);
        if (r == 0 &&
            tm_cron_parse(text, &s->spec.cron, why, sizeof why, &col) < 0) {
            cfg_fail(c, cron_mark(val, text, col), "%s: %s", path, why);
            r = -1;
        }
        if (r == 0) {
            s->spec.kind = TM_SCHED_CRON;
            s->spec_text = text;
        } else {
            tm_free(text);
        }
        break;
    }
    case SK_TIMEZONE:
        sw->tz_key = key;
        r = get_string(c, key, val, path, &s->timezone);
        if (r == 0) {
            s->tz = tm_tz_load(s->timezone, why, sizeof why);
            if (s->tz == NULL) {
                cfg_fail(c, mark_of(val), "%s: %s", path, why);
                r = -1;
            }
        }
        break;
    case SK_BODY:
        r = get_mapping_json(c, val, path, &s->body_json);
        break;
    case SK_CATCH_UP:
        r = get_enum(c, key, val, path, catch_up_choices,
                     NELEM(catch_up_choices), &e);
        s->catch_up = (enum tm_catch_up)e;
        break;
    }
    return r < 0 ? -1 : 0;
}

/* parse_schedule fills s from the mapping v under the name key k: the
 * keys each alone, then how they go together. */
static int parse_schedule(struct ctx *c, struct tm_cfg_schedule *s,
                          const yaml_node_t *k, const yaml_node_t *v)
{
    char where[CFG_PATH_LEN], why[512];
    join_path(where, "schedules", s->name);
    struct schedule_walk sw = { s, NULL, NULL };
    if (is_null(v)) {
        cfg_fail(c, mark_of(k), "%s: missing value; expected a mapping "
                 "with task and cron or every", where);
        return -1;
    }
    if (walk_section(c, k, v, where, schedule_keys, NELEM(schedule_keys),
                     cb_schedule_key, &sw) < 0)
        return -1;
    if (s->task == NULL) {
        cfg_fail(c, mark_of(k), "%s: missing required key 'task'", where);
        return -1;
    }
    if (sw.spec_key == NULL) {
        cfg_fail(c, mark_of(k), "%s: missing 'cron' or 'every' (one of "
                 "them is required)", where);
        return -1;
    }
    if (s->spec.kind == TM_SCHED_EVERY && sw.tz_key != NULL) {
        cfg_fail(c, mark_of(sw.tz_key), "%s.timezone: applies to cron "
                 "only; every slots are aligned to the Unix epoch (UTC)",
                 where);
        return -1;
    }
    if (s->spec.kind == TM_SCHED_CRON && s->tz == NULL) {
        s->timezone = tm_strdup("UTC");
        s->tz = tm_tz_load(s->timezone, why, sizeof why);
        assert(s->tz != NULL); /* UTC is built in */
    }
    s->spec.tz = s->tz;
    if (s->body_json == NULL)
        s->body_json = tm_strdup("{}");
    return 0;
}

static int parse_schedules(struct ctx *c, const yaml_node_t *k,
                           const yaml_node_t *v)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    int rc = want_mapping(c, k, v, "schedules", true);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    size_t n = (size_t)(v->data.mapping.pairs.top -
                        v->data.mapping.pairs.start);
    cfg->schedules = tm_calloc(n ? n : 1, sizeof *cfg->schedules);
    /* only schedules that parsed are kept: check_whole sees good ones */
    for (size_t i = 0; i < n && !(bad && cfg_stop(c)); i++) {
        const yaml_node_pair_t *p = &v->data.mapping.pairs.start[i];
        const yaml_node_t *key = node_at(c, p->key);
        char shown[CFG_CLIP + 8];
        if (key->type != YAML_SCALAR_NODE) {
            cfg_fail(c, mark_of(key), "schedules: expected a schedule "
                     "name, got %s", node_kind(key));
            bad = 1;
            continue;
        }
        const char *name = scalar_raw(key);
        if (!valid_task_name(name) ||
            strlen(name) != key->data.scalar.length) {
            cfg_fail(c, mark_of(key), "schedules: invalid schedule name "
                     "'%s'; use letters, digits, '_', '.' and '-'",
                     clip(name, shown, sizeof shown));
            bad = 1;
            continue;
        }
        if (tm_cfg_find_schedule(cfg, name) != NULL) {
            cfg_fail(c, mark_of(key), "duplicate key '%s' in schedules",
                     name);
            bad = 1;
            continue;
        }
        struct tm_cfg_schedule *s = &cfg->schedules[cfg->nschedules];
        s->name = tm_strdup(name);
        s->at = mark_of(key);
        s->catch_up = TM_CATCH_UP_SKIP;
        if (parse_schedule(c, s, key, node_at(c, p->value)) < 0) {
            schedule_clear(s);
            bad = 1;
            continue;
        }
        cfg->nschedules++;
    }
    return bad ? -1 : 0;
}

/* check_schedules checks what needs the tasks: each schedule's task. */
static int check_schedules(struct ctx *c)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    for (size_t i = 0; i < cfg->nschedules && !(bad && cfg_stop(c)); i++) {
        const struct tm_cfg_schedule *s = &cfg->schedules[i];
        char shown[CFG_CLIP + 8];
        if (tm_cfg_find_task(cfg, s->task) != NULL)
            continue;
        struct sbuf list = {0};
        for (size_t j = 0; j < cfg->ntasks; j++) {
            if (j > 0)
                sb_adds(&list, ", ");
            sb_adds(&list, cfg->tasks[j].name);
        }
        cfg_fail(c, s->task_at, "schedules.%s.task: unknown task '%s'; "
                 "expected a task of this file: %s", s->name,
                 clip(s->task, shown, sizeof shown),
                 list.p != NULL ? list.p : "(none)");
        tm_free(list.p);
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* --------------------------------------------------------------- top */

static const struct choice pool_choices[] = {
    { "thread", TM_POOL_THREAD, 1 },
    { "fork", TM_POOL_FORK, 1 },
};

static const struct choice level_choices[] = {
    { "error", TM_LOG_ERR, 1 },
    { "warning", TM_LOG_WARNING, 1 },
    { "info", TM_LOG_INFO, 1 },
    { "debug", TM_LOG_DEBUG, 1 },
    { "err", TM_LOG_ERR, 0 },
    { "warn", TM_LOG_WARNING, 0 },
};

static const struct choice format_choices[] = {
    { "text", TM_LOG_TEXT, 1 },
    { "json", TM_LOG_JSON, 1 },
};

/* CFG_MAX_NODES bounds the URLs of broker.url. */
#define CFG_MAX_NODES 64

static void clear_nodes(struct tm_cfg *cfg)
{
    for (size_t i = 0; i < cfg->nnodes; i++)
        tm_url_clear(&cfg->nodes[i]);
    tm_free(cfg->nodes);
    cfg->nodes = NULL;
    cfg->nnodes = 0;
    tm_url_clear(&cfg->url);
}

/*
 * set_nodes parses the n URLs of broker.url (urls[i] written at at[i];
 * list tells whether they were a YAML sequence, for the error paths) into
 * cfg->nodes, cfg->url (a copy of the first) and cfg->broker_url (the
 * URLs joined by ", "). Every node must have the first one's scheme: the
 * nodes of one deployment, reached the same way. On error the nodes are
 * left empty.
 */
static int set_nodes(struct ctx *c, char *const *urls,
                     const struct tm_mark *at, size_t n, bool list)
{
    char why[256], path[CFG_PATH_LEN];
    struct tm_cfg *cfg = c->cfg;
    struct sbuf joined = {0};
    int rc = -1;
    assert(n >= 1 && n <= CFG_MAX_NODES);
    clear_nodes(cfg);
    cfg->nodes = tm_calloc(n, sizeof *cfg->nodes);
    for (size_t i = 0; i < n; i++) {
        if (list)
            tm_snprintf(path, sizeof path, "broker.url[%zu]", i);
        else
            tm_snprintf(path, sizeof path, "broker.url");
        if (tm_url_parse(urls[i], &cfg->nodes[i], why, sizeof why) < 0) {
            cfg_fail(c, at[i], "%s: %s", path, why);
            goto out;
        }
        cfg->nnodes = i + 1;
        if (strcmp(cfg->nodes[i].scheme, cfg->nodes[0].scheme) != 0) {
            cfg_fail(c, at[i], "%s: scheme %s:// differs from the "
                     "first node's %s://; the URLs are the nodes of one "
                     "deployment, all of one scheme", path,
                     cfg->nodes[i].scheme, cfg->nodes[0].scheme);
            goto out;
        }
        if (joined.len > 0)
            sb_adds(&joined, ", ");
        sb_adds(&joined, urls[i]);
    }
    /* the first node again, so that url owns its strings */
    if (tm_url_parse(urls[0], &cfg->url, why, sizeof why) < 0) {
        cfg_fail(c, at[0], "broker.url: %s", why);
        goto out;
    }
    tm_free(cfg->broker_url);
    cfg->broker_url = joined.p;
    joined.p = NULL;
    c->url_done = true;
    rc = 0;
out:
    if (rc < 0)
        clear_nodes(cfg);
    tm_free(joined.p);
    return rc;
}

/* set_url makes the single URL s the only node; errors are reported at
 * at. */
static int set_url(struct ctx *c, const char *s, struct tm_mark at)
{
    char *urls[1] = { (char *)s };
    return set_nodes(c, urls, &at, 1, false);
}

static int read_password(struct ctx *c, struct tm_mark at)
{
    char ebuf[TM_STRERRNO_BUF];
    struct tm_cfg *cfg = c->cfg;
    char *data = NULL;
    size_t len = 0;
    int opened;
    if (read_file(cfg->password_file, CFG_MAX_SECRET, &data, &len,
                  &opened) < 0) {
        cfg_fail(c, at, "broker.password_file: cannot read '%s': %s",
                 cfg->password_file, tm_strerror(errno, ebuf, sizeof ebuf));
        return -1;
    }
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r'))
        data[--len] = '\0';
    if (strlen(data) != len) {
        cfg_fail(c, at, "broker.password_file: '%s' contains a NUL byte",
                 cfg->password_file);
        goto fail;
    }
    if (len == 0) {
        cfg_fail(c, at, "broker.password_file: '%s' is empty",
                 cfg->password_file);
        goto fail;
    }
    /* one secret for every node of the deployment */
    for (size_t i = 0; i < cfg->nnodes; i++) {
        tm_free(cfg->nodes[i].password);
        cfg->nodes[i].password = tm_strdup(data);
    }
    tm_free(cfg->url.password);
    cfg->url.password = data;
    return 0;
fail:
    tm_free(data);
    return -1;
}

/* broker: where keys were, for the checks after the walk */
struct broker_marks {
    struct tm_mark url_at, pw_at, tls_at, redis_at, amqp_at;
    struct tm_mark cert_at, key_at, mode_at, master_at;
    bool has_redis, has_amqp;
};

static const struct choice redis_mode_choices[] = {
    { "standalone", TM_REDIS_STANDALONE, 1 },
    { "sentinel", TM_REDIS_SENTINEL, 1 },
    { "cluster", TM_REDIS_CLUSTER, 1 },
};

static const struct choice queue_type_choices[] = {
    { "classic", TM_AMQP_CLASSIC, 1 },
    { "quorum", TM_AMQP_QUORUM, 1 },
};

/* parse_url_list reads broker.url: one URL, or a sequence of them. */
static int parse_url_list(struct ctx *c, const yaml_node_t *key,
                          const yaml_node_t *val, struct broker_marks *bm)
{
    char *urls[CFG_MAX_NODES];
    struct tm_mark at[CFG_MAX_NODES];
    char path[CFG_PATH_LEN];
    size_t n = 0;
    int rc = -1;
    bm->url_at = mark_of(val);
    if (val->type != YAML_SEQUENCE_NODE) {
        char *one = NULL;
        if (get_string(c, key, val, "broker.url", &one) < 0)
            return -1;
        rc = set_url(c, one, bm->url_at);
        tm_free(one);
        return rc;
    }
    size_t count = (size_t)(val->data.sequence.items.top -
                            val->data.sequence.items.start);
    if (count == 0) {
        cfg_fail(c, bm->url_at, "broker.url: an empty list; give one URL "
                 "or the nodes' URLs");
        return -1;
    }
    if (count > CFG_MAX_NODES) {
        cfg_fail(c, bm->url_at, "broker.url: %zu URLs; at most %d",
                 count, CFG_MAX_NODES);
        return -1;
    }
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top; it++) {
        const yaml_node_t *item = node_at(c, *it);
        urls[n] = NULL;
        tm_snprintf(path, sizeof path, "broker.url[%zu]", n);
        if (get_string(c, item, item, path, &urls[n]) < 0)
            goto out;
        at[n++] = mark_of(item);
    }
    rc = set_nodes(c, urls, at, n, true);
out:
    for (size_t i = 0; i < n; i++)
        tm_free(urls[i]);
    return rc;
}

/* get_path reads an optional file name, resolved against the config
 * file's directory; null or empty means not set. */
static int get_path(struct ctx *c, const yaml_node_t *key,
                    const yaml_node_t *val, const char *path, char **out)
{
    if (is_null(val))
        return 0;
    char *s = get_scalar(c, key, val, path);
    if (s == NULL)
        return -1;
    tm_free(*out);
    *out = *s != '\0' ? path_join(c->cfg->dir, s) : NULL;
    tm_free(s);
    return 0;
}

static int cb_tls_key(struct ctx *c, int i, const yaml_node_t *key,
                      const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_tls *tls = &c->cfg->tls;
    struct broker_marks *bm = arg;
    switch (i) {
    case 0:
        return get_path(c, key, val, path, &tls->ca_file);
    case 1:
        bm->cert_at = mark_of(key);
        return get_path(c, key, val, path, &tls->cert_file);
    case 2:
        bm->key_at = mark_of(key);
        return get_path(c, key, val, path, &tls->key_file);
    case 3:
        return get_string(c, key, val, path, &tls->server_name);
    default:
        return get_bool(c, key, val, path, &tls->verify);
    }
}

static int cb_redis_key(struct ctx *c, int i, const yaml_node_t *key,
                        const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    struct broker_marks *bm = arg;
    int e = 0;
    if (i == 0) {
        bm->mode_at = mark_of(val);
        if (get_enum(c, key, val, path, redis_mode_choices,
                     NELEM(redis_mode_choices), &e) < 0)
            return -1;
        cfg->redis_mode = (enum tm_redis_mode)e;
        return 0;
    }
    bm->master_at = mark_of(key);
    return get_string(c, key, val, path, &cfg->redis_master);
}

static int cb_amqp_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8];
    int e = 0;
    int64_t ms = 0;
    (void)arg;
    if (i == 0) {
        if (get_enum(c, key, val, path, queue_type_choices,
                     NELEM(queue_type_choices), &e) < 0)
            return -1;
        cfg->amqp_queue_type = (enum tm_amqp_queue_type)e;
        return 0;
    }
    if (get_duration(c, key, val, path, 0, &ms) < 0)
        return -1;
    /* AMQP negotiates the heartbeat in whole seconds, 16 bits */
    if (ms % 1000 != 0 || ms > 65535 * INT64_C(1000)) {
        char *s = get_scalar(c, key, val, path);
        cfg_fail(c, mark_of(val), "%s: expected whole seconds from 0 (off) "
                 "to 65535s, got '%s'", path,
                 clip(s != NULL ? s : "", shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    cfg->amqp_heartbeat_ms = ms;
    return 0;
}

enum broker_key { B_URL, B_PASSWORD_FILE, B_TLS, B_REDIS, B_AMQP };

static int cb_broker_key(struct ctx *c, int i, const yaml_node_t *key,
                         const yaml_node_t *val, const char *path,
                         void *arg)
{
    static const char *const tls_keys[] = { "ca_file", "cert_file",
                                            "key_file", "server_name",
                                            "verify" };
    static const char *const redis_keys[] = { "mode", "master" };
    static const char *const amqp_keys[] = { "queue_type", "heartbeat" };
    struct tm_cfg *cfg = c->cfg;
    struct broker_marks *bm = arg;
    switch ((enum broker_key)i) {
    case B_URL:
        /* until it parses, checks that need the broker kind are skipped */
        c->url_bad = true;
        if (parse_url_list(c, key, val, bm) < 0)
            return -1;
        c->url_bad = false;
        return 0;
    case B_PASSWORD_FILE:
        bm->pw_at = mark_of(val);
        return get_path(c, key, val, path, &cfg->password_file);
    case B_TLS:
        bm->tls_at = mark_of(key);
        cfg->has_tls = !is_null(val);
        return walk_section(c, key, val, path, tls_keys, NELEM(tls_keys),
                            cb_tls_key, bm);
    case B_REDIS:
        bm->redis_at = mark_of(key);
        bm->has_redis = !is_null(val);
        return walk_section(c, key, val, path, redis_keys,
                            NELEM(redis_keys), cb_redis_key, bm);
    case B_AMQP:
        bm->amqp_at = mark_of(key);
        bm->has_amqp = !is_null(val);
        return walk_section(c, key, val, path, amqp_keys, NELEM(amqp_keys),
                            cb_amqp_key, bm);
    }
    return -1;
}

/* check_broker runs the checks between broker keys, once the section is
 * read and its URLs parsed. */
static int check_broker(struct ctx *c, const struct broker_marks *bm)
{
    struct tm_cfg *cfg = c->cfg;
    const struct tm_tls *tls = &cfg->tls;
    int bad = 0;
    if (tls->cert_file != NULL && tls->key_file == NULL) {
        cfg_fail(c, bm->cert_at, "broker.tls.cert_file: given without "
                 "broker.tls.key_file (the client certificate's key)");
        bad = 1;
    } else if (tls->key_file != NULL && tls->cert_file == NULL) {
        cfg_fail(c, bm->key_at, "broker.tls.key_file: given without "
                 "broker.tls.cert_file (the client certificate)");
        bad = 1;
    }
    /* the rest needs the broker kind */
    if (!c->url_done)
        return bad ? -1 : 0;
    bool redis = cfg->url.kind == TM_BROKER_REDIS;
    /* An error, not a warning: a plain connection where the file asks for
     * certificates would send the password in clear. */
    if (cfg->has_tls && !cfg->url.tls) {
        cfg_fail(c, bm->tls_at, "broker.tls: TLS settings with a plain "
                 "%s:// URL; use %s:// or remove broker.tls",
                 cfg->url.scheme, redis ? "rediss" : "amqps");
        bad = 1;
    }
    if (bm->has_redis && !redis) {
        cfg_fail(c, bm->redis_at, "broker.redis: Redis settings with an "
                 "%s:// URL; remove them or use a redis:// URL",
                 cfg->url.scheme);
        return -1;
    }
    if (bm->has_amqp && redis) {
        cfg_fail(c, bm->amqp_at, "broker.amqp: RabbitMQ settings with a "
                 "%s:// URL; remove them or use an amqp:// URL",
                 cfg->url.scheme);
        return -1;
    }
    if (!redis)
        return bad ? -1 : 0;
    if (cfg->redis_mode == TM_REDIS_SENTINEL && cfg->redis_master == NULL) {
        cfg_fail(c, bm->mode_at, "broker.redis.mode: sentinel needs "
                 "broker.redis.master (the monitored master's name)");
        bad = 1;
    } else if (cfg->redis_mode != TM_REDIS_SENTINEL &&
               cfg->redis_master != NULL) {
        cfg_fail(c, bm->master_at, "broker.redis.master: only used with "
                 "broker.redis.mode: sentinel");
        bad = 1;
    }
    if (cfg->redis_mode == TM_REDIS_STANDALONE && cfg->nnodes > 1) {
        cfg_fail(c, bm->url_at, "broker.url: %zu URLs with "
                 "broker.redis.mode: standalone (one server); use mode: "
                 "sentinel (the URLs are the sentinels) or cluster (the "
                 "URLs are seed nodes)", cfg->nnodes);
        bad = 1;
    }
    return bad ? -1 : 0;
}

static int parse_broker(struct ctx *c, const yaml_node_t *k,
                        const yaml_node_t *v)
{
    static const char *const keys[] = { "url", "password_file", "tls",
                                        "redis", "amqp" };
    struct broker_marks bm;
    memset(&bm, 0, sizeof bm);
    if (walk_section(c, k, v, "broker", keys, NELEM(keys), cb_broker_key,
                     &bm) < 0)
        return -1;
    if (!c->url_done && set_url(c, c->cfg->broker_url, bm.url_at) < 0)
        return -1;
    if (check_broker(c, &bm) < 0)
        return -1;
    if (c->cfg->password_file != NULL && read_password(c, bm.pw_at) < 0)
        return -1;
    return 0;
}

static int cb_pool_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    int64_t x = 0;
    int e = 0;
    (void)arg;
    if (i == 0) {
        if (get_enum(c, key, val, path, pool_choices, NELEM(pool_choices),
                     &e) < 0)
            return -1;
        cfg->pool_kind = (enum tm_pool_kind)e;
    } else if (i == 1) {
        if (get_int(c, key, val, path, 1, 1024, &x) < 0)
            return -1;
        cfg->pool_size = (unsigned)x;
    } else {
        if (get_int(c, key, val, path, 0, UINT_MAX, &x) < 0)
            return -1;
        cfg->max_tasks_per_child = (unsigned)x;
    }
    return 0;
}

static int parse_pool(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    static const char *const keys[] = { "kind", "size",
                                         "max_tasks_per_child" };
    return walk_section(c, k, v, "pool", keys, NELEM(keys), cb_pool_key,
                        NULL);
}

/* valid_listen accepts "host:port" and "[v6]:port", port 0..65535. */
static int valid_listen(const char *s)
{
    const char *colon;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close == s + 1 || close[1] != ':')
            return 0;
        for (const char *p = s + 1; p < close; p++) {
            if (!is_ip6_char((unsigned char)*p))
                return 0;
        }
        colon = close + 1;
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || colon == s || strchr(colon + 1, ':') != NULL)
            return 0;
        for (const char *p = s; p < colon; p++) {
            if (!is_host_char((unsigned char)*p))
                return 0;
        }
    }
    const char *port = colon + 1;
    size_t n = strlen(port);
    int v = 0;
    if (n == 0 || n > 5)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(port[i]))
            return 0;
        v = v * 10 + (port[i] - '0');
    }
    return v <= 65535;
}

static int cb_http_key(struct ctx *c, int i, const yaml_node_t *key,
                       const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    char shown[CFG_CLIP + 8];
    (void)arg;
    /* A null or empty value (e.g. ${TOKEN:-}) means "not set". */
    if (is_null(val))
        return 0;
    char *s = get_scalar(c, key, val, path);
    if (s == NULL)
        return -1;
    if (*s == '\0') {
        tm_free(s);
        return 0;
    }
    if (i == 0 && !valid_listen(s)) {
        cfg_fail(c, mark_of(val), "%s: expected host:port like "
                 "127.0.0.1:9999, got '%s'", path,
                 clip(s, shown, sizeof shown));
        tm_free(s);
        return -1;
    }
    char **dst = i == 0 ? &cfg->http_listen : &cfg->http_token;
    tm_free(*dst);
    *dst = s;
    return 0;
}

static int parse_http(struct ctx *c, const yaml_node_t *k,
                      const yaml_node_t *v)
{
    static const char *const keys[] = { "listen", "token" };
    return walk_section(c, k, v, "http", keys, NELEM(keys), cb_http_key,
                        NULL);
}

static int cb_log_key(struct ctx *c, int i, const yaml_node_t *key,
                      const yaml_node_t *val, const char *path, void *arg)
{
    struct tm_cfg *cfg = c->cfg;
    int e = 0;
    (void)arg;
    if (i == 0) {
        if (get_enum(c, key, val, path, level_choices, NELEM(level_choices),
                     &e) < 0)
            return -1;
        cfg->log_level = e;
    } else {
        if (get_enum(c, key, val, path, format_choices,
                     NELEM(format_choices), &e) < 0)
            return -1;
        cfg->log_format = (enum tm_log_format)e;
    }
    return 0;
}

static int parse_log(struct ctx *c, const yaml_node_t *k,
                     const yaml_node_t *v)
{
    static const char *const keys[] = { "level", "format" };
    return walk_section(c, k, v, "log", keys, NELEM(keys), cb_log_key,
                        NULL);
}

enum top_key {
    K_BROKER, K_POOL, K_PLUGIN_DIR, K_PLUGIN_WATCH, K_INSTANCE, K_HTTP,
    K_SHUTDOWN_TIMEOUT, K_LOG, K_TASKS, K_SCHEDULES
};

static const char *const top_keys[] = {
    "broker", "pool", "plugin_dir", "plugin_watch", "instance", "http",
    "shutdown_timeout", "log", "tasks", "schedules"
};

static int parse_top(struct ctx *c, const yaml_node_t *root)
{
    struct tm_cfg *cfg = c->cfg;
    uint32_t seen = 0;
    int bad = 0;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
         p < root->data.mapping.pairs.top && !(bad && cfg_stop(c)); p++) {
        const yaml_node_t *key = node_at(c, p->key);
        const yaml_node_t *val = node_at(c, p->value);
        int i = key_index(c, key, NULL, top_keys, NELEM(top_keys), &seen);
        if (i < 0) {
            bad = 1;
            continue;
        }
        const char *path = top_keys[i];
        int r = 0;
        switch ((enum top_key)i) {
        case K_BROKER:
            r = parse_broker(c, key, val);
            break;
        case K_POOL:
            r = parse_pool(c, key, val);
            break;
        case K_PLUGIN_DIR: {
            char *s = NULL;
            r = get_string(c, key, val, path, &s);
            if (r == 0) {
                tm_free(cfg->plugin_dir);
                cfg->plugin_dir = path_join(cfg->dir, s);
                trim_slashes(cfg->plugin_dir);
            }
            tm_free(s);
            break;
        }
        case K_PLUGIN_WATCH:
            r = get_bool(c, key, val, path, &cfg->plugin_watch);
            break;
        case K_INSTANCE: {
            /* Empty (e.g. ${TASKMILL_INSTANCE:-}) means the default. */
            char *s = is_null(val) ? tm_strdup("") :
                get_scalar(c, key, val, path);
            r = s == NULL ? -1 : 0;
            tm_free(cfg->instance);
            cfg->instance = s != NULL && *s != '\0' ? s : NULL;
            if (cfg->instance == NULL)
                tm_free(s);
            break;
        }
        case K_HTTP:
            r = parse_http(c, key, val);
            break;
        case K_SHUTDOWN_TIMEOUT:
            r = get_duration(c, key, val, path, 0,
                             &cfg->shutdown_timeout_ms);
            break;
        case K_LOG:
            r = parse_log(c, key, val);
            break;
        case K_TASKS:
            r = parse_tasks(c, key, val);
            break;
        case K_SCHEDULES:
            r = parse_schedules(c, key, val);
            break;
        }
        if (r < 0)
            bad = 1;
    }
    return bad ? -1 : 0;
}

/* check_whole runs the checks that need the whole document. A task that
 * had errors of its own, and checks that need the broker kind when
 * broker.url is bad, are skipped: their errors would only repeat. */
static int check_whole(struct ctx *c, const yaml_node_t *root)
{
    struct tm_cfg *cfg = c->cfg;
    int bad = 0;
    if (!c->has_tasks) {
        cfg_fail(c, mark_of(root), "missing required key 'tasks' (a "
                 "mapping of task names to their settings)");
        return -1;
    }
    if (!c->url_done && !c->url_bad) {
        struct tm_mark none = { 1, 1 };
        if (set_url(c, cfg->broker_url, none) < 0)
            return -1;
    }
    if (cfg->plugin_dir == NULL)
        cfg->plugin_dir = path_join(cfg->dir, "plugins");
    for (size_t i = 0; i < cfg->ntasks && !(bad && cfg_stop(c)); i++) {
        struct tm_cfg_task *t = &cfg->tasks[i];
        const struct task_marks *m = &c->marks[i];
        char where[CFG_PATH_LEN];
        if (!m->ok)
            continue;
        join_path(where, "tasks", t->name);
        t->plugin_path = path_join(cfg->plugin_dir, t->plugin);
        if (c->url_done && cfg->url.kind == TM_BROKER_REDIS &&
            (t->has_priority || t->has_max_priority)) {
            bool pri_first = t->has_priority &&
                (!t->has_max_priority ||
                 m->priority_at.line < m->max_priority_at.line ||
                 (m->priority_at.line == m->max_priority_at.line &&
                  m->priority_at.col < m->max_priority_at.col));
            cfg_fail(c, pri_first ? m->priority_at : m->max_priority_at,
                     "%s.%s: priorities are not supported on Redis streams "
                     "(RabbitMQ only)", where,
                     pri_first ? "priority" : "max_priority");
            bad = 1;
            continue;
        }
        if (c->url_done && cfg->url.kind == TM_BROKER_REDIS &&
            cfg->redis_mode == TM_REDIS_CLUSTER) {
            char why[600];
            if (tm_redis_task_slots_check(t, why, sizeof why) != 0) {
                cfg_fail(c, m->has_queue ? m->queue_at : t->at, "%s: %s",
                         where, why);
                bad = 1;
                continue;
            }
        }
        if (t->priority > t->max_priority) {
            cfg_fail(c, m->priority_val_at, "%s.priority: %d is above "
                     "max_priority (%d); expected an integer from 0 to %d",
                     where, t->priority, t->max_priority, t->max_priority);
            bad = 1;
            continue;
        }
        if (c->url_done && cfg->url.kind == TM_BROKER_AMQP) {
            /* RabbitMQ 3.10 has no priorities on quorum queues */
            if (cfg->amqp_queue_type == TM_AMQP_QUORUM &&
                t->has_max_priority && t->max_priority > 0) {
                cfg_fail(c, m->max_priority_at, "%s.max_priority: "
                         "priorities are not supported on quorum queues "
                         "(broker.amqp.queue_type: quorum); remove it or "
                         "use queue_type: classic", where);
                bad = 1;
                continue;
            }
            if (strlen(t->queue) > AMQP_NAME_MAX) {
                cfg_fail(c, m->has_queue ? m->queue_at : t->at,
                         "%s.queue: longer than %d bytes, the RabbitMQ "
                         "limit", where, AMQP_NAME_MAX);
                bad = 1;
                continue;
            }
            if (strlen(t->dead_letter) > AMQP_NAME_MAX) {
                cfg_fail(c, m->has_dead_letter ? m->dead_letter_at : t->at,
                         "%s.dead_letter: longer than %d bytes, the "
                         "RabbitMQ limit", where, AMQP_NAME_MAX);
                bad = 1;
                continue;
            }
        }
    }
    if (!(bad && cfg_stop(c)) && check_schedules(c) < 0)
        bad = 1;
    if (bad)
        return -1;
    if (cfg->instance == NULL) {
        char host[256];
        if (gethostname(host, sizeof host) < 0 || host[0] == '\0')
            tm_snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        cfg->instance = tm_asprintf("%s-%ld", host, (long)getpid());
    }
    return 0;
}

/* ------------------------------------------------------------- loading */

static struct tm_mark offset_mark(const char *data, size_t len, size_t off)
{
    struct tm_mark m = { 1, 1 };
    if (off > len)
        off = len;
    for (size_t i = 0; i < off; i++) {
        if (data[i] == '\n') {
            m.line++;
            m.col = 1;
        } else if (((unsigned char)data[i] & 0xc0) != 0x80) {
            m.col++;
        }
    }
    return m;
}

/* yaml_fail reports a libyaml error at its problem mark. */
static void yaml_fail(struct ctx *c, const yaml_parser_t *p,
                      const char *data, size_t len)
{
    struct tm_mark at = { (int)p->problem_mark.line + 1,
                          (int)p->problem_mark.column + 1 };
    const char *problem = p->problem ? p->problem : "unknown error";
    const char *hint = "";
    size_t index = p->problem_mark.index;
    if (strstr(problem, "could not find expected ':'") != NULL)
        hint = "; is a ':' missing after a key?";
    else if (strstr(problem, "mapping values are not allowed") != NULL)
        hint = "; is a ':' missing on a line above, or does a value "
               "containing ': ' need quotes?";
    else if (index < len && data[index] == '\t')
        hint = "; indent with spaces, not tabs";
    switch (p->error) {
    case YAML_MEMORY_ERROR: {
        struct tm_mark none = { 0, 0 };
        cfg_fail(c, none, "out of memory while parsing YAML");
        break;
    }
    case YAML_READER_ERROR:
        at = offset_mark(data, len, p->problem_offset);
        if (p->problem_value != -1)
            cfg_fail(c, at, "%s (byte 0x%02x); the file must be UTF-8",
                     problem, (unsigned)p->problem_value & 0xffu);
        else
            cfg_fail(c, at, "%s", problem);
        break;
    default:
        if (p->context != NULL)
            cfg_fail(c, at, "%s (%s at line %d, column %d)%s", problem,
                     p->context, (int)p->context_mark.line + 1,
                     (int)p->context_mark.column + 1, hint);
        else
            cfg_fail(c, at, "%s%s", problem, hint);
        break;
    }
}

struct tm_cfg *tm_cfg_load_all(const char *path, size_t max_errors,
                               char *err, size_t errlen, size_t *nerrors)
{
    struct ctx c = { .path = path, .err = err, .errlen = errlen,
                     .max_errors = max_errors > 0 ? max_errors : 1 };
    struct tm_cfg *cfg = tm_calloc(1, sizeof *cfg);
    char *data = NULL;
    size_t len = 0;
    yaml_parser_t parser;
    yaml_document_t doc;
    bool parser_ok = false, doc_ok = false;
    char ebuf[TM_STRERRNO_BUF];
    int opened;

    if (err != NULL && errlen > 0)
        err[0] = '\0';
    c.cfg = cfg;
    cfg->path = tm_strdup(path);
    cfg->dir = config_dir(path);
    cfg->broker_url = tm_strdup(DEFAULT_BROKER_URL);
    cfg->tls.verify = true;
    cfg->redis_mode = TM_REDIS_STANDALONE;
    cfg->amqp_queue_type = TM_AMQP_CLASSIC;
    cfg->amqp_heartbeat_ms = 30000;
    cfg->pool_kind = TM_POOL_THREAD;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->pool_size = ncpu < 1 ? 1 : ncpu > 1024 ? 1024 : (unsigned)ncpu;
    cfg->shutdown_timeout_ms = 30000;
    cfg->log_level = TM_LOG_INFO;
    cfg->log_format = TM_LOG_TEXT;

    if (read_file(path, CFG_MAX_FILE, &data, &len, &opened) < 0) {
        /* no position to give: one line "cannot open FILE: reason" */
        const char *why = tm_strerror(errno, ebuf, sizeof ebuf);
        c.failed = 1;
        c.nerrors = 1;
        if (err != NULL && errlen > 0)
            tm_snprintf(err, errlen, "cannot %s %s: %s",
                        opened ? "read" : "open", path, why);
        goto fail;
    }
    if (!yaml_parser_initialize(&parser)) {
        struct tm_mark none = { 0, 0 };
        cfg_fail(&c, none, "out of memory while parsing YAML");
        goto fail;
    }
    parser_ok = true;
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_fail(&c, &parser, data, len);
        goto fail;
    }
    doc_ok = true;
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || is_null(root)) {
        struct tm_mark top = { 1, 1 };
        cfg_fail(&c, top, "the config is empty; expected a mapping with "
                 "a 'tasks' key");
        goto fail;
    }
    if (root->type != YAML_MAPPING_NODE) {
        cfg_fail(&c, mark_of(root), "expected a mapping at the top level, "
                 "got %s", node_kind(root));
        goto fail;
    }
    {
        /* A second document would be ignored silently: refuse it. */
        yaml_document_t extra;
        if (!yaml_parser_load(&parser, &extra)) {
            yaml_fail(&c, &parser, data, len);
            goto fail;
        }
        bool more = yaml_document_get_root_node(&extra) != NULL;
        struct tm_mark at = { (int)extra.start_mark.line + 1,
                              (int)extra.start_mark.column + 1 };
        yaml_document_delete(&extra);
        if (more) {
            cfg_fail(&c, at, "only one YAML document is allowed");
            goto fail;
        }
    }
    /* parse_top goes on after errors up to the cap; check_whole then
     * skips what already failed */
    if (parse_top(&c, root) < 0 && (cfg_stop(&c) || !c.failed))
        goto fail;
    if (check_whole(&c, root) < 0 || c.failed)
        goto fail;

    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    tm_free(c.marks);
    tm_free(data);
    if (nerrors != NULL)
        *nerrors = 0;
    return cfg;

fail:
    if (c.nerrors == 0) {
        /* every failure path reports its reason; this is a safety net */
        struct tm_mark none = { 0, 0 };
        cfg_fail(&c, none, "invalid configuration");
    }
    if (nerrors != NULL)
        *nerrors = c.nerrors;
    if (doc_ok)
        yaml_document_delete(&doc);
    if (parser_ok)
        yaml_parser_delete(&parser);
    tm_free(c.marks);
    tm_free(data);
    tm_cfg_free(cfg);
    return NULL;
}

struct tm_cfg *tm_cfg_load(const char *path, char *err, size_t errlen)
{
    return tm_cfg_load_all(path, 1, err, errlen, NULL);
}

void tm_cfg_free(struct tm_cfg *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->ntasks; i++) {
        struct tm_cfg_task *t = &cfg->tasks[i];
        tm_free(t->name);
        tm_free(t->plugin);
        tm_free(t->plugin_path);
        tm_free(t->queue);
        tm_free(t->group);
        tm_free(t->dead_letter);
        tm_free(t->config_json);
    }
    tm_free(cfg->tasks);
    for (size_t i = 0; i < cfg->nschedules; i++)
        schedule_clear(&cfg->schedules[i]);
    tm_free(cfg->schedules);
    tm_free(cfg->path);
    tm_free(cfg->dir);
    tm_free(cfg->broker_url);
    clear_nodes(cfg);
    tm_free(cfg->password_file);
    tm_free(cfg->tls.ca_file);
    tm_free(cfg->tls.cert_file);
    tm_free(cfg->tls.key_file);
    tm_free(cfg->tls.server_name);
    tm_free(cfg->redis_master);
    tm_free(cfg->plugin_dir);
    tm_free(cfg->instance);
    tm_free(cfg->http_listen);
    tm_free(cfg->http_token);
    tm_free(cfg);
}

const struct tm_cfg_task *tm_cfg_find_task(const struct tm_cfg *cfg,
                                           const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->ntasks; i++) {
        if (strcmp(cfg->tasks[i].name, name) == 0)
            return &cfg->tasks[i];
    }
    return NULL;
}

const struct tm_cfg_schedule *tm_cfg_find_schedule(const struct tm_cfg *cfg,
                                                   const char *name)
{
    if (cfg == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->nschedules; i++) {
        if (strcmp(cfg->schedules[i].name, name) == 0)
            return &cfg->schedules[i];
    }
    return NULL;
}
