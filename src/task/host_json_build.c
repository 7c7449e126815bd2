/* host_json_build.c - plugins' JSON writing: a builder that stays valid. */
#include "task/host_json.h"

#include <assert.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"
#include "util/util.h"

/* First size of a builder's buffer: a typical result fits. */
#define BUILD_INITIAL 256

/*
 * struct jbuild is the daemon's side of a struct tm_json. Invariants:
 * buf[0..len) is a prefix of valid JSON that closing the open containers
 * (kind[0..depth), innermost last) completes; has_items[i] says whether
 * container i has a member yet (a comma comes before the next); top_done
 * is set once the top-level value is complete; error, once set, never
 * changes and every later call fails.
 */
struct jbuild {
    struct tm_json head; /* first: the plugin's view */
    char *buf;
    size_t len, cap;
    size_t depth;
    unsigned char kind[TM_JSON_MAX_DEPTH];      /* '{' or '[' */
    unsigned char has_items[TM_JSON_MAX_DEPTH];
    int top_done;
    int finished;                               /* text handed out */
    const char *error;
};

static struct jbuild *jb_of(struct tm_json *jb)
{
    return (struct jbuild *)(void *)jb;
}

static int fail(struct jbuild *b, const char *why)
{
    if (b->error == NULL)
        b->error = why;
    return -1;
}

/* reserve makes room for n more bytes plus a NUL. */
static int reserve(struct jbuild *b, size_t n)
{
    if (n > TM_HJSON_MAX || b->len > TM_HJSON_MAX - n)
        return fail(b, "the JSON text would exceed 16 MiB");
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap > 0 ? b->cap : BUILD_INITIAL;
    while (cap < b->len + n + 1)
        cap *= 2;
    b->buf = tm_realloc(b->buf, cap);
    b->cap = cap;
    return 0;
}

static int put(struct jbuild *b, const char *s, size_t n)
{
    if (reserve(b, n) != 0)
        return -1;
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return 0;
}

/* put_string appends s[0..n) as a JSON string: quotes, and escapes for
 * '"', '\\' and the control characters. s must be UTF-8. */
static int put_string(struct jbuild *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (s == NULL)
        return fail(b, "a string or key is NULL");
    if (!tm_utf8_valid(s, n))
        return fail(b, "a string or key is not valid UTF-8");
    /* worst case: every byte becomes \u00XX */
    if (n > TM_HJSON_MAX / 6 || reserve(b, n * 6 + 2) != 0)
        return fail(b, "the JSON text would exceed 16 MiB");
    char *o = b->buf + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c >= 0x20) {
            *o++ = (char)c;
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c == '\t') {
            *o++ = '\\';
            *o++ = 't';
        } else if (c == '\r') {
            *o++ = '\\';
            *o++ = 'r';
        } else {
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->buf);
    b->buf[b->len] = '\0';
    return 0;
}

/*
 * begin_value checks that a value may come here (with key inside an
 * object, without one elsewhere) and writes what precedes it: a comma,
 * the key and its colon.
 */
static int begin_value(struct jbuild *b, const char *key)
{
    if (b == NULL)
        return -1;
    if (b->error != NULL)
        return -1;
    if (b->finished)
        return fail(b, "a value was added after the text was taken");
    if (b->depth == 0) {
        if (b->top_done)
            return fail(b, "a second value was added at the top level");
        if (key != NULL)
            return fail(b, "a key was given for the top-level value");
        return 0;
    }
    size_t i = b->depth - 1;
    if (b->kind[i] == '{' && key == NULL)
        return fail(b, "a member of an object was added without a key");
    if (b->kind[i] == '[' && key != NULL)
        return fail(b, "a key was given for an element of an array");
    if (b->has_items[i] && put(b, ",", 1) != 0)
        return -1;
    b->has_items[i] = 1;
    if (key != NULL &&
        (put_string(b, key, strlen(key)) != 0 || put(b, ":", 1) != 0))
        return -1;
    return 0;
}

/* end_value notes a complete value at depth 0. */
static int end_value(struct jbuild *b)
{
    if (b->error != NULL)
        return -1;
    if (b->depth == 0)
        b->top_done = 1;
    return 0;
}

/* builder_host is the table a builder carries (struct tm_json.host): the
 * plugins' inline helpers reach the builder's functions through it, and
 * only its json_* members are ever read from a builder. The same
 * functions as the daemon's host table (task/run.c), so that a builder
 * needs no host above it. */
static const struct tm_host builder_host = {
    .struct_size = sizeof(struct tm_host),
    TM_HOST_JSON_MEMBERS,
};

struct tm_json *tm_hjson_new(void)
{
    struct jbuild *b = tm_calloc(1, sizeof *b);
    b->head.host = &builder_host;
    return &b->head;
}

void tm_hjson_free(struct tm_json *jb)
{
    if (jb == NULL)
        return;
    struct jbuild *b = jb_of(jb);
    tm_free(b->buf);
    tm_free(b);
}

