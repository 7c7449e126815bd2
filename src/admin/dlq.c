/* dlq.c - dead letters: list, a page, one entry, replay, purge, count. */
#include "admin/admin.h"

#include <string.h>

int tm_admin_dlq_id_ok(enum tm_broker_kind kind, const char *id,
                       size_t idmax)
{
    size_t n = strlen(id);
    if (n == 0 || n > idmax)
        return 0;
    if (kind == TM_BROKER_REDIS) {
        size_t a = strspn(id, "0123456789");
        if (a == 0 || a > 20 || id[a] != '-')
            return 0;
        size_t b = strspn(id + a + 1, "0123456789");
        return b > 0 && b <= 20 && id[a + 1 + b] == '\0';
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] < 0x21 || (unsigned char)id[i] > 0x7e)
            return 0;
    return 1;
}

int tm_admin_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                      size_t max, struct tm_dlq_entry **out, size_t *n,
                      struct tm_admin_err *e)
{
    *out = NULL;
    *n = 0;
    if (b->ops->admin->dlq_list(b, t, max, out, n) != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    return 0;
}

/* browse runs one dlq_browse of q; what says what was asked, for the
 * broker without it. */
static int browse(struct tm_broker *b, const struct tm_cfg_task *t,
                  const struct tm_dlq_query *q, const char *what,
                  struct tm_dlq_entry **out, size_t *n, int *more,
                  struct tm_admin_err *e)
{
    *out = NULL;
    *n = 0;
    *more = 0;
    if (b->ops->admin->dlq_browse == NULL) {
        tm_admin_error(e, TM_ADMIN_E_NO_BROWSE, "the %s broker cannot %s",
                       b->ops->kind, what);
        return -1;
    }
    if (b->ops->admin->dlq_browse(b, t, q, out, n, more) != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    return 0;
}

int tm_admin_dlq_page(struct tm_broker *b, const struct tm_cfg_task *t,
                      const char *after, size_t max, size_t body_max,
                      size_t bytes_max, struct tm_dlq_entry **out,
                      size_t *n, int *more, struct tm_admin_err *e)
{
    struct tm_dlq_query q = {.after = after,
                             .max = max,
                             .body_max = body_max,
                             .bytes_max = bytes_max};
    return browse(b, t, &q, "page dead letters", out, n, more, e);
}

int tm_admin_dlq_get(struct tm_broker *b, const struct tm_cfg_task *t,
                     const char *id, struct tm_dlq_entry **out,
                     struct tm_admin_err *e)
{
    struct tm_dlq_query q = {.id = id, .max = 1};
    size_t n = 0;
    int more = 0;
    if (browse(b, t, &q, "read one dead letter", out, &n, &more, e) != 0)
        return -1;
    if (n == 0) {
        tm_dlq_entries_free(*out, n);
        *out = NULL;
        tm_admin_error(e, TM_ADMIN_E_NO_ENTRY, "no dead letter '%s' in "
                       "'%s'", id, t->dead_letter);
        return -1;
    }
    /* one entry asked for by its id: the broker returns at most that */
    if (n > 1) {
        for (size_t i = 1; i < n; i++)
            tm_dlq_entries_free_one(&(*out)[i]);
    }
    return 0;
}

int tm_admin_dlq_move(struct tm_broker *b, const struct tm_cfg_task *t,
                      enum tm_admin_move how, const char *id, long *n,
                      struct tm_admin_err *e)
{
    *n = how == TM_ADMIN_REPLAY ? b->ops->admin->dlq_replay(b, t, id)
                                : b->ops->admin->dlq_purge(b, t, id);
    if (*n < 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    if (id != NULL && *n == 0) {
        tm_admin_error(e, TM_ADMIN_E_NO_ENTRY, "no dead letter '%s' in "
                       "'%s'", id, t->dead_letter);
        return -1;
    }
    return 0;
}

int tm_admin_dlq_count(struct tm_broker *b, size_t i, long long *n,
                       struct tm_admin_err *e)
{
    struct tm_admin_depth d;
    if (tm_admin_depth(b, i, &d) == 0 && d.dlq >= 0) {
        *n = d.dlq;
        return 0;
    }
    struct tm_dlq_entry *list = NULL;
    size_t k = 0;
    if (tm_admin_dlq_list(b, &b->cfg->tasks[i], TM_ADMIN_DLQ_LIST_MAX, &list,
                          &k, e) != 0)
        return -1;
    tm_dlq_entries_free(list, k);
    *n = (long long)k;
    return 0;
}
