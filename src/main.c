/* main.c - the command line: run, check, emit, invoke, dlq. */
#include "daemon.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "json.h"
#include "log.h"
#include "util.h"

#define EXIT_USAGE 2

static const char usage[] =
    "usage: taskmill [run] -c FILE          run in the foreground\n"
    "       taskmill check -c FILE          validate the config, load every "
    "plugin\n"
    "       taskmill emit -c FILE TASK JSON [--wait SECONDS] "
    "[--priority N]\n"
    "       taskmill invoke -c FILE TASK JSON   run one body through the "
    "task's plugin\n"
    "       taskmill dlq -c FILE (list|show|replay|purge) TASK [ID]\n"
    "       taskmill --version | --help\n"
    "\n"
    "Exit status: 0 success, 1 runtime failure, 2 usage or configuration "
    "error.\n";

struct args {
    const char *cmd;
    const char *config;
    const char *pos[4];
    int npos;
    const char *wait;
    const char *priority;
};

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "taskmill: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s", usage);
    return EXIT_USAGE;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    int i = 1;
    static const char *const cmds[] = {"run", "check", "emit", "invoke",
                                       "dlq"};
    if (i < argc && argv[i][0] != '-') {
        for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++)
            if (strcmp(argv[i], cmds[k]) == 0)
                a->cmd = cmds[k];
        if (a->cmd == NULL)
            return usage_error("unknown command '%s'", argv[i]);
        i++;
    }
    if (a->cmd == NULL)
        a->cmd = "run";
    for (; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-c") == 0 || strcmp(s, "--config") == 0) {
            if (++i >= argc)
                return usage_error("%s needs a file", s);
            a->config = argv[i];
        } else if (strcmp(s, "--wait") == 0) {
            if (++i >= argc)
                return usage_error("%s needs a number of seconds", s);
            a->wait = argv[i];
        } else if (strcmp(s, "--priority") == 0) {
            if (++i >= argc)
                return usage_error("%s needs a number", s);
            a->priority = argv[i];
        } else if (s[0] == '-' && s[1] != '\0') {
            return usage_error("unknown option '%s'", s);
        } else {
            if (a->npos >= 4)
                return usage_error("unexpected argument '%s'", s);
            a->pos[a->npos++] = s;
        }
    }
    if (a->config == NULL)
        return usage_error("%s needs -c FILE", a->cmd);
    return 0;
}

static struct tm_cfg *load_config(const char *path)
{
    char err[1024];
    struct tm_cfg *cfg = tm_cfg_load(path, err, sizeof err);
    if (cfg == NULL)
        fprintf(stderr, "%s\n", err);
    return cfg;
}

static const struct tm_cfg_task *find_task(const struct tm_cfg *cfg,
                                           const char *name)
{
    const struct tm_cfg_task *t = tm_cfg_find_task(cfg, name);
    if (t == NULL) {
        fprintf(stderr, "taskmill: no task '%s' in %s; tasks:", name,
                cfg->path);
        for (size_t i = 0; i < cfg->ntasks; i++)
            fprintf(stderr, " %s", cfg->tasks[i].name);
        fprintf(stderr, "\n");
    }
    return t;
}

/* check_body accepts a UTF-8 JSON object, or says why not on stderr. */
static int check_body(const char *body)
{
    size_t len = strlen(body);
    int ok = tm_utf8_valid(body, len) &&
             tm_json_check(body, len) == TM_JSON_OBJECT;
    if (!ok)
        fprintf(stderr, "taskmill: the message body must be a JSON object, "
                "e.g. '{\"a\": 1}'\n");
    return ok ? 0 : -1;
}