int tm_hjson_open(struct tm_json *jb, const char *key, int array)
{
    struct jbuild *b = jb_of(jb);
    if (begin_value(b, key) != 0)
        return -1;
    if (b->depth == TM_JSON_MAX_DEPTH)
        return fail(b, "containers are nested too deep");
    if (put(b, array ? "[" : "{", 1) != 0)
        return -1;
    b->kind[b->depth] = array ? '[' : '{';
    b->has_items[b->depth] = 0;
    b->depth++;
    return 0;
}

int tm_hjson_close(struct tm_json *jb)
{
    struct jbuild *b = jb_of(jb);
    if (b == NULL || b->error != NULL)
        return -1;
    if (b->finished)
        return fail(b, "a container was closed after the text was taken");
    if (b->depth == 0)
        return fail(b, "a container was closed that was not open");
    b->depth--;
    assert(b->kind[b->depth] == '{' || b->kind[b->depth] == '[');
    if (put(b, b->kind[b->depth] == '{' ? "}" : "]", 1) != 0)
        return -1;
    return end_value(b);
}

int tm_hjson_add_string(struct tm_json *jb, const char *key, const char *s,
                        size_t len)
{
    struct jbuild *b = jb_of(jb);
    if (begin_value(b, key) != 0 || put_string(b, s, len) != 0)
        return -1;
    return end_value(b);
}

int tm_hjson_add_int(struct tm_json *jb, const char *key, int64_t v)
{
    struct jbuild *b = jb_of(jb);
    char num[24];
    int n = snprintf(num, sizeof num, "%lld", (long long)v);
    if (begin_value(b, key) != 0 || put(b, num, (size_t)n) != 0)
        return -1;
    return end_value(b);
}

/* c_locale writes numbers with a '.' whatever LC_NUMERIC a plugin set. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* format_double writes v in the fewest significant digits (15 to 17)
 * that read back as v. Returns the length. */
static int format_double(char *out, size_t size, double v)
{
    pthread_once(&c_locale_once, c_locale_make);
    locale_t old = c_locale != (locale_t)0 ? uselocale(c_locale)
                                           : (locale_t)0;
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(out, size, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            break;
    }
    if (old != (locale_t)0)
        uselocale(old);
    return n;
}

int tm_hjson_add_double(struct tm_json *jb, const char *key, double v)
{
    struct jbuild *b = jb_of(jb);
    char num[40];
    if (begin_value(b, key) != 0)
        return -1;
    if (!isfinite(v))
        return fail(b, "a number is not finite (JSON has no NaN or "
                    "infinity)");
    int n = format_double(num, sizeof num, v);
    if (put(b, num, (size_t)n) != 0)
        return -1;
    return end_value(b);
}

int tm_hjson_add_bool(struct tm_json *jb, const char *key, int v)
{
    struct jbuild *b = jb_of(jb);
    if (begin_value(b, key) != 0 ||
        put(b, v ? "true" : "false", v ? 4 : 5) != 0)
        return -1;
    return end_value(b);
}

int tm_hjson_add_null(struct tm_json *jb, const char *key)
{
    struct jbuild *b = jb_of(jb);
    if (begin_value(b, key) != 0 || put(b, "null", 4) != 0)
        return -1;
    return end_value(b);
}

int tm_hjson_add_raw(struct tm_json *jb, const char *key, const char *json,
                     size_t len)
{
    struct jbuild *b = jb_of(jb);
    if (begin_value(b, key) != 0)
        return -1;
    if (json == NULL || !tm_utf8_valid(json, len) ||
        tm_json_check(json, len) == TM_JSON_INVALID)
        return fail(b, "raw text added is not one UTF-8 JSON value");
    if (put(b, json, len) != 0)
        return -1;
    return end_value(b);
}

/* finish closes the open containers; returns 0 with a complete value, or
 * -1 with the builder failed. */
static int finish(struct jbuild *b)
{
    if (b->error != NULL)
        return -1;
    if (!b->finished) {
        while (b->depth > 0)
            if (tm_hjson_close(&b->head) != 0)
                return -1;
        assert(b->depth == 0);
        b->finished = 1;
    }
    if (!b->top_done)
        return fail(b, "nothing was added");
    return 0;
}

const char *tm_hjson_text(struct tm_json *jb, size_t *len)
{
    struct jbuild *b = jb_of(jb);
    if (b == NULL || finish(b) != 0)
        return NULL;
    if (len != NULL)
        *len = b->len;
    return b->buf;
}

const char *tm_hjson_error(const struct tm_json *jb)
{
    if (jb == NULL)
        return "no builder";
    return ((const struct jbuild *)(const void *)jb)->error;
}

const char *tm_hjson_take(struct tm_json *jb, char **text, size_t *len)
{
    struct jbuild *b = jb_of(jb);
    const char *why = NULL;
    *text = NULL;
    *len = 0;
    if (b == NULL)
        return "no builder";
    if (finish(b) != 0) {
        why = b->error;
    } else {
        *text = b->buf;
        *len = b->len;
        b->buf = NULL;
    }
    tm_hjson_free(jb);
    return why;
}
