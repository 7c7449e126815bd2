/* hello.c - a taskmill plugin template, built out of tree.
 *
 *   make                      # uses pkg-config --cflags taskmill
 *   taskmill invoke -c taskmill.yaml hello '{"name": "you"}'
 */
#include <taskmill.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* struct hello is the per-task state made by cb_init from `config:`. */
struct hello {
    char greeting[64];
};

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct hello *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -1;
    /* a real plugin parses env->config_json with the JSON library of its
     * choice; this one only looks for "loud": true */
    int loud = strstr(env->config_json, "\"loud\":true") != NULL;
    snprintf(h->greeting, sizeof h->greeting, "%s", loud ? "HELLO" : "hello");
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
    const char *key = strstr(call->body, "\"name\"");
    const char *q1 = key ? strchr(key + 6, '"') : NULL;
    const char *q2 = q1 ? strchr(q1 + 1, '"') : NULL;
    if (q2 == NULL) {
        tm_error(call, "expected {\"name\": \"...\"}");
        return TM_TASK_REJECT;
    }
    char out[256];
    snprintf(out, sizeof out, "{\"greeting\":\"%s, %.*s\"}", h->greeting,
             (int)(q2 - q1 - 1), q1 + 1);
    tm_result(call, out);
    return TM_TASK_OK;
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
