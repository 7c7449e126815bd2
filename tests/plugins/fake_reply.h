/* fake_reply.h - what the test plugins that fake a fork-pool worker's
 * answers (badreply.c, ringkill.c) share: finding the socket the worker
 * process answers its parent on, and reading the body's "mode".
 *
 * Included by test plugins only. It is a header, not a .c file, so the
 * Makefile's test plugin rule (every .c file of tests/plugins is one
 * plugin) does not build it as a plugin of its own. Every function is
 * static inline: a plugin that uses only one of them compiles cleanly. */
#ifndef TASKMILL_TEST_FAKE_REPLY_H
#define TASKMILL_TEST_FAKE_REPLY_H

#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

/* tm_fake_reply_fd finds the worker's socket: the one connected,
 * unnamed AF_UNIX stream socket the process has (the broker's are TCP).
 * Returns it, or -1 when there is none (not in a fork-pool worker). */
static inline int tm_fake_reply_fd(void)
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

/* tm_fake_mode_is: body holds "mode":"MODE" (written without spaces, as
 * the tests send it). */
static inline int tm_fake_mode_is(const char *body, const char *mode)
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

#endif /* TASKMILL_TEST_FAKE_REPLY_H */
