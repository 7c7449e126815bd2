/* sleep.c - example task: {"ms": int} sleeps that long, then succeeds. */
/* Feature-test macro first: nanosleep() is POSIX, hidden by -std=c11. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <taskmill.h>

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* SLEEP_SLICE_MS is how often a sleep checks should_stop(): short enough
 * that a timeout or shutdown cuts it promptly, long enough to cost
 * nothing. */
#define SLEEP_SLICE_MS 10

/* SLEEP_MAX_MS caps a request (one day) so a typo cannot park a worker
 * for years. */
#define SLEEP_MAX_MS 86400000

/* nap sleeps ms milliseconds, resuming after signals. */
static void nap(int64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cb_run(struct tm_call *call)
{
    int64_t ms = 0; /* set on TM_JSON_OK; -O1 cannot see it */

    switch (tm_json_get_int_range(call->host, call->body, "ms", 0,
                                  SLEEP_MAX_MS, &ms)) {
    case TM_JSON_OK:
        break;
    case TM_JSON_ABSENT:
        tm_error(call, "field 'ms' is missing");
        return TM_TASK_REJECT;
    case TM_JSON_BAD_TEXT:
        tm_error(call, "body is not a JSON object with unique keys");
        return TM_TASK_REJECT;
    default:
        tm_error(call, "field 'ms' is not an integer from 0 to 86400000");
        return TM_TASK_REJECT;
    }

    const struct tm_host *host = call->host;
    int64_t end = host->now_ms() + ms;
    for (;;) {
        int64_t left = end - host->now_ms();
        if (left <= 0)
            break;
        if (host->should_stop(call)) {
            tm_error(call, "interrupted");
            return TM_TASK_ERROR;
        }
        nap(left < SLEEP_SLICE_MS ? left : SLEEP_SLICE_MS);
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "sleep",
    .version = "1.0.0",
    .description = "Sleeps {\"ms\": N} milliseconds, then succeeds; stops "
                   "early with an error when the run's deadline passes "
                   "or the daemon abandons it.",
    .request_schema =
        "{\"type\":\"object\","
        "\"properties\":{"
        "\"ms\":{\"type\":\"integer\",\"minimum\":0,"
        "\"maximum\":86400000,"
        "\"description\":\"milliseconds to sleep\"}},"
        "\"required\":[\"ms\"]}",
    .cb_run = cb_run,
)
