/* util/trace.c - W3C traceparent parsing and writing, and the ids of new
 * spans. */
#include "util/trace.h"

#include <string.h>
#include <sys/random.h>

#include "util/util.h"

/* hexval: the value of a lower-case hex digit, -1 for anything else
 * (upper case included: the specification allows lower case only) */
static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* hex_bytes reads 2 * n lower-case hex digits of s into out; -1 on any
 * other character. */
static int hex_bytes(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return false;
    return true;
}

int tm_traceparent_parse(const char *s, size_t len, struct tm_trace_ctx *out)
{
    struct tm_trace_ctx c;
    uint8_t version;
    if (s == NULL || len < TM_TRACEPARENT_LEN)
        return -1;
    if (hex_bytes(s, &version, 1) < 0 || version == 0xff)
        return -1;
    if (version == 0 ? len != TM_TRACEPARENT_LEN
                     : len > TM_TRACEPARENT_LEN && s[TM_TRACEPARENT_LEN] != '-')
        return -1;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    if (hex_bytes(s + 3, c.trace_id, 16) < 0 ||
        hex_bytes(s + 36, c.span_id, 8) < 0 ||
        hex_bytes(s + 53, &c.flags, 1) < 0)
        return -1;
    if (all_zero(c.trace_id, 16) || all_zero(c.span_id, 8))
        return -1;
    *out = c;
    return 0;
}

void tm_traceparent_format(const struct tm_trace_ctx *ctx,
                           char buf[TM_TRACEPARENT_SIZE])
{
    static const char digits[] = "0123456789abcdef";
    char *p = buf;
    *p++ = '0';
    *p++ = '0';
    *p++ = '-';
    for (size_t i = 0; i < 16; i++) {
        *p++ = digits[ctx->trace_id[i] >> 4];
        *p++ = digits[ctx->trace_id[i] & 15];
    }
    *p++ = '-';
    for (size_t i = 0; i < 8; i++) {
        *p++ = digits[ctx->span_id[i] >> 4];
        *p++ = digits[ctx->span_id[i] & 15];
    }
    *p++ = '-';
    *p++ = digits[ctx->flags >> 4];
    *p++ = digits[ctx->flags & 15];
    *p = '\0';
}

bool tm_tracestate_valid(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > TM_TRACESTATE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < ' ' || s[i] > '~')
            return false;
    return true;
}

/* next64: the calling thread's xorshift128+ generator, seeded once from
 * getrandom (the clock and tm_rand64 when the pool would block), so that
 * daemons started together still make distinct ids. */
static uint64_t next64(void)
{
    static _Thread_local uint64_t s[2];
    if (s[0] == 0 && s[1] == 0) {
        if (getrandom(s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
            s[0] = tm_rand64() ^ (uint64_t)tm_now_ns();
            s[1] = tm_rand64() ^ (uint64_t)tm_wall_ms();
        }
        if (s[0] == 0 && s[1] == 0)
            s[0] = 0x9E3779B97F4A7C15ULL;
    }
    uint64_t x = s[0];
    const uint64_t y = s[1];
    s[0] = y;
    x ^= x << 23;
    s[1] = x ^ y ^ (x >> 17) ^ (y >> 26);
    return s[1] + y;
}

static void random_id(uint8_t *out, size_t n)
{
    do {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = next64();
            memcpy(out + i, &r, n - i < 8 ? n - i : 8);
        }
    } while (all_zero(out, n));
}

void tm_trace_new_trace(struct tm_trace_ctx *ctx)
{
    random_id(ctx->trace_id, sizeof ctx->trace_id);
    random_id(ctx->span_id, sizeof ctx->span_id);
}

void tm_trace_new_span(struct tm_trace_ctx *ctx)
{
    random_id(ctx->span_id, sizeof ctx->span_id);
}

bool tm_trace_sample_root(double ratio)
{
    if (ratio >= 1.0)
        return true;
    if (ratio <= 0.0)
        return false;
    /* 53 random bits as a fraction in [0, 1) */
    return (double)(next64() >> 11) * 0x1.0p-53 < ratio;
}
