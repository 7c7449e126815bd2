/* emit.c - `taskmill emit` (to the broker) and `taskmill invoke` (here). */
#include "cli.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "daemon/daemon.h"
#include "otel/otel.h"
#include "util/util.h"

/* Longest --wait, in seconds: one day. */
#define TM_CLI_MAX_WAIT_S 86400
/* how long emit waits at exit for its send's span to leave */
#define TM_CLI_OTEL_FLUSH_MS 2000

/* due_option reads --delay or --at into *due_ms (epoch ms; 0: neither
 * given). Returns 0, or TM_EXIT_USAGE after saying why: the CLI's
 * wording of tm_admin_due's refusals, which names its flags. */
static int due_option(const struct tm_cfg *cfg, const struct tm_cli_args *a,
                      int64_t *due_ms)
{
    struct tm_admin_err err;
    *due_ms = 0;
    /* --wait goes with neither; both at once is tm_admin_due's refusal */
    if (a->wait != NULL && (a->delay != NULL) != (a->at != NULL)) {
        fprintf(stderr, "taskmill: --wait cannot be combined with --delay "
                "or --at\n");
        return TM_EXIT_USAGE;
    }
    /* the 30 days are RabbitMQ's bound (its delay queues); Redis holds a
     * delayed message any time */
    if (tm_admin_due(cfg->url.kind, a->delay, a->at, tm_wall_ms(),
                     /* bound = */ cfg->url.kind == TM_BROKER_AMQP, due_ms,
                     &err) == 0)
        return 0;
    switch (err.code) {
    case TM_ADMIN_E_DUE_BOTH:
        fprintf(stderr, "taskmill: --delay and --at exclude each other\n");
        break;
    case TM_ADMIN_E_NO_DELAY:
        fprintf(stderr, "taskmill: delayed messages are not supported by "
                "the %s broker\n", cfg->url.scheme);
        break;
    case TM_ADMIN_E_DELAY_SYNTAX:
        fprintf(stderr, "taskmill: --delay must be a duration such as "
                "30s, 5m or 1h, not '%s'\n", a->delay);
        break;
    case TM_ADMIN_E_AT_SYNTAX:
        fprintf(stderr, "taskmill: --at must be an RFC 3339 time with a "
                "zone (2026-12-01T03:00:00Z) or epoch milliseconds, "
                "not '%s'\n", a->at);
        break;
    case TM_ADMIN_E_TOO_FAR:
        fprintf(stderr, "taskmill: on RabbitMQ a message can be delayed by "
                "30 days at most\n");
        break;
    default:
        fprintf(stderr, "taskmill: %s\n", err.msg);
        break;
    }
    return TM_EXIT_USAGE;
}

/* emit_options checks --priority, --wait, --delay and --at against the
 * task and the broker. Returns 0 with *priority (-1: the task's
 * default), *wait_ms (0: no --wait) and *due_ms (0: not delayed) set, or
 * TM_EXIT_USAGE after saying why. */
