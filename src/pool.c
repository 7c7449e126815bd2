/* pool.c - choosing a pool kind. */
#include "pool.h"

#include <stddef.h>

#include "util.h"

const struct tm_pool_ops *tm_pool_ops_for(enum tm_pool_kind kind)
{
    switch (kind) {
    case TM_POOL_THREAD:
        return &tm_pool_thread_ops;
    case TM_POOL_FORK:
        return &tm_pool_fork_ops;
    }
    return NULL;
}

size_t tm_pool_stuck_runs(struct tm_pool *p, struct tm_pool_stuck **out)
{
    *out = NULL;
    if (p == NULL || p->ops->stuck == NULL)
        return 0;
    size_t n = p->ops->stuck(p, NULL, 0);
    if (n == 0)
        return 0;
    /* room for a few more that may become stuck meanwhile */
    size_t room = n + 8;
    *out = tm_calloc(room, sizeof **out);
    n = p->ops->stuck(p, *out, room);
    return n < room ? n : room;
}
