/* hello.c - a taskmill plugin template, built out of tree.
 *
 *   make                # builds hello.so against an installed taskmill
 *   taskmill invoke -c taskmill.yaml hello '{"name": "you"}'
 *
 * taskmill.yaml, next to this file, runs it from this directory.
 */
#include <taskmill.h>

#include <stdio.h>
#include <stdlib.h>

/* struct hello is the per-task state made by cb_init from `config:`. */
struct hello {
    const char *greeting;
};

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    int loud = 0;
    /* `loud` is optional: absent means false */
    int st = tm_json_get_bool(env->host, env->config_json, "loud", &loud);
    if (st != TM_JSON_OK && st != TM_JSON_ABSENT) {
        tm_env_log(env, TM_LOG_ERR, "config key 'loud' is %s; expected "
                   "true or false", tm_json_status_text(st));
        return -1;
    }
    struct hello *h = calloc(1, sizeof *h);
    if (h == NULL) {
        tm_env_log(env, TM_LOG_ERR, "out of memory");
        return -1;
    }
    h->greeting = loud ? "HELLO" : "hello";
    tm_env_log(env, TM_LOG_INFO, "ready (%s)", h->greeting);
    *task_data = h;
    return 0;
}

static void cb_fini(void *task_data)
{
    free(task_data);
}

static int cb_run(struct tm_call *call)
{
    const struct hello *h = call->task_data;
    char name[128];
    char text[160];

    int st = tm_json_get_string(call->host, call->body, "name", name,
                                sizeof name);
    if (st != TM_JSON_OK) {
        char why[160];
        snprintf(why, sizeof why, "field 'name' is %s; expected a string "
                 "of at most 127 bytes", tm_json_status_text(st));
        tm_error(call, why);
        return TM_TASK_REJECT;
    }
    snprintf(text, sizeof text, "%s, %s", h->greeting, name);

    /* the builder escapes the name: whatever it holds, the result is
     * valid JSON */
    struct tm_json *out = tm_json_new_object(call->host);
    tm_json_add_string(out, "greeting", text);
    return tm_json_result(call, out) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
}

TM_TASK_DECLARE(
    .name = "hello",
    .version = "1.0.0",
    .description = "greets by name",
    .request_schema = "{\"type\":\"object\",\"required\":[\"name\"],"
                      "\"properties\":{\"name\":{\"type\":\"string\"}}}",
    .response_schema = "{\"type\":\"object\",\"properties\":"
                       "{\"greeting\":{\"type\":\"string\"}}}",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_run = cb_run,
)
