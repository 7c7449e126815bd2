/* json.c - strict validation of JSON text (RFC 8259), without allocation. */
#include "util/json.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util/util.h"

struct jscan {
    const unsigned char *p;
    const unsigned char *end;
    int utf8; /* strings must be valid UTF-8 too */
};

static void skip_ws(struct jscan *j)
{
    while (j->p < j->end &&
           (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
           (c >= 'A' && c <= 'F');
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* plain8 says whether none of the eight bytes of w ends a string run:
 * no '"', no '\\', nothing below 0x20 (SWAR: a byte b is flagged by
 * (b - k) & ~b & 0x80 when it is below k <= 0x80; exact for "any"). */
static int plain8(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    uint64_t hit = ((q - ones) & ~q) | ((b - ones) & ~b) |
                   ((w - ones * 0x20) & ~w);
    return (hit & high) == 0;
}

#if defined(__SSE2__)
/* flags16 flags (0xFF) the bytes of the 16 at p that end a plain string
 * run: '"', '\\', and those below 0x20 (the unsigned minimum with 0x1F is
 * the byte itself); with utf8 also those over 0x7F, which with the ones
 * below 0x20 are the bytes below 0x20 as signed. */
static inline __attribute__((always_inline)) __m128i
flags16(const unsigned char *p, int utf8)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i q = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
    __m128i b = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
    __m128i c = utf8 ? _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))
                     : _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1F)),
                                      v);
    return _mm_or_si128(_mm_or_si128(q, b), c);
}
#endif

/* run_of is plain_run for a utf8 known where it is inlined. */
static inline __attribute__((always_inline)) size_t
run_of(const unsigned char *p, const unsigned char *end, int utf8)
{
    const unsigned char *s = p;
#if defined(__SSE2__)
    while (end - p >= 64) {
        __m128i f = _mm_or_si128(
            _mm_or_si128(flags16(p, utf8), flags16(p + 16, utf8)),
            _mm_or_si128(flags16(p + 32, utf8), flags16(p + 48, utf8)));
        if (_mm_movemask_epi8(f) != 0)
            break;
        p += 64;
    }
    while (end - p >= 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(flags16(p, utf8));
        if (m != 0)
            return (size_t)(p - s) + (size_t)__builtin_ctz(m);
        p += 16;
    }
#endif
    const uint64_t high = utf8 ? 0x8080808080808080ull : 0;
    uint64_t w;
    while (end - p >= (ptrdiff_t)sizeof w) {
        memcpy(&w, p, sizeof w);
        if (!plain8(w) || (w & high) != 0)
            break;
        p += sizeof w;
    }
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 &&
           (*p < 0x80 || !utf8))
        p++;
    return (size_t)(p - s);
}

/* plain_run returns how many bytes from p (before end) are plain string
 * bytes: none of '"', '\\' or below 0x20, and with utf8 none over 0x7F
 * either. Large bodies are mostly long strings: they are passed 64, 16 or
 * 8 bytes at a time. */
static size_t plain_run(const unsigned char *p, const unsigned char *end,
                        int utf8)
{
    return utf8 ? run_of(p, end, 1) : run_of(p, end, 0);
}

/* string: at '"'; returns 0 and moves past the closing quote, or -1 with
 * j->p on the offending byte (or at the end when the text ends early) */
static int scan_string(struct jscan *j)
{
    j->p++;
    while (j->p < j->end) {
        j->p += plain_run(j->p, j->end, j->utf8);
        if (j->p >= j->end)
            break;
        unsigned char c = *j->p;
        if (c >= 0x80) {
            /* only with utf8: one character, checked */
            assert(j->utf8);
            size_t k = tm_utf8_seq((const char *)j->p,
                                   (size_t)(j->end - j->p));
            if (k == 0)
                return -1;
            j->p += k;
            continue;
        }
        if (c == '"') {
            j->p++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        assert(c == '\\');
        if (j->end - j->p < 2) {
            j->p = j->end;
            return -1;
        }
        j->p++;
        c = *j->p;
        switch (c) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            j->p++;
            break;
        case 'u':
            j->p++;
            for (int i = 0; i < 4; i++, j->p++)
                if (j->p >= j->end || !is_hex(*j->p))
                    return -1;
            break;
        default:
            return -1;
        }
    }
    return -1;
}

