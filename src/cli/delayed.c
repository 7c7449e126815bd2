/* delayed.c - `taskmill delayed`: list a task's delayed messages, run one
 * now, delete one. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#include "admin/admin.h"
#include "broker/broker.h"
#include "util/util.h"

/* Entries one page of the list reads; the list reads every page. */
#define TM_CLI_DELAYED_PAGE 1000
/* Bodies are printed whole up to this size (the longest max_payload). */
#define TM_CLI_DELAYED_BODY_MAX ((size_t)1 << 30)

/* list prints t's delayed messages, soonest first, one a line: id, due
 * (RFC 3339), body. */
static int list(struct tm_broker *b, const struct tm_cfg_task *t)
{
    char after[TM_ADMIN_DLQ_TEXT_MAX + 1] = "";
    for (;;) {
        struct tm_delayed_entry *e = NULL;
        size_t n = 0;
        int more = 0;
        struct tm_admin_err err;
        if (tm_admin_delayed_page(b, t, after[0] != '\0' ? after : NULL,
                                  TM_CLI_DELAYED_PAGE,
                                  TM_CLI_DELAYED_BODY_MAX, SIZE_MAX, &e, &n,
                                  &more, &err) != 0) {
            fprintf(stderr, "taskmill: delayed list: %s\n", err.msg);
            return TM_EXIT_FAIL;
        }
        for (size_t i = 0; i < n; i++) {
            char when[48];
            tm_rfc3339(e[i].due_ms, when, sizeof when);
            printf("%s\t%s\t%s\n", e[i].id, when, e[i].body);
        }
        if (n > 0)
            tm_snprintf(after, sizeof after, "%s", e[n - 1].id);
        tm_delayed_entries_free(e, n);
        if (!more || n == 0)
            return TM_EXIT_OK;
    }
}

/* take runs delayed message id of t now, or deletes it. */
static int take(struct tm_broker *b, const struct tm_cfg_task *t,
                const char *id, int run_now)
{
    struct tm_admin_err err;
    if (tm_admin_delayed_take(b, t, id, run_now, &err) != 0) {
        fprintf(stderr, "taskmill: delayed %s: %s\n",
                run_now ? "run-now" : "delete", err.msg);
        return TM_EXIT_FAIL;
    }
    printf("%s delayed message %s\n", run_now ? "running" : "deleted", id);
    return TM_EXIT_OK;
}

int tm_cli_delayed(struct tm_cfg *cfg, const struct tm_cli_args *a)
{
    int status = TM_EXIT_USAGE;
    struct tm_broker *b = NULL;
    const char *op = a->npos >= 1 ? a->pos[0] : "";
    int is_list = strcmp(op, "list") == 0;
    int run_now = strcmp(op, "run-now") == 0;
    if (!is_list && !run_now && strcmp(op, "delete") != 0) {
        tm_cli_usage_error("delayed needs an action: list, run-now or "
                           "delete");
        goto out;
    }
    if (a->npos != (is_list ? 2 : 3)) {
        tm_cli_usage_error("%s", is_list ? "delayed list needs a TASK"
                                         : "delayed run-now and delete need "
                                           "TASK and ID");
        goto out;
    }
    const struct tm_cfg_task *t = tm_cli_find_task(cfg, a->pos[1]);
    if (t == NULL)
        goto out;
    if (!is_list && !tm_admin_delayed_id_ok(a->pos[2], TM_ADMIN_DLQ_TEXT_MAX)) {
        tm_cli_usage_error("'%s' is not a delayed message id", a->pos[2]);
        goto out;
    }
    b = tm_cli_broker(cfg);
    if (b == NULL) {
        status = TM_EXIT_FAIL;
        goto out;
    }
    status = is_list ? list(b, t) : take(b, t, a->pos[2], run_now);
out:
    tm_cli_broker_close(b);
    tm_cfg_free(cfg);
    return status;
}
