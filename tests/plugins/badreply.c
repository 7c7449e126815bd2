/* badreply.c - test plugin for the fork pool: task code that corrupts
 * its process's conversation with the parent. It finds the socket its
 * worker process answers on and writes a crafted reply frame there before
 * returning normally. Body {"mode": M}:
 *   "outcome"  a frame whose outcome is no outcome (77)
 *   "huge"     a frame announcing a 4 GiB error text
 *   "garbage"  bytes that are no frame at all
 *   "ok"       writes nothing
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <taskmill.h>

#include "fake_reply.h"
#include "fork/wire.h"

static int cb_run(struct tm_call *call)
{
    struct tm_fork_resp rs;
    memset(&rs, 0, sizeof rs);
    rs.magic = TM_FORK_MAGIC_RESP;
    const void *frame = &rs;
    size_t len = sizeof rs;
    static const char garbage[] = "HTTP/1.1 200 OK\r\n\r\nnot a frame at all";
    if (tm_fake_mode_is(call->body, "outcome")) {
        rs.outcome = 77;
    } else if (tm_fake_mode_is(call->body, "huge")) {
        rs.outcome = 1;
        rs.error_len = UINT32_MAX;
    } else if (tm_fake_mode_is(call->body, "garbage")) {
        frame = garbage;
        len = sizeof garbage - 1;
    } else {
        return TM_TASK_OK;
    }
    int fd = tm_fake_reply_fd();
    if (fd < 0) {
        tm_error(call, "no reply socket found");
        return TM_TASK_REJECT;
    }
    if (write(fd, frame, len) != (ssize_t)len) {
        tm_error(call, "short write");
        return TM_TASK_REJECT;
    }
    return TM_TASK_OK;
}

TM_TASK_DECLARE(
    .name = "test-badreply",
    .version = "0.0.1",
    .description = "test plugin: writes corrupt reply frames",
    .cb_run = cb_run,
)
