/* dlq.c - dead letters: list, a page, one entry, replay, purge, count,
 * each list and bulk action narrowed by a filter (struct tm_dlq_filter). */
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

/* read_time reads one bound of a filter (what: its name). */
static int read_time(const char *what, const char *s, int64_t *ms,
                     struct tm_admin_err *e)
{
    if (s == NULL)
        return 0;
    if (tm_parse_at(s, ms) != 0) {
        tm_admin_error(e, TM_ADMIN_E_FILTER, "%s: expected an RFC 3339 "
                       "time with a zone (2026-12-01T03:00:00Z) or epoch "
                       "milliseconds, not '%.64s'", what, s);
        return -1;
    }
    return 0;
}

int tm_admin_dlq_filter(const char *text, const char *since,
                        const char *until, struct tm_dlq_filter *f,
                        struct tm_admin_err *e)
{
    struct tm_dlq_filter all = TM_DLQ_FILTER_ALL;
    *f = all;
    if (text != NULL && strlen(text) > TM_ADMIN_DLQ_TEXT_MAX) {
        tm_admin_error(e, TM_ADMIN_E_FILTER, "q: the text searched for is "
                       "over %d bytes", TM_ADMIN_DLQ_TEXT_MAX);
        return -1;
    }
    f->text = text != NULL && text[0] != '\0' ? text : NULL;
    if (read_time("since", since, &f->since, e) != 0 ||
        read_time("until", until, &f->until, e) != 0)
        return -1;
    return 0;
}

int tm_admin_dlq_list(struct tm_broker *b, const struct tm_cfg_task *t,
                      size_t max, const struct tm_dlq_filter *f,
                      struct tm_dlq_entry **out, size_t *n,
                      struct tm_admin_err *e)
{
    *out = NULL;
    *n = 0;
    if (b->ops->admin->dlq_list(b, t, max, out, n) != 0) {
        tm_admin_error(e, TM_ADMIN_E_BROKER, "%s", b->errstr);
        return -1;
    }
    if (!tm_dlq_filter_set(f))
        return 0;
    /* keep the matching entries, in order, at the front */
    size_t k = 0;
    for (size_t i = 0; i < *n; i++) {
        struct tm_dlq_entry *x = &(*out)[i];
        if (tm_dlq_filter_match(f, x->error, x->body,
                                x->body != NULL ? strlen(x->body) : 0,
                                x->failed_at))
            (*out)[k++] = *x;
        else
            tm_dlq_entries_free_one(x);
    }
    *n = k;
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
                      const struct tm_dlq_filter *f,
                      const char *after, size_t max, size_t body_max,
                      size_t bytes_max, struct tm_dlq_entry **out,
                      size_t *n, int *more, struct tm_admin_err *e)
{
    struct tm_dlq_query q = {.after = after,
                             .max = max,
                             .body_max = body_max,
                             .bytes_max = bytes_max,
                             .filter = tm_dlq_filter_set(f) ? f : NULL};
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
                      enum tm_admin_move how, const char *id,
                      const struct tm_dlq_filter *f, long *n,
                      struct tm_admin_err *e)
{
    if (id != NULL || !tm_dlq_filter_set(f))
        f = NULL;
    *n = how == TM_ADMIN_REPLAY ? b->ops->admin->dlq_replay(b, t, id, f)
                                : b->ops->admin->dlq_purge(b, t, id, f);
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
    if (tm_admin_dlq_list(b, &b->cfg->tasks[i], TM_ADMIN_DLQ_LIST_MAX, NULL,
                          &list, &k, e) != 0)
        return -1;
    tm_dlq_entries_free(list, k);
    *n = (long long)k;
    return 0;
}