static int scan_number(struct jscan *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end)
        return -1;
    if (*j->p == '0') {
        j->p++;
    } else if (*j->p >= '1' && *j->p <= '9') {
        while (j->p < j->end && is_digit(*j->p))
            j->p++;
    } else {
        return -1;
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p >= j->end || !is_digit(*j->p))
            return -1;
        while (j->p < j->end && is_digit(*j->p))
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->end || !is_digit(*j->p))
            return -1;
        while (j->p < j->end && is_digit(*j->p))
            j->p++;
    }
    return 0;
}

static int scan_word(struct jscan *j, const char *w)
{
    for (; *w != '\0'; w++, j->p++)
        if (j->p >= j->end || *j->p != (unsigned char)*w)
            return -1;
    return 0;
}

/*
 * scan_value checks one value iteratively: stack[] holds, per open
 * container, '{' or '['. After a value, the loop expects ',' or the
 * closing bracket of the innermost container.
 */
static int scan_value(struct jscan *j, unsigned char *first)
{
    unsigned char stack[TM_JSON_MAX_DEPTH];
    size_t depth = 0;
    *first = 0;
    for (;;) {
        /* a value */
        skip_ws(j);
        if (j->p >= j->end)
            return -1;
        unsigned char c = *j->p;
        if (*first == 0)
            *first = c;
        if (c == '{' || c == '[') {
            if (depth == sizeof stack)
                return -1;
            stack[depth++] = c;
            j->p++;
            skip_ws(j);
            if (j->p < j->end && *j->p == (c == '{' ? '}' : ']')) {
                j->p++;
                depth--;
                goto after_value;
            }
            if (c == '{')
                goto member_key;
            continue;
        }
        if (c == '"') {
            if (scan_string(j) != 0)
                return -1;
        } else if (c == '-' || is_digit(c)) {
            if (scan_number(j) != 0)
                return -1;
        } else if (c == 't') {
            if (scan_word(j, "true") != 0)
                return -1;
        } else if (c == 'f') {
            if (scan_word(j, "false") != 0)
                return -1;
        } else if (c == 'n') {
            if (scan_word(j, "null") != 0)
                return -1;
        } else {
            return -1;
        }
    after_value:
        for (;;) {
            if (depth == 0)
                return 0;
            skip_ws(j);
            if (j->p >= j->end)
                return -1;
            unsigned char open = stack[depth - 1];
            unsigned char close = open == '{' ? '}' : ']';
            if (*j->p == close) {
                j->p++;
                depth--;
                continue;
            }
            if (*j->p != ',')
                return -1;
            j->p++;
            if (open == '[')
                break; /* the next element */
        member_key:
            skip_ws(j);
            if (j->p >= j->end || *j->p != '"' || scan_string(j) != 0)
                return -1;
            skip_ws(j);
            if (j->p >= j->end || *j->p != ':')
                return -1;
            j->p++;
            break; /* the member's value */
        }
    }
}

size_t tm_json_scan(const char *s, size_t len)
{
    struct jscan j = {(const unsigned char *)s,
                      (const unsigned char *)s + len, 0};
    unsigned char first;
    if (scan_value(&j, &first) != 0)
        return 0;
    return (size_t)(j.p - (const unsigned char *)s);
}

/* check_at is tm_json_check_at, with strings checked as UTF-8 when utf8
 * is set. */
static enum tm_json_check check_at(const char *s, size_t len,
                                   size_t *bad_at, int utf8)
{
    struct jscan j = {(const unsigned char *)s,
                      (const unsigned char *)s + len, utf8};
    unsigned char first;
    enum tm_json_check rc = TM_JSON_INVALID;
    if (scan_value(&j, &first) != 0)
        goto out;
    skip_ws(&j);
    if (j.p != j.end)
        goto out;
    rc = first == '{' ? TM_JSON_OBJECT : TM_JSON_OTHER;
out:
    /* the scanners stop on or just past the offending byte, and never
     * beyond the end of the text */
    assert(j.p >= (const unsigned char *)s && j.p <= j.end);
    if (bad_at != NULL)
        *bad_at = rc == TM_JSON_INVALID
                      ? (size_t)(j.p - (const unsigned char *)s)
                      : 0;
    return rc;
}

enum tm_json_check tm_json_check_at(const char *s, size_t len,
                                    size_t *bad_at)
{
    return check_at(s, len, bad_at, 0);
}

enum tm_json_check tm_json_check_utf8(const char *s, size_t len)
{
    return check_at(s, len, NULL, 1);
}

enum tm_json_check tm_json_check(const char *s, size_t len)
{
    return tm_json_check_at(s, len, NULL);
}
