/* amqp/nodes.c - the nodes of a RabbitMQ cluster: which one to connect to. */
#include "amqp.h"

#include <assert.h>

#include "util/log.h"

/* tm_amqp_node returns the index in ab->nodes of the node a new
 * connection goes to. */
size_t tm_amqp_node(const struct tm_amqp_broker *ab)
{
    int i = atomic_load(&ab->base.node);
    assert(i >= 0 && (size_t)i < ab->nnodes);
    return (size_t)i;
}

/*
 * tm_amqp_node_failed tells that a connection to node i could not be
 * made: every connection moves on to the next node, unless another one
 * moved already (a compare-and-swap, so that the connections failing
 * together on a dead node move once, not once each). One node per
 * attempt: the callers' backoff and jitter space the attempts, and a
 * dead node costs at most one connect timeout per attempt.
 */
void tm_amqp_node_failed(struct tm_amqp_broker *ab, size_t i,
                         const char *why)
{
    if (ab->nnodes < 2)
        return;
    int from = (int)i, to = (int)((i + 1) % ab->nnodes);
    if (atomic_compare_exchange_strong(&ab->base.node, &from, to))
        tm_log_warn(TM_AMQP_SRC, "%s; moving to node %s", why,
                    ab->nodes[to].redacted);
}

/* tm_amqp_heartbeat_s is the heartbeat of the consuming and publishing
 * connections, in seconds (broker.amqp.heartbeat; 0 = none). */
int tm_amqp_heartbeat_s(const struct tm_amqp_broker *ab)
{
    return (int)(ab->base.cfg->amqp_heartbeat_ms / 1000);
}
