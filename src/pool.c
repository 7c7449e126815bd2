/* pool.c - choosing a pool kind. */
#include "pool.h"

#include <stddef.h>

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