static int emit_options(const struct tm_cfg *cfg, const struct tm_cfg_task *t,
                        const struct tm_cli_args *a, int *priority,
                        int64_t *wait_ms, int64_t *due_ms)
{
    *priority = -1;
    *wait_ms = 0;
    if (due_option(cfg, a, due_ms) != 0)
        return TM_EXIT_USAGE;
    if (a->wait != NULL && !tm_admin_can_request(cfg->url.kind)) {
        fprintf(stderr, "taskmill: emit --wait (request/reply) is not "
                "supported by the %s broker\n", cfg->url.scheme);
        return TM_EXIT_USAGE;
    }
    if (a->priority != NULL) {
        char *end;
        errno = 0;
        long p = strtol(a->priority, &end, 10);
        if (cfg->url.kind == TM_BROKER_REDIS) {
            fprintf(stderr, "taskmill: --priority needs a RabbitMQ broker; "
                    "Redis streams have no priorities\n");
            return TM_EXIT_USAGE;
        }
        if (end == a->priority || *end != '\0' || errno != 0 || p < 0 ||
            p > t->max_priority) {
            fprintf(stderr, "taskmill: --priority must be an integer from 0 "
                    "to %d (max_priority of task '%s')\n", t->max_priority,
                    t->name);
            return TM_EXIT_USAGE;
        }
        *priority = (int)p;
    }
    if (a->wait != NULL) {
        char *end;
        double secs = strtod(a->wait, &end);
        if (end == a->wait || *end != '\0' || !(secs > 0) ||
            secs > TM_CLI_MAX_WAIT_S) {
            fprintf(stderr, "taskmill: --wait must be a number of seconds "
                    "above 0 and at most %d, not '%s'\n", TM_CLI_MAX_WAIT_S,
                    a->wait);
            return TM_EXIT_USAGE;
        }
        *wait_ms = (int64_t)(secs * 1000.0 + 0.5);
        if (*wait_ms < 1)
            *wait_ms = 1;
    }
    return 0;
}

/* TM_CLI_DEDUP_KEY_MAX bounds --dedup-key: a key names a job, it does not
 * carry one (it becomes part of a Redis key name). */
#define TM_CLI_DEDUP_KEY_MAX 512

/* dedup_key_bad refuses an empty, overlong or control-character key, with
 * the reason on stderr. */
static int dedup_key_bad(const char *k)
{
    size_t n = strlen(k);
    int bad = n == 0 || n > TM_CLI_DEDUP_KEY_MAX;
    for (size_t i = 0; i < n && !bad; i++)
        bad = (unsigned char)k[i] < 0x20 || k[i] == 0x7f;
    if (bad)
        tm_cli_usage_error("--dedup-key needs 1 to %d characters, none of "
                           "them a control character", TM_CLI_DEDUP_KEY_MAX);
    return bad;
}

/* emit_request publishes body as a request and prints the task's JSON
 * result. Returns the exit status. */
static int emit_request(struct tm_broker *b, const struct tm_cfg_task *t,
                        const char *body, size_t len,
                        const struct tm_pub *pub, int64_t wait_ms,
                        const char *wait_text)
{
    char id[128] = "";
    char *reply = NULL;
    int task_failed = 0;
    int status = TM_EXIT_FAIL;
    struct tm_admin_err err;
    if (tm_admin_request(b, t, body, len, pub, wait_ms, id, sizeof id,
                         &reply, &task_failed, &err) != 0) {
        if (err.code == TM_ADMIN_E_TIMEOUT)
            fprintf(stderr, "taskmill: no reply from task '%s' within %s s; "
                    "the request %s stays queued and will run, but its "
                    "result is lost\n", t->name, wait_text, id);
        else
            fprintf(stderr, "taskmill: emit --wait to '%s' failed: %s\n",
                    t->queue, err.msg);
        goto out;
    }
    printf("%s\n", reply);
    if (task_failed)
        fprintf(stderr, "taskmill: task '%s' failed on request %s; its "
                "error is printed above\n", t->name, id);
    else
        status = TM_EXIT_OK;
out:
    tm_free(reply);
    return status;
}

