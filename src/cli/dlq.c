/* dlq.c - `taskmill dlq`: list, show, replay and purge dead letters. */
#include "cli.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "util/util.h"

/* Spaces per level of the JSON that `dlq show` prints. */
#define TM_CLI_JSON_INDENT 2

/* print_scalar prints one JSON value without line breaks (a string key
 * too, through a temporary string item). */
static void print_scalar(const cJSON *item)
{
    char *s = cJSON_PrintUnformatted(item);
    fputs(s != NULL ? s : "null", stdout);
    cJSON_free(s);
}

/* print_json prints item with TM_CLI_JSON_INDENT spaces per level of
 * depth, as people read JSON (cJSON_Print would indent with tabs). */
static void print_json(const cJSON *item, int depth)
{
    int container = cJSON_IsObject(item) || cJSON_IsArray(item);
    if (!container || item->child == NULL) {
        print_scalar(item);
        return;
    }
    int obj = cJSON_IsObject(item);
    putchar(obj ? '{' : '[');
    for (const cJSON *c = item->child; c != NULL; c = c->next) {
        printf("\n%*s", (depth + 1) * TM_CLI_JSON_INDENT, "");
        if (obj) {
            cJSON *key = cJSON_CreateString(c->string != NULL ? c->string
                                                              : "");
            print_scalar(key);
            cJSON_Delete(key);
            fputs(": ", stdout);
        }
        print_json(c, depth + 1);
        if (c->next != NULL)
            putchar(',');
    }
    printf("\n%*s%c", depth * TM_CLI_JSON_INDENT, "", obj ? '}' : ']');
}

/* print_entry prints one dead letter as JSON: failed_at in RFC 3339, the
 * body as JSON when it is JSON, else as a string. */
