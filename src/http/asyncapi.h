/* asyncapi.h - the AsyncAPI 3.0.0 document of the running task map. */
#ifndef TASKMILL_HTTP_ASYNCAPI_H
#define TASKMILL_HTTP_ASYNCAPI_H

#include <stddef.h>

#include "config/config.h"
#include "task/task.h"

/*
 * tm_asyncapi_render describes the tasks as an AsyncAPI 3.0.0 document:
 * info (title "taskmill", the daemon's version), one server for the broker
 * (host and port without credentials, protocol redis/amqp/amqps), one
 * channel per task (address = its queue, message payload = the plugin's
 * request schema, or any JSON object when it declares none), one receive
 * operation per task, and a reply (its own channel and message) carrying
 * the response schema where the plugin declares one and the broker
 * adapter has request/reply. Messages and their payloads are named after
 * the task (task "send_mail": SendMailRequest, SendMailResponse; nested
 * object schemas SendMailRequestAddress, ...), so that code generators
 * produce types with those names. cfg and tasks are borrowed. Returns the JSON text in a new buffer (caller frees with
 * tm_free) of *len bytes.
 */
char *tm_asyncapi_render(const struct tm_cfg *cfg, const struct tm_task *tasks,
                         size_t ntasks, size_t *len);

#endif /* TASKMILL_HTTP_ASYNCAPI_H */
