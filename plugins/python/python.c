/* python.c - task code in Python 3: a function of a module per message. */
#include "py_host.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p != NULL)
        memcpy(p, s, n + 1);
    return p;
}

static void task_free(struct tm_pyhost_task *t)
{
    if (t == NULL)
        return;
    free(t->task);
    free(t->module);
    free(t->function);
    free(t->paths_json);
    free(t);
}

/* cb_init reads the config and imports the module the way cb_worker_init
 * does, but in a child process (tm_pyhost_probe): the interpreter must not
 * start in the process that forks the workers, and a module that does not
 * import refuses the task here, at `taskmill check`, start and reload. */
static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct tm_pyhost_task *t = calloc(1, sizeof *t);
    cJSON *cfg = cJSON_Parse(env->config_json);
    cJSON *paths = NULL;
    const char *why = NULL;
    int rc = -1;

    if (t == NULL || cfg == NULL) {
        why = "out of memory or config not JSON";
        goto out;
    }
    t->host = env->host;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "module");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cfg, "function");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "path");
    if (!cJSON_IsString(m) || m->valuestring[0] == '\0') {
        why = "config 'module' must name a Python module";
        goto out;
    }
    if (f != NULL && (!cJSON_IsString(f) || f->valuestring[0] == '\0')) {
        why = "config 'function' must be a function name";
        goto out;
    }
    paths = cJSON_CreateArray();
    if (paths == NULL) {
        why = "out of memory";
        goto out;
    }
    if (cJSON_IsString(p)) {
        cJSON_AddItemToArray(paths, cJSON_CreateString(p->valuestring));
    } else if (cJSON_IsArray(p)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, p) {
            if (!cJSON_IsString(it)) {
                why = "config 'path' must be a directory or a list of them";
                goto out;
            }
            cJSON_AddItemToArray(paths, cJSON_CreateString(it->valuestring));
        }
    } else if (p != NULL) {
        why = "config 'path' must be a directory or a list of them";
        goto out;
    }
    t->task = dup_str(env->task);
    t->module = dup_str(m->valuestring);
    t->function = dup_str(f != NULL ? f->valuestring : "run");
    t->paths_json = cJSON_PrintUnformatted(paths);
    if (t->task == NULL || t->module == NULL || t->function == NULL ||
        t->paths_json == NULL) {
        why = "out of memory";
        goto out;
    }
    if (tm_pyhost_probe(t, env) != 0)
        goto out;
    *task_data = t;
    t = NULL;
    rc = 0;
out:
    if (why != NULL)
        tm_env_log(env, TM_LOG_ERR, "%s", why);
    cJSON_Delete(paths);
    cJSON_Delete(cfg);
    task_free(t);
    return rc;
}

static void cb_fini(void *task_data)
{
    task_free(task_data);
}

static int cb_worker_init(void *task_data, void **worker_data)
{
    struct tm_pyhost_task *t = task_data;
    struct tm_task_env env = {.struct_size = sizeof env,
                              .task = t->task,
                              .config_json = "{}",
                              .host = t->host};
    if (tm_pyhost_runtime_start(&env) != 0)
        return -1;
    void *fn = tm_pyhost_load(t, &env);
    if (fn == NULL)
        return -1;
    *worker_data = fn;
    return 0;
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)task_data;
    tm_pyhost_unload(worker_data);
}

static int cb_run(struct tm_call *call)
{
    return tm_pyhost_run(call->worker_data, call);
}

/* the keys of a task's config: (the daemon refuses others) */
static const char *const config_keys[] = {"module", "function", "path",
                                          NULL};

TM_TASK_DECLARE(
    .name = "python",
    .version = "1.0.0",
    .description = "Runs a Python 3 function per message: "
                   "function(body, ctx) returns a JSON-able result or None.",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
    .config_keys = config_keys,
    .flags = TM_TASK_F_INIT_ON_RELOAD,
)
