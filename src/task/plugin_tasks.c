/* plugin_tasks.c - loading the plugins of a configuration's tasks: keep,
 * load, check, cb_init, and where a refusal is placed in the file. The
 * daemon (daemon/gen.c) and the fork pool's zygote (fork/zygote.c) load
 * generations through it. */
#include "task/task.h"

#include <string.h>

#include "util/util.h"

/* the config: keys the daemon reads for any plugin (asyncapi.c: the
 * schemas of a task whose plugin declares none) */
static const char *const daemon_config_keys[] = {"request_schema",
                                                 "response_schema", NULL};

/* listed says whether name is in the NULL-terminated list. */
static int listed(const char *const *list, const char *name)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* check_keys refuses a key of t's `config:` mapping that p's plugin does
 * not list in its descriptor's config_keys (when it lists them) and the
 * daemon does not read: one line at the key in err. Returns 0 or -1. */
static int check_keys(const struct tm_cfg *cfg, const struct tm_cfg_task *t,
                      const struct tm_plugin *p, char *err, size_t errlen)
{
    const char *const *known = p->desc.config_keys;
    if (known == NULL)
        return 0;
    for (size_t k = 0; k < t->nconfig_keys; k++) {
        const struct tm_cfg_key *ck = &t->config_keys[k];
        if (listed(known, ck->name) || listed(daemon_config_keys, ck->name))
            continue;
        size_t i;
        char list[512];
        size_t len = 0;
        list[0] = '\0';
        for (i = 0; known[i] != NULL && len + 1 < sizeof list; i++)
            len += (size_t)tm_snprintf(list + len, sizeof list - len, "%s%s",
                                       i > 0 ? ", " : "", known[i]);
        tm_snprintf(err, errlen, "%s:%d:%d: tasks.%s.config.%s: unknown key "
                    "for plugin '%s' (known: %s)", cfg->path, ck->at.line,
                    ck->at.col, t->name, ck->name, p->desc.name, list);
        return -1;
    }
    return 0;
}

/* add_line appends line to the error text err (a new line after the
 * first). */
static void add_line(char *err, size_t errlen, const char *line)
{
    size_t len = strlen(err);
    if (len + 1 < errlen)
        tm_snprintf(err + len, errlen - len, "%s%s", len > 0 ? "\n" : "",
                    line);
}

int tm_plugin_load_tasks(const struct tm_cfg *cfg, struct tm_task *tasks,
                         tm_plugin_keep_fn keep, void *arg, int flags,
                         char *err, size_t errlen)
{
    char reason[1024], line[1400];
    int failed = 0;
    int all = (flags & TM_PLUGIN_TASKS_ALL) != 0;
    if (errlen > 0)
        err[0] = '\0';
    for (size_t i = 0; i < cfg->ntasks && (all || !failed); i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        tasks[i].cfg = t;
        tasks[i].index = i;
        struct tm_plugin *kept = keep != NULL ? keep(arg, t) : NULL;
        if (kept != NULL) {
            tm_plugin_ref(kept);
            tasks[i].plugin = kept;
            continue;
        }
        struct tm_mark at = t->plugin_at;
        const char *key = "plugin";
        tasks[i].plugin = tm_plugin_load(t->plugin_path, reason,
                                         sizeof reason);
        if (tasks[i].plugin == NULL)
            goto fail;
        for (size_t j = 0; j < i; j++) {
            const struct tm_plugin *o = tasks[j].plugin;
            if (o != NULL &&
                strcmp(o->desc.name, tasks[i].plugin->desc.name) == 0 &&
                strcmp(o->path, tasks[i].plugin->path) != 0) {
                tm_snprintf(reason, sizeof reason,
                            "%s: plugin name '%s' is already loaded from %s",
                            t->plugin_path, o->desc.name, o->path);
                goto fail;
            }
        }
        if (check_keys(cfg, t, tasks[i].plugin, line, sizeof line) != 0) {
            add_line(err, errlen, line);
            failed = 1;
            continue;
        }
        if (flags & TM_PLUGIN_TASKS_NO_INIT)
            continue;
        struct tm_task_env env = {
            .struct_size = sizeof env,
            .task = t->name,
            .queue = t->queue,
            .config_json = t->config_json,
            .host = tm_exec_host(),
        };
        if (tm_plugin_init(tasks[i].plugin, &env, reason,
                           sizeof reason) != 0) {
            if (t->config_at.line > 0) {
                at = t->config_at;
                key = "config";
            }
            goto fail;
        }
        continue;
    fail:
        tm_snprintf(line, sizeof line, "%s:%d:%d: tasks.%s.%s: %s", cfg->path,
                    at.line, at.col, t->name, key, reason);
        add_line(err, errlen, line);
        failed = 1;
    }
    return failed ? -1 : 0;
}
