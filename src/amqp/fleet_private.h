/* fleet_private.h - the fleet on RabbitMQ (fleet.c): the hooks of
 * struct tm_broker_fleet_ops (broker.h) that adapter.c puts in its
 * table. */
#ifndef TASKMILL_AMQP_FLEET_PRIVATE_H
#define TASKMILL_AMQP_FLEET_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"

int tm_amqp_fleet_announce(struct tm_broker *b, const char *instance,
                           const char *json, size_t len);
int tm_amqp_fleet_leave(struct tm_broker *b, const char *instance);
int tm_amqp_fleet_list(struct tm_broker *b, char ***out, size_t *n);
int tm_amqp_fleet_hist_read(struct tm_broker *b, const char *task,
                            int hourly, int64_t first, size_t n,
                            uint64_t (*out)[TM_HK_N]);
int tm_amqp_fleet_serve(struct tm_broker *b, const char *self,
                        int64_t timeout_ms,
                        void (*answer)(void *ctx, const char *task,
                                       int hourly, int64_t first, size_t n,
                                       uint64_t (*out)[TM_HK_N]),
                        void *ctx);

#endif /* TASKMILL_AMQP_FLEET_PRIVATE_H */
