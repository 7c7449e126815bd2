/* traceparent.c - test plugin: answers the run's trace context,
 * {"tp": "<traceparent>"} (tm_traceparent), or {"tp": null} without one. */
#include <stdio.h>

#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    const char *tp = tm_traceparent(call);
    char out[128];
    if (tp != NULL)
        snprintf(out, sizeof out, "{\"tp\":\"%s\"}", tp);
    else
        snprintf(out, sizeof out, "{\"tp\":null}");
    return tm_result(call, out) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
}

TM_TASK_DECLARE(.name = "test-traceparent", .version = "1.0",
                .cb_run = cb_run);