static int cmd_check(struct tm_cfg *cfg)
{
    struct tm_task *tasks = tm_calloc(cfg->ntasks, sizeof *tasks);
    char err[1024];
    int rc = tm_tasks_load(cfg, tasks, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    else
        printf("%s: ok (%zu task%s)\n", cfg->path, cfg->ntasks,
               cfg->ntasks == 1 ? "" : "s");
    tm_tasks_unload(tasks, cfg->ntasks);
    tm_free(tasks);
    tm_cfg_free(cfg);
    return rc == 0 ? 0 : EXIT_USAGE;
}

static int cmd_emit(struct tm_cfg *cfg, const struct args *a)
{
    int status = EXIT_USAGE;
    struct tm_broker *b = NULL;
    if (a->npos != 2) {
        usage_error("%s needs TASK and JSON", "emit");
        goto out;
    }
    const struct tm_cfg_task *t = find_task(cfg, a->pos[0]);
    if (t == NULL || check_body(a->pos[1]) != 0)
        goto out;
    if (a->wait != NULL && cfg->url.kind == TM_BROKER_REDIS) {
        fprintf(stderr, "taskmill: emit --wait (request/reply) needs a "
                "RabbitMQ broker; Redis streams have no reply channel\n");
        goto out;
    }
    int priority = -1;
    if (a->priority != NULL) {
        char *end;
        long p = strtol(a->priority, &end, 10);
        if (cfg->url.kind == TM_BROKER_REDIS) {
            fprintf(stderr, "taskmill: --priority needs a RabbitMQ broker; "
                    "Redis streams have no priorities\n");
            goto out;
        }
        if (*end != '\0' || p < 0 || p > t->max_priority) {
            fprintf(stderr, "taskmill: --priority must be an integer from 0 "
                    "to %d (max_priority of task '%s')\n", t->max_priority,
                    t->name);
            goto out;
        }
        priority = (int)p;
    }
    int64_t wait_ms = 0;
    if (a->wait != NULL) {
        char *end;
        double secs = strtod(a->wait, &end);
        if (end == a->wait || *end != '\0' || !(secs > 0) ||
            secs > 86400) {
            fprintf(stderr, "taskmill: --wait must be a number of seconds "
                    "above 0 and at most 86400, not '%s'\n", a->wait);
            goto out;
        }
        wait_ms = (int64_t)(secs * 1000.0 + 0.5);
        if (wait_ms < 1)
            wait_ms = 1;
    }
    char err[512];
    b = tm_broker_new(cfg, err, sizeof err);
    if (b == NULL) {
        fprintf(stderr, "taskmill: %s\n", err);
        goto out;
    }
    char id[128];
    if (a->wait != NULL) {
        /* request/reply: print the task's JSON result */
        if (b->ops->request == NULL) {
            fprintf(stderr, "taskmill: emit --wait (request/reply) is not "
                    "supported by the %s broker\n", b->ops->kind);
            goto out;
        }
        char *reply = NULL;
        int task_failed = 0;
        status = 1;
        if (b->ops->request(b, t, a->pos[1], strlen(a->pos[1]), priority,
                            wait_ms, id, sizeof id, &reply,
                            &task_failed) != 0) {
            if (b->err == ETIMEDOUT && id[0] != '\0')
                fprintf(stderr, "taskmill: no reply from task '%s' within "
                        "%s s; the request %s stays queued and will run, "
                        "but its result is lost\n", t->name, a->wait, id);
            else
                fprintf(stderr, "taskmill: emit --wait to '%s' failed: "
                        "%s\n", t->queue, b->errstr);
            goto out;
        }
        printf("%s\n", reply);
        if (task_failed)
            fprintf(stderr, "taskmill: task '%s' failed on request %s; its "
                    "error is printed above\n", t->name, id);
        else
            status = 0;
        tm_free(reply);
        goto out;
    }
    if (b->ops->publish(b, t, a->pos[1], strlen(a->pos[1]), priority, id,
                        sizeof id) != 0) {
        fprintf(stderr, "taskmill: emit to '%s' failed: %s\n", t->queue,
                b->errstr);
        status = 1;
        goto out;
    }
    printf("%s\n", id);
    status = 0;
out:
    if (b != NULL)
        b->ops->destroy(b);
    tm_cfg_free(cfg);
    return status;
}

static int cmd_invoke(struct tm_cfg *cfg, const struct args *a)
{
    int status = EXIT_USAGE;
    if (a->npos != 2) {
        usage_error("%s needs TASK and JSON", "invoke");
        tm_cfg_free(cfg);
        return status;
    }
    const struct tm_cfg_task *t = find_task(cfg, a->pos[0]);
    if (t == NULL) {
        tm_cfg_free(cfg);
        return status;
    }
    struct tm_task *tasks = tm_calloc(cfg->ntasks, sizeof *tasks);
    char err[1024];
    size_t ti = (size_t)(t - cfg->tasks);
    if (tm_tasks_load(cfg, tasks, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    struct tm_task *task = &tasks[ti];
    const struct tm_task_plugin *d = &task->plugin->desc;
    void *wdata = NULL;
    if (d->cb_worker_init != NULL &&
        d->cb_worker_init(task->plugin->task_data, &wdata) != 0) {
        fprintf(stderr, "taskmill: task '%s': worker init failed\n",
                t->name);
        status = 1;
        goto out;
    }
    struct tm_batch *batch = tm_batch_new(1);
    struct tm_msg *m = &batch->msgs[0];
    m->task = task;
    m->task_index = ti;
    m->id = "invoke-1";
    m->id_len = strlen(m->id);
    m->body = a->pos[1];
    m->body_len = strlen(a->pos[1]);
    m->attempt = 1;
    tm_exec_run(m, wdata);
    if (d->cb_worker_fini != NULL)
        d->cb_worker_fini(task->plugin->task_data, wdata);
    printf("outcome: %s\n", tm_outcome_label(m->outcome));
    if (m->error != NULL)
        printf("error: %s\n", m->error);
    if (m->result != NULL)
        printf("result: %s\n", m->result);
    printf("duration_ms: %.3f\n",
           (double)(m->t_end_ns - m->t_start_ns) / 1e6);
    status = m->outcome == TM_OUT_SUCCESS ? 0 : 1;
    tm_msg_release(m);
out:
    tm_tasks_unload(tasks, cfg->ntasks);
    tm_free(tasks);
    tm_cfg_free(cfg);
    return status;
}

static void iso_ms(int64_t ms, char *buf, size_t size)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tmv;
    gmtime_r(&s, &tmv);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tmv);
    tm_snprintf(buf, size, "%s.%03dZ", base, (int)(ms % 1000));
}

static void print_entry_json(const struct tm_dlq_entry *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", e->id);
    cJSON_AddStringToObject(o, "origin_id", e->origin_id ? e->origin_id : "");
    cJSON_AddStringToObject(o, "task", e->task ? e->task : "");
    cJSON_AddStringToObject(o, "error", e->error ? e->error : "");
    cJSON_AddNumberToObject(o, "attempts", (double)e->attempts);
    cJSON_AddNumberToObject(o, "failed_at", (double)e->failed_at);
    cJSON *body = e->body ? cJSON_Parse(e->body) : NULL;
    if (body != NULL)
        cJSON_AddItemToObject(o, "body", body);
    else
        cJSON_AddStringToObject(o, "body", e->body ? e->body : "");
    char *s = cJSON_Print(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static int cmd_dlq(struct tm_cfg *cfg, const struct args *a)
{
    int status = EXIT_USAGE;
    struct tm_broker *b = NULL;
    if (a->npos < 2 || a->npos > 3) {
        usage_error("%s needs (list|show|replay|purge) TASK [ID]", "dlq");
        goto out;
    }
    const char *op = a->pos[0];
    const char *id = a->npos == 3 ? a->pos[2] : NULL;
    if (strcmp(op, "list") != 0 && strcmp(op, "show") != 0 &&
        strcmp(op, "replay") != 0 && strcmp(op, "purge") != 0) {
        usage_error("unknown dlq action '%s'; expected list, show, replay "
                    "or purge", op);
        goto out;
    }
    if (strcmp(op, "show") == 0 && id == NULL) {
        usage_error("%s needs a dead-letter ID", "dlq show");
        goto out;
    }
    const struct tm_cfg_task *t = find_task(cfg, a->pos[1]);
    if (t == NULL)
        goto out;
    char err[512];
    b = tm_broker_new(cfg, err, sizeof err);
    if (b == NULL) {
        fprintf(stderr, "taskmill: %s\n", err);
        goto out;
    }
    status = 1;
    if (strcmp(op, "list") == 0 || strcmp(op, "show") == 0) {
        struct tm_dlq_entry *e = NULL;
        size_t n = 0;
        if (b->ops->dlq_list(b, t, (size_t)1 << 20, &e, &n) != 0) {
            fprintf(stderr, "taskmill: dlq %s: %s\n", op, b->errstr);
            goto out;
        }
        int found = 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(op, "show") == 0) {
                if (strcmp(e[i].id, id) == 0) {
                    print_entry_json(&e[i]);
                    found = 1;
                }
                continue;
            }
            char when[40];
            iso_ms(e[i].failed_at, when, sizeof when);
            printf("%s\t%s\t%ld\t%s\t%s\n", e[i].id,
                   e[i].origin_id ? e[i].origin_id : "-", e[i].attempts,
                   when, e[i].error ? e[i].error : "");
        }
        tm_dlq_entries_free(e, n);
        if (strcmp(op, "show") == 0 && !found) {
            fprintf(stderr, "taskmill: no entry '%s' in '%s'\n", id,
                    t->dead_letter);
            goto out;
        }
        status = 0;
        goto out;
    }
    long n = strcmp(op, "replay") == 0 ? b->ops->dlq_replay(b, t, id)
                                       : b->ops->dlq_purge(b, t, id);
    if (n < 0) {
        fprintf(stderr, "taskmill: dlq %s: %s\n", op, b->errstr);
        goto out;
    }
    if (id != NULL && n == 0) {
        fprintf(stderr, "taskmill: no entry '%s' in '%s'\n", id,
                t->dead_letter);
        goto out;
    }
    printf("%s %ld message%s\n", strcmp(op, "replay") == 0 ? "replayed"
                                                           : "purged",
           n, n == 1 ? "" : "s");
    status = 0;
out:
    if (b != NULL)
        b->ops->destroy(b);
    tm_cfg_free(cfg);
    return status;
}

/* raise_nofile lifts the soft descriptor limit to the hard one: the
 * daemon holds broker connections, plugin files, pool sockets and HTTP
 * connections, and its HTTP server sizes itself to what is allowed. Only
 * epoll and poll are used, so descriptors past FD_SETSIZE are fine. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        char eb[TM_STRERRNO_BUF];
        tm_log_warn("daemon", "cannot raise the descriptor limit from %llu "
                    "to %llu: %s", (unsigned long long)was,
                    (unsigned long long)rl.rlim_max,
                    tm_strerror(errno, eb, sizeof eb));
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--version") == 0 ||
                      strcmp(argv[1], "-V") == 0)) {
        printf("taskmill %s\n", TM_VERSION);
        return 0;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 ||
                      strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 2) {
        fputs(usage, stderr);
        return EXIT_USAGE;
    }
    struct args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0)
        return rc;
    struct tm_cfg *cfg = load_config(a.config);
    if (cfg == NULL)
        return EXIT_USAGE;
    tm_log_setup(cfg->log_level, cfg->log_format);
    if (strcmp(a.cmd, "check") == 0)
        return cmd_check(cfg);
    if (strcmp(a.cmd, "emit") == 0)
        return cmd_emit(cfg, &a);
    if (strcmp(a.cmd, "invoke") == 0)
        return cmd_invoke(cfg, &a);
    if (strcmp(a.cmd, "dlq") == 0)
        return cmd_dlq(cfg, &a);
    if (a.npos != 0)
        return usage_error("unexpected argument '%s'", a.pos[0]);
    raise_nofile();
    return tm_daemon_run(cfg);
}
