/* add.c - example task: {"a": int, "b": int} -> {"sum": a + b}. */
#include <taskmill.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "json_scan.h"

/* get_int reads the integer member key of the body, or sets the call's
 * error and returns -1. */
static int get_int(struct tm_call *call, const char *key, int64_t *out)
{
    const char *val = NULL;
    char msg[96];

    int found = json_find(call->body, key, &val);
    if (found < 0) {
        tm_error(call, "body is not a JSON object with unique keys");
        return -1;
    }
    if (found == 0) {
        snprintf(msg, sizeof msg, "field '%s' is missing", key);
        tm_error(call, msg);
        return -1;
    }
    int rc = json_int(val, out);
    if (rc == -2) {
        snprintf(msg, sizeof msg,
                 "field '%s' does not fit in a 64-bit integer", key);
        tm_error(call, msg);
        return -1;
    }
    if (rc != 0) {
        snprintf(msg, sizeof msg, "field '%s' is not an integer", key);
        tm_error(call, msg);
        return -1;
    }
    return 0;
}

static int cb_run(struct tm_call *call)
{
    int64_t a;
    int64_t b;
    char out[64];

    if (get_int(call, "a", &a) != 0 || get_int(call, "b", &b) != 0)
        return TM_TASK_REJECT;
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {
        tm_error(call, "sum does not fit in a 64-bit integer");
        return TM_TASK_REJECT;
    }
    snprintf(out, sizeof out, "{\"sum\":%" PRId64 "}", a + b);
    if (tm_result(call, out) != 0) {
        tm_error(call, "cannot store the result");
        return TM_TASK_ERROR;
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "add",
    .version = "1.0.0",
    .description = "Adds two 64-bit integers: {\"a\": 2, \"b\": 3} gives "
                   "{\"sum\": 5}; a missing or non-integer field is a "
                   "reject.",
    .request_schema =
        "{\"type\":\"object\","
        "\"properties\":{"
        "\"a\":{\"type\":\"integer\",\"description\":\"first addend\"},"
        "\"b\":{\"type\":\"integer\",\"description\":\"second addend\"}},"
        "\"required\":[\"a\",\"b\"]}",
    .response_schema =
        "{\"type\":\"object\","
        "\"properties\":{"
        "\"sum\":{\"type\":\"integer\",\"description\":\"a + b\"}},"
        "\"required\":[\"sum\"]}",
    .cb_run = cb_run,
)