int tm_cli_emit(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    int status = TM_EXIT_USAGE;
    struct tm_broker *b = NULL;
    struct tm_otel *otel = NULL;
    char *body = NULL;
    size_t len = 0;
    int priority;
    int64_t wait_ms, due_ms;
    if (a->npos != 2) {
        tm_cli_usage_error("emit needs TASK and a JSON body (or - to read "
                           "it from standard input)");
        goto out;
    }
    const struct tm_cfg_task *t = tm_cli_find_task(cfg, a->pos[0]);
    if (t == NULL)
        goto out;
    status = emit_options(cfg, t, a, &priority, &wait_ms, &due_ms);
    if (status != 0)
        goto out;
    if (a->dedup_key != NULL && dedup_key_bad(a->dedup_key)) {
        status = TM_EXIT_USAGE;
        goto out;
    }
    const struct tm_pub pub = { priority, a->dedup_key, NULL };
    status = tm_cli_body(a->pos[1], t, /* enforce_max = */ 1, &body, &len);
    if (status != 0)
        goto out;
    status = TM_EXIT_USAGE;
    if (tm_cli_check_body(body, len) != 0)
        goto out;
    b = tm_cli_broker(cfg);
    if (b == NULL)
        goto out;
    if (wait_ms > 0) {
        status = emit_request(b, t, body, len, &pub, wait_ms, a->wait);
        goto out;
    }
    char id[128];
    struct tm_admin_err err;
    /* with telemetry, the send's span (exported before exit, bounded) */
    char oerr[512];
    otel = tm_otel_new(cfg, oerr, sizeof oerr);
    if (otel == NULL && oerr[0] != '\0')
        fprintf(stderr, "taskmill: no trace of this send: %s\n", oerr);
    if (tm_admin_emit_traced(otel, b, t, body, len, &pub, due_ms, id,
                             sizeof id, &err) != 0) {
        fprintf(stderr, "taskmill: emit to '%s' failed: %s\n", t->queue,
                err.msg);
        status = TM_EXIT_FAIL;
        goto out;
    }
    printf("%s\n", id);
    status = TM_EXIT_OK;
out:
    tm_otel_free(otel, TM_CLI_OTEL_FLUSH_MS);
    tm_cli_broker_close(b);
    tm_free(body);
    tm_cfg_free(cfg);
    return status;
}

/* invoke_run runs body once through task ti's plugin, in this process,
 * and prints the outcome. Returns the exit status. */
static int invoke_run(struct tm_task *tasks, size_t ti, const char *body,
                      size_t len)
{
    struct tm_task *task = &tasks[ti];
    const struct tm_task_plugin *d = &task->plugin->desc;
    void *wdata = NULL;
    if (d->cb_worker_init != NULL &&
        d->cb_worker_init(task->plugin->task_data, &wdata) != 0) {
        fprintf(stderr, "taskmill: task '%s': worker init failed\n",
                task->cfg->name);
        return TM_EXIT_FAIL;
    }
    struct tm_batch *batch = tm_batch_new(1);
    struct tm_msg *m = &batch->msgs[0];
    m->task = task;
    m->task_index = ti;
    m->id = "invoke-1";
    m->id_len = strlen(m->id);
    m->body = body;
    m->body_len = len;
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
    int status = m->outcome == TM_OUT_SUCCESS ? TM_EXIT_OK : TM_EXIT_FAIL;
    tm_msg_release(m);
    return status;
}

int tm_cli_invoke(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    int status = TM_EXIT_USAGE;
    struct tm_task *tasks = NULL;
    char *body = NULL;
    size_t len = 0;
    if (a->npos != 2) {
        tm_cli_usage_error("invoke needs TASK and a JSON body (or - to read "
                           "it from standard input)");
        goto out;
    }
    const struct tm_cfg_task *t = tm_cli_find_task(cfg, a->pos[0]);
    if (t == NULL)
        goto out;
    /* an argument over max_payload runs into the task's own check, as a
     * delivered message would; standard input is read up to the limit */
    status = tm_cli_body(a->pos[1], t, /* enforce_max = */ 0, &body, &len);
    if (status != 0)
        goto out;
    tasks = tm_calloc(cfg->ntasks, sizeof *tasks);
    char err[1024];
    if (tm_tasks_load(cfg, tasks, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        status = TM_EXIT_USAGE;
        goto out;
    }
    status = invoke_run(tasks, (size_t)(t - cfg->tasks), body, len);
out:
    if (tasks != NULL) {
        tm_tasks_unload(tasks, cfg->ntasks);
        tm_free(tasks);
    }
    tm_free(body);
    tm_cfg_free(cfg);
    return status;
}
