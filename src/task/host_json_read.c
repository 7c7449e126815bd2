/* host_json_read.c - plugins' JSON reading: a member of an object by key. */
#include "task/host_json.h"

#include <assert.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/util.h"

/* Numbers up to this length are copied to the stack for strtod (which
 * needs a terminator the slice lacks); longer ones to the heap. */
#define NUMBER_STACK_MAX 64

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10; /* the validator let only hex digits through */
}

static unsigned long hex4(const char *p)
{
    return (unsigned long)(hex_value(p[0]) << 12 | hex_value(p[1]) << 8 |
                           hex_value(p[2]) << 4 | hex_value(p[3]));
}

/* struct unesc walks the inside of a validated JSON string (between its
 * quotes), one code point or byte at a time. */
struct unesc {
    const char *p;
    const char *end;
};

/*
 * unesc_next decodes the next unit into u (up to 4 bytes) and returns its
 * length, or 0 at the end. Escapes become their UTF-8 bytes; a surrogate
 * escape without its pair becomes U+FFFD; other bytes pass as they are.
 * *nul is set when the unit is \u0000.
 */
static size_t unesc_next(struct unesc *s, char u[4], int *nul)
{
    if (s->p >= s->end)
        return 0;
    if (*s->p != '\\') {
        u[0] = *s->p++;
        return 1;
    }
    char c = s->p[1];
    s->p += 2;
    switch (c) {
    case 'b':
        u[0] = '\b';
        return 1;
    case 'f':
        u[0] = '\f';
        return 1;
    case 'n':
        u[0] = '\n';
        return 1;
    case 'r':
        u[0] = '\r';
        return 1;
    case 't':
        u[0] = '\t';
        return 1;
    case 'u':
        break;
    default: /* '"', '\\', '/' */
        u[0] = c;
        return 1;
    }
    unsigned long cp = hex4(s->p);
    s->p += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF && s->end - s->p >= 6 &&
        s->p[0] == '\\' && s->p[1] == 'u') {
        unsigned long lo = hex4(s->p + 2);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            s->p += 6;
        }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF)
        cp = 0xFFFD; /* a lone surrogate: no UTF-8 for it */
    if (cp == 0)
        *nul = 1;
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* key_equals compares the validated JSON string token tok[0..len) (with
 * its quotes), unescaped, with the C string key. */
static int key_equals(const char *tok, size_t len, const char *key)
{
    struct unesc s = {tok + 1, tok + len - 1};
    size_t klen = strlen(key);
    if (memchr(s.p, '\\', (size_t)(s.end - s.p)) == NULL)
        return (size_t)(s.end - s.p) == klen && memcmp(s.p, key, klen) == 0;
    size_t k = 0;
    char u[4];
    size_t n;
    int nul = 0;
    while ((n = unesc_next(&s, u, &nul)) > 0) {
        if (nul || k + n > klen || memcmp(key + k, u, n) != 0)
            return 0;
        k += n;
    }
    return k == klen;
}

int tm_hjson_find(const char *json, size_t len, const char *key,
                  const char **val, size_t *val_len)
{
    int status = TM_JSON_BAD_TEXT;
    if (json == NULL || key == NULL)
        goto out;
    const char *end = json + len;
    const char *found = NULL;
    size_t found_len = 0;
    const char *p = skip_ws(json, end);
    if (p >= end || *p != '{')
        goto out;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto closed;
    }
    for (;;) {
        /* member: "key" ws : ws value ws (, or }) */
        if (p >= end || *p != '"')
            goto out;
        size_t klen = tm_json_scan(p, (size_t)(end - p));
        if (klen == 0)
            goto out;
        int match = key_equals(p, klen, key);
        p = skip_ws(p + klen, end);
        if (p >= end || *p != ':')
            goto out;
        p = skip_ws(p + 1, end);
        size_t vlen = tm_json_scan(p, (size_t)(end - p));
        if (vlen == 0)
            goto out;
        if (match) {
            if (found != NULL)
                goto out; /* named twice: which one counts is unclear */
            found = p;
            found_len = vlen;
        }
        p = skip_ws(p + vlen, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        goto out;
    }
closed:
    if (skip_ws(p, end) != end)
        goto out;
    if (found == NULL) {
        status = TM_JSON_ABSENT;
        goto out;
    }
    /* the value lies inside the text: a borrowed slice of it */
    assert(found > json && found + found_len < end);
    *val = found;
    *val_len = found_len;
    status = TM_JSON_OK;
out:
    return status;
}

/* is_token checks that val[0..len) is exactly one JSON value starting
 * with one of the characters in first. */
static int is_token(const char *val, size_t len, const char *first)
{
    return val != NULL && len > 0 && strchr(first, val[0]) != NULL &&
           tm_json_scan(val, len) == len;
}

int tm_hjson_string(const char *val, size_t len, char *buf, size_t size,
                    size_t *out_len)
{
    if (!is_token(val, len, "\""))
        return TM_JSON_WRONG_TYPE;
    struct unesc s = {val + 1, val + len - 1};
    size_t k = 0;
    char u[4];
    size_t n;
    int nul = 0;
    while ((n = unesc_next(&s, u, &nul)) > 0) {
        if (buf != NULL && k + n < size)
            memcpy(buf + k, u, n);
        k += n;
    }
    *out_len = k;
    if (buf == NULL)
        return nul ? TM_JSON_RANGE : TM_JSON_OK;
    if (nul || k >= size) {
        if (size > 0)
            buf[0] = '\0';
        return TM_JSON_RANGE;
    }
    buf[k] = '\0';
    return TM_JSON_OK;
}

int tm_hjson_int(const char *val, size_t len, int64_t *out)
{
    if (!is_token(val, len, "-0123456789"))
        return TM_JSON_WRONG_TYPE;
    /* the validator checked the grammar: [-] digits [.digits] [e...] */
    if (memchr(val, '.', len) != NULL || memchr(val, 'e', len) != NULL ||
        memchr(val, 'E', len) != NULL)
        return TM_JSON_WRONG_TYPE;
    size_t i = 0;
    int neg = val[0] == '-';
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (i = (size_t)neg; i < len; i++) {
        unsigned d = (unsigned)(val[i] - '0');
        if (v > (limit - d) / 10)
            return TM_JSON_RANGE;
        v = v * 10 + d;
    }
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return TM_JSON_OK;
}

/* c_locale reads numbers with a '.' whatever LC_NUMERIC a plugin set. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

int tm_hjson_number(const char *val, size_t len, double *out)
{
    if (!is_token(val, len, "-0123456789"))
        return TM_JSON_WRONG_TYPE;
    pthread_once(&c_locale_once, c_locale_make);
    char small[NUMBER_STACK_MAX + 1];
    char *copy = len <= NUMBER_STACK_MAX ? small : tm_malloc(len + 1);
    memcpy(copy, val, len);
    copy[len] = '\0';
    errno = 0;
    double d = c_locale != (locale_t)0 ? strtod_l(copy, NULL, c_locale)
                                       : strtod(copy, NULL);
    int range = errno == ERANGE && isinf(d);
    if (copy != small)
        tm_free(copy);
    if (range)
        return TM_JSON_RANGE;
    *out = d;
    return TM_JSON_OK;
}
