/* config.c - the exec plugin's settings: command, env, cwd and limits. */
#include "exec_host.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Defaults of the limits (config keys max_output, max_log_lines,
 * kill_grace_ms). max_output matches the daemon's default max_payload. */
#define EXEC_DEF_MAX_OUTPUT (1024u * 1024u)
#define EXEC_DEF_LOG_LINES 20u
#define EXEC_DEF_KILL_GRACE_MS 2000

/* env_pass names the daemon's variables a child gets (when set); PATH is
 * EXEC_DEF_PATH when the daemon has none. */
static const char *const env_pass[] = {"PATH", "LANG", "TZ"};
#define EXEC_ENV_PASS (sizeof env_pass / sizeof env_pass[0])
#define EXEC_DEF_PATH "/usr/local/bin:/usr/bin:/bin"

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p != NULL)
        memcpy(p, s, n + 1);
    return p;
}

/* join_kv returns malloc'd "k=v". */
static char *join_kv(const char *k, const char *v)
{
    size_t kl = strlen(k), vl = strlen(v);
    char *p = malloc(kl + vl + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, k, kl);
    p[kl] = '=';
    memcpy(p + kl + 1, v, vl + 1);
    return p;
}

/* env_set replaces or appends "k=v" in t->env (room for it is reserved by
 * the caller). Returns 0 or -1 (out of memory). */
static int env_set(struct tm_exhost_task *t, const char *k, const char *v)
{
    char *kv = join_kv(k, v);
    size_t kl = strlen(k);
    if (kv == NULL)
        return -1;
    for (size_t i = 0; i < t->nenv; i++) {
        if (strncmp(t->env[i], k, kl) == 0 && t->env[i][kl] == '=') {
            free(t->env[i]);
            t->env[i] = kv;
            return 0;
        }
    }
    t->env[t->nenv++] = kv;
    t->env[t->nenv] = NULL;
    return 0;
}

/* resolve finds argv0 in the PATH of the task's environment, as execvp
 * would, so the child needs no search (nothing but async-signal-safe calls
 * run between fork and exec). */
static char *resolve(const struct tm_exhost_task *t, const char *argv0)
{
    const char *path = NULL;
    char *found = NULL;

    if (strchr(argv0, '/') != NULL)
        return dup_str(argv0);
    for (size_t i = 0; i < t->nenv; i++)
        if (strncmp(t->env[i], "PATH=", 5) == 0)
            path = t->env[i] + 5;
    if (path == NULL)
        path = EXEC_DEF_PATH;
    while (found == NULL && *path != '\0') {
        const char *end = strchr(path, ':');
        size_t dl = end != NULL ? (size_t)(end - path) : strlen(path);
        size_t al = strlen(argv0);
        char *cand = malloc(dl + al + 3);
        if (cand == NULL)
            break;
        if (dl == 0) {
            cand[0] = '.';
            dl = 1;
        } else {
            memcpy(cand, path, dl);
        }
        cand[dl] = '/';
        memcpy(cand + dl + 1, argv0, al + 1);
        if (access(cand, X_OK) == 0)
            found = cand;
        else
            free(cand);
        path = end != NULL ? end + 1 : path + strlen(path);
    }
    return found;
}

/* get_uint reads an optional non-negative integer member. */
static int get_uint(const cJSON *cfg, const char *key, double max,
                    double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (v == NULL)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > max ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    *out = v->valuedouble;
    return 0;
}

struct tm_exhost_task *tm_exhost_task_new(const struct tm_task_env *env)
{
    struct tm_exhost_task *t = calloc(1, sizeof *t);
    cJSON *cfg = cJSON_Parse(env->config_json);
    const char *why = NULL;
    size_t n = 0, nextra = 0;

    if (t == NULL || cfg == NULL) {
        why = "out of memory or config not JSON";
        goto out;
    }
    t->max_output = EXEC_DEF_MAX_OUTPUT;
    t->max_log_lines = EXEC_DEF_LOG_LINES;
    t->kill_grace_ms = EXEC_DEF_KILL_GRACE_MS;

    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(cfg, "command");
    if (!cJSON_IsArray(cmd) || cJSON_GetArraySize(cmd) < 1) {
        why = "config 'command' must be a non-empty list of strings";
        goto out;
    }
    t->argv = calloc((size_t)cJSON_GetArraySize(cmd) + 1, sizeof *t->argv);
    if (t->argv == NULL) {
        why = "out of memory";
        goto out;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, cmd) {
        if (!cJSON_IsString(it) || (n == 0 && it->valuestring[0] == '\0')) {
            why = "config 'command' must be a non-empty list of strings";
            goto out;
        }
        if ((t->argv[n++] = dup_str(it->valuestring)) == NULL) {
            why = "out of memory";
            goto out;
        }
    }

