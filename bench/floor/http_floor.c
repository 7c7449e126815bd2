/* http_floor.c - the idle-memory floor of serving HTTP with libmicrohttpd.
 *
 *   http_floor PORT
 *
 * Links libmicrohttpd and nothing else of taskmill's, starts it on
 * 127.0.0.1:PORT the way the daemon does (src/http/server.c: epoll, an
 * external loop calling MHD_run), answers every request 200 "pong", and
 * waits. make bench (scripts/bench/rows/pss.sh) measures its PSS next to
 * the idle daemon's, so the idle-PSS rows show how much of the daemon's
 * memory is the HTTP library's own (Debian's libmicrohttpd links GnuTLS,
 * which it initialises when it is loaded) and how much is taskmill's.
 *
 * It is built apart from the other bench programs, which link hiredis and
 * rabbitmq-c: those would be counted in the floor.
 */
#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *data_size, void **state)
{
    (void)cls, (void)url, (void)method, (void)version, (void)data;
    (void)data_size, (void)state;
    static char pong[] = "pong\n";
    struct MHD_Response *r = MHD_create_response_from_buffer(
        sizeof pong - 1, pong, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: http_floor PORT\n");
        return 2;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)atoi(argv[1]));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "http_floor: cannot listen on 127.0.0.1:%s\n",
                argv[1]);
        return 1;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
    if (info == NULL) {
        fprintf(stderr, "http_floor: no epoll descriptor\n");
        return 1;
    }
    struct pollfd p = {.fd = info->epoll_fd, .events = POLLIN};
    for (;;) {
        MHD_UNSIGNED_LONG_LONG ms = 0;
        int timeout = MHD_get_timeout(d, &ms) == MHD_YES ? (int)ms : -1;
        if (poll(&p, 1, timeout) < 0)
            continue;
        MHD_run(d);
    }
}
