/* fail.c - example task that fails on request, in every way it can. */
/* Feature-test macro first: pause() is POSIX, hidden by -std=c11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <taskmill.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Body {"mode": M}:
 *   "error"  returns TM_TASK_ERROR (the task's on_error applies)
 *   "reject" returns TM_TASK_REJECT (dead-letter now)
 *   "crash"  writes through a NULL pointer (SIGSEGV)
 *   "abort"  calls abort() (SIGABRT)
 *   "hang"   never returns and never polls should_stop(): wedged code
 *   "exit"   calls exit(3)
 * The last four take the whole process down, so use them with the fork
 * pool, where the daemon survives them.
 */

/*
 * A plugin builds against taskmill.h alone, so this file carries a tiny
 * JSON scanner of its own instead of linking a JSON library. It only finds
 * a top-level key of an object and compares a string value; the daemon
 * has already checked that the body is a valid JSON object.
 */

/* JSON_MAX_DEPTH bounds nesting while skipping values, so a hostile body
 * cannot exhaust the stack. */
#define JSON_MAX_DEPTH 64

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* json_skip_string skips the string starting at the '"' at p. Returns the
 * character after the closing quote, or NULL when malformed. */
static const char *json_skip_string(const char *p)
{
    p++;
    while (*p != '"') {
        if (*p == '\0' || (unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == '\0')
                return NULL;
        }
        p++;
    }
    return p + 1;
}

/* json_skip_value skips one value at p (after whitespace). Returns the
 * character after it, or NULL when malformed. */
static const char *json_skip_value(const char *p, int depth)
{
    p = json_ws(p);
    if (*p == '"')
        return json_skip_string(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH)
            return NULL;
        p = json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"')
                    return NULL;
                p = json_skip_string(p);
                if (p == NULL)
                    return NULL;
                p = json_ws(p);
                if (*p != ':')
                    return NULL;
                p++;
            }
            p = json_skip_value(p, depth + 1);
            if (p == NULL)
                return NULL;
            p = json_ws(p);
            if (*p == ',') {
                p = json_ws(p + 1);
                continue;
            }
            if (*p == close)
                return p + 1;
            return NULL;
        }
    }
    /* A number or a literal: the daemon validated it, skip its bytes. */
    const char *start = p;
    while (*p != '\0' && strchr("+-.0123456789eEtrufalsn", *p) != NULL)
        p++;
    return p > start ? p : NULL;
}

/*
 * json_find looks for key among the top-level members of the object text
 * obj. Returns 1 with *val at the value, 0 when the key is absent, -1 when
 * obj is not an object or names the key twice. Keys are compared as
 * written, so an escaped spelling of the key does not match.
 */
static int json_find(const char *obj, const char *key, const char **val)
{
    size_t klen = strlen(key);
    int found = 0;
    const char *p = json_ws(obj);

    if (*p != '{')
        return -1;
    p = json_ws(p + 1);
    if (*p == '}')
        return 0;
    for (;;) {
        if (*p != '"')
            return -1;
        const char *k = p + 1;
        p = json_skip_string(p);
        if (p == NULL)
            return -1;
        int match = (size_t)(p - 1 - k) == klen &&
                    memcmp(k, key, klen) == 0;
        p = json_ws(p);
        if (*p != ':')
            return -1;
        p = json_ws(p + 1);
        if (match) {
            if (found)
                return -1;
            found = 1;
            *val = p;
        }
        p = json_skip_value(p, 1);
        if (p == NULL)
            return -1;
        p = json_ws(p);
        if (*p == '}')
            return found;
        if (*p != ',')
            return -1;
        p = json_ws(p + 1);
    }
}

/* json_str_is returns 1 when the value at p is the string s (s contains
 * nothing that JSON would escape). */
static int json_str_is(const char *p, const char *s)
{
    size_t n = strlen(s);
    return p[0] == '"' && strncmp(p + 1, s, n) == 0 && p[n + 1] == '"';
}

static int cb_run(struct tm_call *call)
{
    const char *mode = NULL;

    int found = json_find(call->body, "mode", &mode);
    if (found < 0) {
        tm_error(call, "body is not a JSON object with unique keys");
        return TM_TASK_REJECT;
    }
    if (found == 0) {
        tm_error(call, "field 'mode' is missing");
        return TM_TASK_REJECT;
    }
    if (json_str_is(mode, "error")) {
        tm_error(call, "requested failure");
        return TM_TASK_ERROR;
    }
    if (json_str_is(mode, "reject")) {
        tm_error(call, "requested reject");
        return TM_TASK_REJECT;
    }
    if (json_str_is(mode, "crash")) {
        tm_log(call, TM_LOG_WARNING, "crashing on request");
        /* Both volatile: the pointer so the compiler cannot see it is
         * NULL, the target so the store is not dropped as dead. */
        volatile int *volatile nowhere = NULL;
        *nowhere = 1;
        return TM_TASK_ERROR; /* not reached */
    }
    if (json_str_is(mode, "abort")) {
        tm_log(call, TM_LOG_WARNING, "aborting on request");
        abort();
    }
    if (json_str_is(mode, "hang")) {
        tm_log(call, TM_LOG_WARNING, "hanging on request");
        for (;;)
            pause();
    }
    if (json_str_is(mode, "exit")) {
        tm_log(call, TM_LOG_WARNING, "exiting with status 3 on request");
        exit(3);
    }
    tm_error(call, "unknown mode; expected \"error\", \"reject\", "
                   "\"crash\", \"abort\", \"hang\" or \"exit\"");
    return TM_TASK_REJECT;
}

TM_TASK_DECLARE(
    .name = "fail",
    .version = "1.0.0",
    .description = "Fails on request: {\"mode\": \"error\" | \"reject\" | "
                   "\"crash\" | \"abort\" | \"hang\" | \"exit\"}. For "
                   "testing failure handling.",
    .request_schema =
        "{\"type\":\"object\","
        "\"properties\":{"
        "\"mode\":{\"type\":\"string\",\"enum\":[\"error\",\"reject\","
        "\"crash\",\"abort\",\"hang\",\"exit\"],"
        "\"description\":\"how to fail\"}},"
        "\"required\":[\"mode\"]}",
    .cb_run = cb_run,
)
