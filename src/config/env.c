/* config/env.c - ${NAME} and ${NAME:-default} expansion of config values. */
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

/* ------------------------------------------------------ environment */

static int env_name_start(int ch)
{
    return ch == '_' || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

static int env_name_char(int ch)
{
    return env_name_start(ch) || tm_cfg_is_digit(ch);
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
            tm_cfg_sb_add(b, s + i, j - i);
            i = j;
            continue;
        }
        /* "$${" is a literal "${"; any other '$' stays as it is. */
        if (i + 2 < len && s[i + 1] == '$' && s[i + 2] == '{') {
            tm_cfg_sb_add(b, "${", 2);
            i += 3;
            continue;
        }
        if (i + 1 >= len || s[i + 1] != '{') {
            tm_cfg_sb_add(b, "$", 1);
            i++;
            continue;
        }
        size_t name = i + 2, j = name;
        while (j < len && env_name_char((unsigned char)s[j]))
            j++;
        tm_cfg_clip_n(s + i, len - i, shown, sizeof shown);
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
            tm_cfg_sb_adds(b, val);
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
            tm_cfg_sb_adds(b, val);
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
    return tm_cfg_sb_take(&b);
}
