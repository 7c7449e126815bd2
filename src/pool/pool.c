/* pool.c - what every pool kind shares: the stuck runs' list. Choosing a
 * kind is the daemon's (daemon/adapters.c). */
#include "pool/pool.h"

#include <stddef.h>

#include "util/util.h"

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
