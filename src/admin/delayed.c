/* delayed.c - delayed messages: a page, run one now, delete one. */
#include "admin/admin.h"

#include <string.h>

int tm_admin_delayed_id_ok(const char *id, size_t idmax)
{
    /* the printable ASCII of a RabbitMQ dead-letter id */
    return tm_admin_dlq_id_ok(TM_BROKER_AMQP, id, idmax);
}

/* no_delayed refuses what b cannot do with its delayed messages. */
static int no_delayed(struct tm_broker *b, const char *what,
                      struct tm_admin_err *e)
{
    tm_admin_error(e, TM_ADMIN_E_NO_DELAY, "the %s broker cannot %s",
                   b->ops->kind, what);
    return -1;
}

int tm_admin_delayed_page(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *after, size_t max, size_t body_max,
                          size_t bytes_max, struct tm_delayed_entry **out,
                          size_t *n, int *more, struct tm_admin_err *e)
{
    *out = NULL;
    *n = 0;
    *more = 0;
    if (b->ops->admin->delayed_browse == NULL)
        return no_delayed(b, "list delayed messages", e);
    struct tm_dlq_query q = {.after = after,
                             .max = max,
                             .body_max = body_max,
                             .bytes_max = bytes_max};
    if (b->ops->admin->delayed_browse(b, t, &q, out, n, more) != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    return 0;
}

int tm_admin_delayed_take(struct tm_broker *b, const struct tm_cfg_task *t,
                          const char *id, int run_now,
                          struct tm_admin_err *e)
{
    if (b->ops->admin->delayed_take == NULL)
        return no_delayed(b, run_now ? "run a delayed message now"
                                     : "delete a delayed message", e);
    int took = b->ops->admin->delayed_take(b, t, id, run_now);
    if (took < 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    if (took == 0) {
        tm_admin_error(e, TM_ADMIN_E_NO_DELAYED, "no delayed message '%s' "
                       "waits in task '%s'", id, t->name);
        return -1;
    }
    return 0;
}
