/* fail.c - example task that fails on request, in every way it can. */
/* Feature-test macro first: pause() is POSIX, hidden by -std=c11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <taskmill.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Body {"mode": M}:
 *   "error"  returns TM_TASK_ERROR (the task's on_error applies)
 *   "reject" returns TM_TASK_REJECT (dead-letter now)
 *   "crash"  writes through a NULL pointer (SIGSEGV)
 *   "abort"  calls abort() (SIGABRT)
 *   "hang"   never returns and never polls should_stop(): wedged code
 *   "exit"   calls exit(3)
 * The last four take the whole process down, so use them with the fork
 * pool, where the daemon survives them.
 */

/* MODE_MAX holds the longest mode name and its NUL. */
#define MODE_MAX 16

static int mode_is(const char *mode, const char *name)
{
    return strcmp(mode, name) == 0;
}

static int cb_run(struct tm_call *call)
{
    char mode[MODE_MAX];

    switch (tm_json_get_string(call->host, call->body, "mode", mode,
                               sizeof mode)) {
    case TM_JSON_OK:
        break;
    case TM_JSON_ABSENT:
        tm_error(call, "field 'mode' is missing");
        return TM_TASK_REJECT;
    case TM_JSON_BAD_TEXT:
        tm_error(call, "body is not a JSON object with unique keys");
        return TM_TASK_REJECT;
    default: /* not a string, or longer than any mode */
        mode[0] = '\0';
        break;
    }
    if (mode_is(mode, "error")) {
        tm_error(call, "requested failure");
        return TM_TASK_ERROR;
    }
    if (mode_is(mode, "reject")) {
        tm_error(call, "requested reject");
        return TM_TASK_REJECT;
    }
    if (mode_is(mode, "crash")) {
        tm_log(call, TM_LOG_WARNING, "crashing on request");
        /* Both volatile: the pointer so the compiler cannot see it is
         * NULL, the target so the store is not dropped as dead. */
        volatile int *volatile nowhere = NULL;
        *nowhere = 1;
        return TM_TASK_ERROR; /* not reached */
    }
    if (mode_is(mode, "abort")) {
        tm_log(call, TM_LOG_WARNING, "aborting on request");
        abort();
    }
    if (mode_is(mode, "hang")) {
        tm_log(call, TM_LOG_WARNING, "hanging on request");
        for (;;)
            pause();
    }
    if (mode_is(mode, "exit")) {
        tm_log(call, TM_LOG_WARNING, "exiting with status 3 on request");
        exit(3);
    }
    tm_error(call, "unknown mode; expected \"error\", \"reject\", "
                   "\"crash\", \"abort\", \"hang\" or \"exit\"");
    return TM_TASK_REJECT;
}

TM_TASK_DECLARE(
    .name = "fail",
    .version = "1.0.0",
    .description = "Fails on request: {\"mode\": \"error\" | \"reject\" | "
                   "\"crash\" | \"abort\" | \"hang\" | \"exit\"}. For "
                   "testing failure handling.",
    .request_schema =
        "{\"type\":\"object\","
        "\"properties\":{"
        "\"mode\":{\"type\":\"string\",\"enum\":[\"error\",\"reject\","
        "\"crash\",\"abort\",\"hang\",\"exit\"],"
        "\"description\":\"how to fail\"}},"
        "\"required\":[\"mode\"]}",
    .cb_run = cb_run,
)
