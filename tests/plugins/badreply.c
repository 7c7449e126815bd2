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
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <taskmill.h>

#include "fork/wire.h"

/* reply_fd finds the worker's socket: the one connected, unnamed
 * AF_UNIX stream socket the process has (the broker's are TCP). */
static int reply_fd(void)
{
    for (int fd = 3; fd < 1024; fd++) {
        int v = 0;
        socklen_t len = sizeof v;
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) != 0 ||
            v != AF_UNIX)
            continue;
        len = sizeof v;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) != 0 ||
            v != SOCK_STREAM)
            continue;
        struct sockaddr_un a;
        socklen_t alen = sizeof a;
        if (getpeername(fd, (struct sockaddr *)&a, &alen) != 0 ||
            alen > sizeof(sa_family_t))
            continue;
        return fd;
    }
    return -1;
}

static int mode_is(const char *body, const char *mode)
{
    char want[64];
    size_t n = strlen(mode);
    if (n + 12 > sizeof want)
        return 0;
    memcpy(want, "\"mode\":\"", 8);
    memcpy(want + 8, mode, n);
    memcpy(want + 8 + n, "\"", 2);
    return strstr(body, want) != NULL;
}

static int cb_run(struct tm_call *call)
{
    struct tm_fork_resp rs;
    memset(&rs, 0, sizeof rs);
    rs.magic = TM_FORK_MAGIC_RESP;
    const void *frame = &rs;
    size_t len = sizeof rs;
    static const char garbage[] = "HTTP/1.1 200 OK\r\n\r\nnot a frame at all";
    if (mode_is(call->body, "outcome")) {
        rs.outcome = 77;
    } else if (mode_is(call->body, "huge")) {
        rs.outcome = 1;
        rs.error_len = UINT32_MAX;
    } else if (mode_is(call->body, "garbage")) {
        frame = garbage;
        len = sizeof garbage - 1;
    } else {
        return TM_TASK_OK;
    }
    int fd = reply_fd();
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
