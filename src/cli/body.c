/* body.c - message bodies on the command line: an argument or stdin. */
#include "cli.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "admin/admin.h"
#include "util/util.h"

/* First buffer for standard input; it doubles from there. */
#define TM_CLI_READ_CHUNK 65536

/* read_stdin reads standard input to its end into a new NUL-terminated
 * buffer, but never more than max + 1 bytes: one byte past max is
 * enough to tell "too long". Returns 0, or -1 with errno set. */
static int read_stdin(size_t max, char **out, size_t *len)
{
    assert(max < SIZE_MAX - 2);
    const size_t limit = max + 1;
    size_t cap = limit + 1 < TM_CLI_READ_CHUNK ? limit + 1
                                                : TM_CLI_READ_CHUNK;
    size_t n = 0;
    char *buf = tm_malloc(cap);
    int rc = -1;
    while (n < limit) {
        if (cap - n < 2) {
            cap = cap > (limit + 1) / 2 ? limit + 1 : 2 * cap;
            buf = tm_realloc(buf, cap);
        }
        /* invariant: n < limit and cap <= limit + 1, so room >= 1 and
         * the NUL always fits */
        size_t room = cap - 1 - n;
        assert(room >= 1 && n + room <= limit);
        ssize_t got = read(STDIN_FILENO, buf + n, room);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto out;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
    rc = 0;
out:
    if (buf != NULL) {
        int e = errno;
        tm_free(buf);
        errno = e;
    }
    return rc;
}

int tm_cli_body(const char *arg, const struct tm_cfg_task *t,
                int enforce_max, char **body, size_t *len)
{
    char ebuf[TM_STRERRNO_BUF];
    *body = NULL;
    *len = 0;
    if (strcmp(arg, "-") != 0) {
        size_t n = strlen(arg);
        if (enforce_max && n > t->max_payload) {
            fprintf(stderr, "taskmill: the body is %zu bytes, over the "
                    "max_payload of task '%s' (%zu bytes)\n", n, t->name,
                    t->max_payload);
            return TM_EXIT_USAGE;
        }
        *body = tm_strdup(arg);
        *len = n;
        return 0;
    }
    if (isatty(STDIN_FILENO))
        fprintf(stderr, "taskmill: reading the body from standard input "
                "(end it with Ctrl-D)\n");
    if (read_stdin(t->max_payload, body, len) != 0) {
        fprintf(stderr, "taskmill: cannot read the body from standard "
                "input: %s\n", tm_strerror(errno, ebuf, sizeof ebuf));
        return TM_EXIT_FAIL;
    }
    if (*len > t->max_payload) {
        fprintf(stderr, "taskmill: standard input holds more than the "
                "max_payload of task '%s' (%zu bytes)\n", t->name,
                t->max_payload);
        tm_free(*body);
        *body = NULL;
        *len = 0;
        return TM_EXIT_USAGE;
    }
    return 0;
}

int tm_cli_check_body(const char *body, size_t len)
{
    struct tm_admin_err err;
    if (tm_admin_body_check(body, len, &err) == 0)
        return 0;
    switch (err.code) {
    case TM_ADMIN_E_BODY_NUL:
        fprintf(stderr, "taskmill: the message body contains a NUL byte "
                "(at byte %zu)\n", err.at);
        break;
    case TM_ADMIN_E_BODY_UTF8:
        fprintf(stderr, "taskmill: the message body is not valid UTF-8\n");
        break;
    case TM_ADMIN_E_BODY_OTHER:
        fprintf(stderr, "taskmill: the message body must be a JSON object, "
                "e.g. '{\"a\": 1}'\n");
        break;
    case TM_ADMIN_E_BODY_EMPTY:
        /* no bytes: JSON text that ends before it starts */
    case TM_ADMIN_E_BODY_JSON:
        if (err.at >= len)
            fprintf(stderr, "taskmill: the message body is not valid JSON: "
                    "it ends too early (at byte %zu)\n", err.at);
        else
            fprintf(stderr, "taskmill: the message body is not valid JSON "
                    "(at byte %zu, '%c')\n", err.at,
                    body[err.at] >= 0x20 && body[err.at] < 0x7f
                        ? body[err.at]
                        : '?');
        break;
    default:
        fprintf(stderr, "taskmill: %s\n", err.msg);
        break;
    }
    return -1;
}
