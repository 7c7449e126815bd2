/* depth.c - queue depths for monitoring (/metrics, /status, dlq list):
 * the broker seam's depth and scheduled reads, on the adapter's own
 * monitoring connection. */
#include "admin/admin.h"

int tm_admin_has_depth(const struct tm_broker *b)
{
    return b->ops->admin->depth != NULL;
}

int tm_admin_depth(struct tm_broker *b, size_t i, struct tm_admin_depth *out)
{
    struct tm_broker_depth c = {-1, -1, -1, -1, -1};
    int rc = -1;
    if (b->ops->admin->depth != NULL)
        rc = b->ops->admin->depth(b, i, &c);
    out->depth = c.depth;
    out->pending = c.pending;
    out->dlq = c.dlq;
    out->oldest_age_ms = c.oldest_age_ms;
    out->delayed_due = c.delayed_due;
    return rc;
}

long long tm_admin_scheduled(struct tm_broker *b, size_t i)
{
    long long n = -1;
    if (b->ops->admin->scheduled == NULL ||
        b->ops->admin->scheduled(b, i, &n) != 0)
        return -1;
    return n;
}

void tm_admin_depth_close(struct tm_broker *b)
{
    struct tm_broker_depth unused;
    if (b->ops->admin->depth != NULL)
        b->ops->admin->depth(b, TM_BROKER_DEPTH_CLOSE, &unused);
}
