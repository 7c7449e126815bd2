/* notify.c - service manager notification: the sd_notify(3) protocol.
 *
 * Written here rather than linked from libsystemd: the protocol is one
 * datagram of "KEY=VALUE" lines to the AF_UNIX socket named in
 * $NOTIFY_SOCKET, a stable interface that systemd documents for exactly
 * this use (sd_notify(3) carries a standalone implementation to copy, and
 * HAProxy does the same). Linking libsystemd for it mapped seven more
 * libraries (libsystemd, libgcrypt, libgpg-error, liblzma, liblz4,
 * libzstd, libcap), about 0.9 MiB of each idle daemon's memory, for one
 * sendto() a few times a minute. */
#include "util/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* notify_addr fills sa from $NOTIFY_SOCKET: a path, or an abstract
 * socket name after '@'. Returns the address length, or 0 when there is
 * no usable socket (unset, empty, too long, or another family such as
 * vsock, which a daemon on the host itself is never given). */
static socklen_t notify_addr(struct sockaddr_un *sa)
{
    const char *e = getenv("NOTIFY_SOCKET");
    if (e == NULL || (e[0] != '/' && e[0] != '@'))
        return 0;
    size_t n = strlen(e);
    if (n < 2 || n > sizeof sa->sun_path)
        return 0;
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, e, n);
    if (sa->sun_path[0] == '@')
        sa->sun_path[0] = '\0'; /* abstract: no terminating NUL counts */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (e[0] == '/' && n < sizeof sa->sun_path)
        len++; /* a path is sent with its NUL, as libsystemd does */
    return len;
}

int tm_notify(const char *state)
{
    struct sockaddr_un sa;
    socklen_t len = notify_addr(&sa);
    if (len == 0)
        return 0;
    /* a fresh socket each time: the daemon notifies a few times a minute,
     * and no descriptor stays open for the fork pool's children to
     * inherit */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ssize_t n;
    do
        n = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
                   (const struct sockaddr *)&sa, len);
    while (n < 0 && errno == EINTR);
    close(fd);
    return 0;
}

int tm_notify_status(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "STATUS=");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    return tm_notify(buf);
}

int64_t tm_notify_watchdog_ms(void)
{
    /* sd_watchdog_enabled(3): WATCHDOG_USEC, meant for the process whose
     * pid WATCHDOG_PID names when that is set */
    const char *us = getenv("WATCHDOG_USEC");
    if (us == NULL || *us == '\0')
        return 0;
    const char *pid = getenv("WATCHDOG_PID");
    if (pid != NULL && *pid != '\0') {
        char *end;
        errno = 0;
        long long p = strtoll(pid, &end, 10);
        if (errno != 0 || *end != '\0' || p != (long long)getpid())
            return 0;
    }
    char *end;
    errno = 0;
    unsigned long long usec = strtoull(us, &end, 10);
    if (errno != 0 || *end != '\0' || us[0] == '-' || usec == 0)
        return 0;
    return (int64_t)(usec / 2000);
}
