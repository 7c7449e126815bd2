/* add.c - example task: {"a": int, "b": int} -> {"sum": a + b}. */
#include <taskmill.h>

#include <stdio.h>

/* get_int reads the integer member key of the body, or sets the call's
 * error and returns -1. */
static int get_int(struct tm_call *call, const char *key, int64_t *out)
{
    char msg[96];
    int st = tm_json_get_int(call->host, call->body, key, out);

    switch (st) {
    case TM_JSON_OK:
        return 0;
    case TM_JSON_ABSENT:
        snprintf(msg, sizeof msg, "field '%s' is missing", key);
        break;
    case TM_JSON_WRONG_TYPE:
        snprintf(msg, sizeof msg, "field '%s' is not an integer", key);
        break;
    case TM_JSON_RANGE:
        snprintf(msg, sizeof msg,
                 "field '%s' does not fit in a 64-bit integer", key);
        break;
    case TM_JSON_BAD_TEXT:
        snprintf(msg, sizeof msg,
                 "body is not a JSON object with unique keys");
        break;
    default:
        snprintf(msg, sizeof msg, "field '%s' is %s", key,
                 tm_json_status_text(st));
        break;
    }
    tm_error(call, msg);
    return -1;
}

static int cb_run(struct tm_call *call)
{
    int64_t a;
    int64_t b;

    if (get_int(call, "a", &a) != 0 || get_int(call, "b", &b) != 0)
        return TM_TASK_REJECT;
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) {
        tm_error(call, "sum does not fit in a 64-bit integer");
        return TM_TASK_REJECT;
    }
    struct tm_json *out = tm_json_new_object(call->host);
    tm_json_add_int(out, "sum", a + b);
    /* on failure tm_json_result has set the run's error */
    return tm_json_result(call, out) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
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