static void print_entry(const struct tm_dlq_entry *e)
{
    char when[48];
    tm_rfc3339(e->failed_at, when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", e->id);
    cJSON_AddStringToObject(o, "origin_id", e->origin_id ? e->origin_id : "");
    cJSON_AddStringToObject(o, "task", e->task ? e->task : "");
    cJSON_AddStringToObject(o, "error", e->error ? e->error : "");
    cJSON_AddNumberToObject(o, "attempts", (double)e->attempts);
    cJSON_AddStringToObject(o, "failed_at", when);
    cJSON *body = e->body ? cJSON_Parse(e->body) : NULL;
    if (body != NULL)
        cJSON_AddItemToObject(o, "body", body);
    else
        cJSON_AddStringToObject(o, "body", e->body ? e->body : "");
    print_json(o, 0);
    putchar('\n');
    cJSON_Delete(o);
}

/* no_entry says that t has no dead letter id: the CLI's wording of
 * TM_ADMIN_E_NO_ENTRY. */
static int no_entry(const struct tm_cfg_task *t, const char *id)
{
    fprintf(stderr, "taskmill: no entry '%s' in '%s'\n", id,
            t->dead_letter);
    return TM_EXIT_FAIL;
}

/* list_task prints task t's dead letters, newest first, one per line:
 * id, original id, attempts, failed_at (RFC 3339), error. */
static int list_task(struct tm_broker *b, const struct tm_cfg_task *t,
                     const struct tm_dlq_filter *f)
{
    struct tm_dlq_entry *e = NULL;
    size_t n = 0;
    struct tm_admin_err err;
    if (tm_admin_dlq_list(b, t, TM_ADMIN_DLQ_LIST_MAX, f, &e, &n,
                          &err) != 0) {
        fprintf(stderr, "taskmill: dlq list: %s\n", err.msg);
        return TM_EXIT_FAIL;
    }
    for (size_t i = 0; i < n; i++) {
        char when[48];
        tm_rfc3339(e[i].failed_at, when, sizeof when);
        printf("%s\t%s\t%ld\t%s\t%s\n", e[i].id,
               e[i].origin_id ? e[i].origin_id : "-", e[i].attempts, when,
               e[i].error ? e[i].error : "");
    }
    tm_dlq_entries_free(e, n);
    return TM_EXIT_OK;
}

/* list_all prints one line per task: name, dead-letter queue, count. */
static int list_all(struct tm_broker *b, const struct tm_cfg *cfg)
{
    int status = TM_EXIT_OK;
    struct tm_admin_err err;
    for (size_t i = 0; i < cfg->ntasks; i++) {
        const struct tm_cfg_task *t = &cfg->tasks[i];
        long long n = 0;
        if (tm_admin_dlq_count(b, i, &n, &err) != 0) {
            fprintf(stderr, "taskmill: dlq list: task '%s': %s\n", t->name,
                    err.msg);
            status = TM_EXIT_FAIL;
            break;
        }
        printf("%s\t%s\t%lld\n", t->name, t->dead_letter, n);
    }
    tm_admin_depth_close(b);
    return status;
}

/* show prints the entry id of task t as JSON: found in the whole list,
 * as `dlq list TASK` reads it. */
static int show(struct tm_broker *b, const struct tm_cfg_task *t,
                const char *id)
{
    struct tm_dlq_entry *e = NULL;
    size_t n = 0;
    int found = 0;
    struct tm_admin_err err;
    if (tm_admin_dlq_list(b, t, TM_ADMIN_DLQ_LIST_MAX, NULL, &e, &n,
                          &err) != 0) {
        fprintf(stderr, "taskmill: dlq show: %s\n", err.msg);
        return TM_EXIT_FAIL;
    }
    for (size_t i = 0; i < n && !found; i++) {
        if (strcmp(e[i].id, id) == 0) {
            print_entry(&e[i]);
            found = 1;
        }
    }
    tm_dlq_entries_free(e, n);
    return found ? TM_EXIT_OK : no_entry(t, id);
}

/* move replays or purges one entry (id) or all that f matches (id
 * NULL). */
static int move(struct tm_broker *b, const struct tm_cfg_task *t,
                const char *op, const char *id, const struct tm_dlq_filter *f)
{
    int replay = strcmp(op, "replay") == 0;
    long n = 0;
    struct tm_admin_err err;
    if (tm_admin_dlq_move(b, t, replay ? TM_ADMIN_REPLAY : TM_ADMIN_PURGE,
                          id, f, &n, &err) != 0) {
        if (err.code == TM_ADMIN_E_NO_ENTRY)
            return no_entry(t, id);
        fprintf(stderr, "taskmill: dlq %s: %s\n", op, err.msg);
        return TM_EXIT_FAIL;
    }
    printf("%s %ld message%s\n", replay ? "replayed" : "purged", n,
           n == 1 ? "" : "s");
    return TM_EXIT_OK;
}

int tm_cli_dlq(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    static const char *const actions[] = {"list", "show", "replay",
                                          "purge"};
    int status = TM_EXIT_USAGE;
    struct tm_broker *b = NULL;
    const char *op = a->npos >= 1 ? a->pos[0] : NULL;
    int known = 0;
    for (size_t i = 0; op != NULL && i < sizeof actions / sizeof *actions;
         i++)
        known |= strcmp(op, actions[i]) == 0;
    if (!known) {
        if (op == NULL)
            tm_cli_usage_error("dlq needs an action: list, show, replay or "
                               "purge");
        else
            tm_cli_usage_error("unknown dlq action '%s'; expected list, "
                               "show, replay or purge", op);
        goto out;
    }
    int list = strcmp(op, "list") == 0, is_show = strcmp(op, "show") == 0;
    int max_pos = list ? 2 : 3, min_pos = list ? 1 : is_show ? 3 : 2;
    if (a->npos < min_pos || a->npos > max_pos) {
        tm_cli_usage_error("%s", list ? "dlq list takes at most a TASK"
                                 : is_show ? "dlq show needs TASK and a "
                                             "dead-letter ID"
                                           : "dlq replay and purge need "
                                             "TASK and an optional ID");
        goto out;
    }
    const struct tm_cfg_task *t = NULL;
    if (a->npos >= 2) {
        t = tm_cli_find_task(cfg, a->pos[1]);
        if (t == NULL)
            goto out;
    }
    const char *id = a->npos == 3 ? a->pos[2] : NULL;
    /* every action but list names a task (min_pos >= 2) */
    assert(t != NULL || list);
    int filtered = a->grep != NULL || a->since != NULL || a->until != NULL;
    if (filtered && (is_show || t == NULL || id != NULL)) {
        tm_cli_usage_error("--grep, --since and --until narrow dlq list "
                           "TASK, replay TASK and purge TASK (no ID)");
        goto out;
    }
    struct tm_dlq_filter f;
    struct tm_admin_err ferr;
    if (tm_admin_dlq_filter(a->grep, a->since, a->until, &f, &ferr) != 0) {
        tm_cli_usage_error("%s", ferr.msg);
        goto out;
    }
    if (strcmp(op, "purge") == 0 && id == NULL && !a->yes &&
        isatty(STDIN_FILENO)) {
        fprintf(stderr, "taskmill: dlq purge without an ID deletes every "
                "dead letter of task '%s' (%s)%s; run it again with --yes to "
                "confirm\n", t->name, t->dead_letter,
                a->grep != NULL || a->since != NULL || a->until != NULL
                    ? " that the filter matches"
                    : "");
        goto out;
    }
    b = tm_cli_broker(cfg);
    if (b == NULL)
        goto out;
    if (list && t == NULL)
        status = list_all(b, cfg);
    else if (list)
        status = list_task(b, t, &f);
    else if (is_show)
        status = show(b, t, id);
    else
        status = move(b, t, op, id, &f);
out:
    tm_cli_broker_close(b);
    tm_cfg_free(cfg);
    return status;
}
