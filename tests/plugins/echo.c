/* echo.c - test plugin: the result is the body itself, whatever its size.
 * A body {"pad":"xxx...x"} is checked first: anything but x's between the
 * quotes (bytes lost, moved or zeroed on the way) is an error. With the
 * fork pool, bodies and results larger than the shared rings take the
 * socket (fork/ring.h). */
#include <string.h>

#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    static const char pad[] = "{\"pad\":\"";
    const char *b = call->body;
    size_t n = call->body_len;
    if (b == NULL || strlen(b) != n) {
        tm_error(call, "no body, or a NUL byte inside it");
        return TM_TASK_ERROR;
    }
    if (n >= sizeof pad + 1 && memcmp(b, pad, sizeof pad - 1) == 0) {
        if (memcmp(b + n - 2, "\"}", 2) != 0) {
            tm_error(call, "the padded body does not end as sent");
            return TM_TASK_ERROR;
        }
        for (size_t i = sizeof pad - 1; i < n - 2; i++) {
            if (b[i] != 'x') {
                tm_error(call, "the padded body changed on its way");
                return TM_TASK_ERROR;
            }
        }
    }
    /* tm_result copies a NUL-terminated text: the body is one */
    return tm_result(call, b) == 0 ? TM_TASK_OK : TM_TASK_ERROR;
}

TM_TASK_DECLARE(
    .name = "test-echo",
    .version = "0.0.1",
    .description = "test plugin: the body is the result",
    .cb_run = cb_run,
)