    const cJSON *cenv = cJSON_GetObjectItemCaseSensitive(cfg, "env");
    if (cenv != NULL && !cJSON_IsObject(cenv)) {
        why = "config 'env' must be a mapping of names to strings";
        goto out;
    }
    nextra = cenv != NULL ? (size_t)cJSON_GetArraySize(cenv) : 0;
    /* the child's environment is built from nothing: the allowed names
     * below, the run's TASKMILL_* (run.c) and the config's env; the rest
     * of the daemon's (its credentials included) never reaches it */
    t->env = calloc(EXEC_ENV_PASS + nextra + 1, sizeof *t->env);
    if (t->env == NULL) {
        why = "out of memory";
        goto out;
    }
    for (size_t i = 0; i < EXEC_ENV_PASS; i++) {
        const char *v = getenv(env_pass[i]);
        if (v == NULL && strcmp(env_pass[i], "PATH") == 0)
            v = EXEC_DEF_PATH;
        if (v != NULL && env_set(t, env_pass[i], v) != 0) {
            why = "out of memory";
            goto out;
        }
    }
    if (cenv != NULL) {
        cJSON_ArrayForEach(it, cenv) {
            if (it->string[0] == '\0' || strchr(it->string, '=') != NULL ||
                !(cJSON_IsString(it) || cJSON_IsNumber(it))) {
                why = "config 'env' must be a mapping of names to strings";
                goto out;
            }
            char num[32];
            const char *v = it->valuestring;
            if (cJSON_IsNumber(it)) {
                snprintf(num, sizeof num, "%.17g", it->valuedouble);
                v = num;
            }
            if (env_set(t, it->string, v) != 0) {
                why = "out of memory";
                goto out;
            }
        }
    }

    const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(cfg, "cwd");
    if (cwd != NULL) {
        if (!cJSON_IsString(cwd) || cwd->valuestring[0] == '\0') {
            why = "config 'cwd' must be a directory name";
            goto out;
        }
        if ((t->cwd = dup_str(cwd->valuestring)) == NULL) {
            why = "out of memory";
            goto out;
        }
    }

    double d = (double)t->max_output;
    if (get_uint(cfg, "max_output", 512.0 * 1024 * 1024, &d) != 0 || d < 1) {
        why = "config 'max_output' must be bytes from 1 to 536870912";
        goto out;
    }
    t->max_output = (size_t)d;
    d = t->max_log_lines;
    if (get_uint(cfg, "max_log_lines", 100000, &d) != 0) {
        why = "config 'max_log_lines' must be from 0 to 100000";
        goto out;
    }
    t->max_log_lines = (unsigned)d;
    d = (double)t->kill_grace_ms;
    if (get_uint(cfg, "kill_grace_ms", 600000, &d) != 0) {
        why = "config 'kill_grace_ms' must be from 0 to 600000";
        goto out;
    }
    t->kill_grace_ms = (int64_t)d;

    if ((t->task = dup_str(env->task)) == NULL) {
        why = "out of memory";
        goto out;
    }
    t->path = resolve(t, t->argv[0]);
    if (t->path == NULL || access(t->path, X_OK) != 0) {
        tm_env_log(env, TM_LOG_ERR, "command '%s' is not an executable "
                   "file here (or in PATH)", t->argv[0]);
        why = "";
        goto out;
    }

out:
    cJSON_Delete(cfg);
    if (why != NULL) {
        if (why[0] != '\0')
            tm_env_log(env, TM_LOG_ERR, "%s", why);
        tm_exhost_task_free(t);
        t = NULL;
    }
    return t;
}

void tm_exhost_task_free(struct tm_exhost_task *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; t->argv != NULL && t->argv[i] != NULL; i++)
        free(t->argv[i]);
    for (size_t i = 0; i < t->nenv; i++)
        free(t->env[i]);
    free(t->argv);
    free(t->env);
    free(t->path);
    free(t->cwd);
    free(t->task);
    free(t);
}
