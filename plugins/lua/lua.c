/* lua.c - task code in Lua 5.4: one state per worker. */
#include "lua_host.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

/* LUA_DEF_MEMORY: the default memory_limit of a state (64 MiB). */
#define LUA_DEF_MEMORY (64.0 * 1024 * 1024)

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p != NULL)
        memcpy(p, s, n + 1);
    return p;
}

static void task_free(struct tm_luahost_task *t)
{
    if (t == NULL)
        return;
    free(t->task);
    free(t->script);
    free(t->function);
    free(t);
}

static int cb_init(const struct tm_task_env *env, void **task_data)
{
    struct tm_luahost_task *t = calloc(1, sizeof *t);
    cJSON *cfg = cJSON_Parse(env->config_json);
    const char *why = NULL;
    int rc = -1;

    if (t == NULL || cfg == NULL) {
        why = "out of memory or config not JSON";
        goto out;
    }
    t->host = env->host;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(cfg, "script");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cfg, "function");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "memory_limit");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(cfg, "unsafe");
    if (!cJSON_IsString(s) || s->valuestring[0] == '\0') {
        why = "config 'script' must name a Lua file";
        goto out;
    }
    if (f != NULL && (!cJSON_IsString(f) || f->valuestring[0] == '\0')) {
        why = "config 'function' must be a function name";
        goto out;
    }
    double mem = LUA_DEF_MEMORY;
    if (m != NULL) {
        if (!cJSON_IsNumber(m) || m->valuedouble < 0 ||
            m->valuedouble > 1e12) {
            why = "config 'memory_limit' must be bytes (0 = none)";
            goto out;
        }
        mem = m->valuedouble;
        if (mem > 0 && mem < TM_LUA_MIN_MEMORY) {
            tm_env_log(env, TM_LOG_ERR, "config 'memory_limit' is %.0f "
                       "bytes, below the minimum a Lua state needs (%d "
                       "bytes; 0 = no limit)", mem, TM_LUA_MIN_MEMORY);
            goto out;
        }
    }
    if (u != NULL && !cJSON_IsBool(u)) {
        why = "config 'unsafe' must be true or false";
        goto out;
    }
    t->memory_limit = (size_t)mem;
    t->unsafe = cJSON_IsTrue(u);
    t->task = dup_str(env->task);
    t->script = dup_str(s->valuestring);
    t->function = dup_str(f != NULL ? f->valuestring : "run");
    if (t->task == NULL || t->script == NULL || t->function == NULL) {
        why = "out of memory";
        goto out;
    }
    /* load it once here, so a broken script refuses the task at start */
    struct tm_luahost_worker probe = {.t = t};
    if (tm_luahost_load(&probe, env, 0) != 0)
        goto out;
    tm_luahost_close(&probe);
    *task_data = t;
    t = NULL;
    rc = 0;
out:
    if (why != NULL)
        tm_env_log(env, TM_LOG_ERR, "%s", why);
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
    struct tm_luahost_worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    w->t = task_data;
    w->checked_ms = w->t->host->now_ms();
    /* an env for the log lines only: the task's name */
    struct tm_task_env env = {.struct_size = sizeof env,
                              .task = w->t->task,
                              .config_json = "{}",
                              .host = w->t->host};
    if (tm_luahost_load(w, &env, 0) != 0) {
        free(w);
        return -1;
    }
    *worker_data = w;
    return 0;
}

static void cb_worker_fini(void *task_data, void *worker_data)
{
    (void)task_data;
    struct tm_luahost_worker *w = worker_data;
    if (w == NULL)
        return;
    tm_luahost_close(w);
    free(w);
}

static int cb_run(struct tm_call *call)
{
    struct tm_luahost_worker *w = call->worker_data;
    if (tm_luahost_changed(w, call->host->now_ms())) {
        /* a changed script is loaded before the next run; if the new one
         * is broken the old state is gone too, and runs fail until it is
         * fixed (and logged each time it is tried) */
        tm_log(call, TM_LOG_INFO, "script %s changed: reloading",
               w->t->script);
        tm_luahost_load(w, call, 1);
    }
    if (w->L == NULL) {
        if (tm_luahost_load(w, call, 1) != 0) {
            tm_error(call, "the script does not load (see the log)");
            return TM_TASK_ERROR;
        }
    }
    return tm_luahost_run(w, call);
}

/* the keys of a task's config: (the daemon refuses others) */
static const char *const config_keys[] = {"script", "function",
                                          "memory_limit", "unsafe", NULL};

TM_TASK_DECLARE(
    .name = "lua",
    .version = "1.0.0",
    .description = "Runs a Lua 5.4 function per message: run(body, ctx) "
                   "returns the result table (or nil).",
    .cb_init = cb_init,
    .cb_fini = cb_fini,
    .cb_worker_init = cb_worker_init,
    .cb_worker_fini = cb_worker_fini,
    .cb_run = cb_run,
    .config_keys = config_keys,
    .flags = TM_TASK_F_INIT_ON_RELOAD,
)
