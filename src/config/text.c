/* config/text.c - the string builder and small text helpers of the config reader. */
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

/* ------------------------------------------------------------ buffers */

void tm_cfg_sb_add(struct sbuf *b, const char *s, size_t n)
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

void tm_cfg_sb_adds(struct sbuf *b, const char *s)
{
    tm_cfg_sb_add(b, s, strlen(s));
}

/* tm_cfg_sb_take returns the string (never NULL) and leaves b empty. */
char *tm_cfg_sb_take(struct sbuf *b)
{
    char *p = b->p ? b->p : tm_strdup("");
    memset(b, 0, sizeof *b);
    return p;
}

/* tm_cfg_clip_n copies s[0..n) into buf (CFG_CLIP + 8 bytes at least), cut to
 * CFG_CLIP bytes and "..." when longer. Returns buf. */
const char *tm_cfg_clip_n(const char *s, size_t n, char *buf, size_t size)
{
    if (n > CFG_CLIP)
        tm_snprintf(buf, size, "%.*s...", CFG_CLIP, s);
    else
        tm_snprintf(buf, size, "%.*s", (int)n, s);
    return buf;
}

/* tm_cfg_clip is tm_cfg_clip_n for a whole string. */
const char *tm_cfg_clip(const char *s, char *buf, size_t size)
{
    return tm_cfg_clip_n(s, strlen(s), buf, size);
}

int tm_cfg_is_digit(int ch)
{
    return ch >= '0' && ch <= '9';
}

void tm_cfg_join_path(char *buf, const char *where, const char *key)
{
    if (where == NULL)
        tm_snprintf(buf, CFG_PATH_LEN, "%s", key);
    else
        tm_snprintf(buf, CFG_PATH_LEN, "%s.%s", where, key);
}
