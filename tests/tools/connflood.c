/* connflood.c - test tool: holds many idle and slowloris connections open
 * against an HTTP port.
 *
 *   connflood -p PORT [-a ADDR] [-i IDLE] [-s SLOW] [-t SECONDS]
 *             [-r REOPEN_MS] [-o READY_FILE]
 *
 * IDLE connections connect and send nothing. SLOW connections send a
 * request line and then one byte of a header that never ends, every
 * second (slowloris). With -r, a connection the server closes is opened
 * again REOPEN_MS later, so the pressure lasts the whole run. The tool
 * raises its own soft RLIMIT_NOFILE to the hard limit and exits 77 when
 * that is still too low. To get past the 28,000 ephemeral ports of one
 * source address under churn, loopback connections come from 16 source
 * addresses (127.0.0.1 to 127.0.0.16).
 *
 * READY_FILE is written (with the counts so far) once no connection is
 * still connecting, or 15 s after the start. Every second a status line
 * goes to stderr. At the end (SECONDS elapsed, or SIGTERM/SIGINT) the
 * totals are printed on stdout as key=value lines:
 *
 *   connected        connections established (counting reopens)
 *   peak_open        most established at once
 *   closed_idle      idle connections closed by the server
 *   closed_slow      slowloris connections closed by the server
 *   open_idle        idle connections still open at the end
 *   open_slow        slowloris connections still open at the end
 *   failed           connection attempts that failed
 *   max_slow_life_ms longest a slowloris connection lived before the
 *                    server closed it
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Connections started per loop pass: keeps the loop responsive while
 * thousands are being opened. */
#define CF_OPEN_BATCH 256
/* A connection still connecting after this long is dropped and counted
 * as failed (then reopened with -r). */
#define CF_CONNECT_TIMEOUT_MS 20000
#define CF_READY_AFTER_MS 15000
#define CF_SOURCES 16

enum cf_kind { CF_IDLE, CF_SLOW };
enum cf_state { CF_WAITING, CF_CONNECTING, CF_OPEN, CF_DONE };

struct cf_conn {
    int fd;
    enum cf_kind kind;
    enum cf_state state;
    int64_t since_ms;     /* connecting or open since */
    int64_t next_ms;      /* WAITING: open at; OPEN and slow: next byte */
    int first;            /* the first attempt has not finished */
};

struct cf_stats {
    long connected, peak_open, closed_idle, closed_slow, failed;
    long open_idle, open_slow, connecting;
    long first_done;      /* connections whose first attempt finished */
    int64_t max_slow_life_ms;
};

static volatile sig_atomic_t cf_stop;

static void cb_signal(int sig)
{
    (void)sig;
    cf_stop = 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(void)
{
    fputs("usage: connflood -p PORT [-a ADDR] [-i IDLE] [-s SLOW] "
          "[-t SECONDS] [-r REOPEN_MS] [-o READY_FILE]\n",
          stderr);
    exit(2);
}

static long arg_long(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0)
        usage();
    return v;
}

/* raise_nofile makes room for need descriptors; returns 0 or -1. */
static int raise_nofile(long need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    return rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < need ? -1 : 0;
}

/* start_connect begins a non-blocking connect for c; on failure c is
 * left without a descriptor and the failure is counted. */
static void start_connect(struct cf_conn *c, size_t idx, int ep,
                          const struct sockaddr_in *dst, struct cf_stats *st,
                          int64_t now)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    if ((ntohl(dst->sin_addr.s_addr) >> 24) == 127) {
        int one = 1;
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(0x7f000001u + (uint32_t)(idx % CF_SOURCES));
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (bind(fd, (const struct sockaddr *)&src, sizeof src) != 0)
            goto fail;
    }
    if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) != 0 &&
        errno != EINPROGRESS)
        goto fail;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = idx};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        goto fail;
    c->fd = fd;
    c->state = CF_CONNECTING;
    c->since_ms = now;
    st->connecting++;
    return;
fail:
    if (fd >= 0)
        close(fd);
    c->fd = -1;
    st->failed++;
}

/* drop closes c; with reopen_ms >= 0 it is opened again that much later,
 * else it is done. */
static void drop(struct cf_conn *c, struct cf_stats *st, long reopen_ms,
                 int64_t now)
{
    if (c->first) {
        c->first = 0;
        st->first_done++;
    }
    if (c->state == CF_CONNECTING)
        st->connecting--;
    else if (c->state == CF_OPEN && c->kind == CF_IDLE)
        st->open_idle--;
    else if (c->state == CF_OPEN)
        st->open_slow--;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = reopen_ms >= 0 ? CF_WAITING : CF_DONE;
    c->next_ms = now + reopen_ms;
}

static void now_open(struct cf_conn *c, int ep, size_t idx,
                     struct cf_stats *st, int64_t now)
{
    static const char line[] = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    st->connecting--;
    if (c->first) {
        c->first = 0;
        st->first_done++;
    }
    c->state = CF_OPEN;
    c->since_ms = now;
    st->connected++;
    if (c->kind == CF_IDLE) {
        st->open_idle++;
    } else {
        st->open_slow++;
        c->next_ms = now + 1000;
        if (send(c->fd, line, sizeof line - 1, MSG_NOSIGNAL) < 0) {
            /* the read side reports the failure */
        }
    }
    if (st->open_idle + st->open_slow > st->peak_open)
        st->peak_open = st->open_idle + st->open_slow;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = idx};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* on_event handles readiness of connection c. */
static void on_event(struct cf_conn *c, size_t idx, uint32_t events, int ep,
                     struct cf_stats *st, long reopen_ms, int64_t now)
{
    if (c->state == CF_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
            err != 0) {
            st->failed++;
            drop(c, st, reopen_ms, now);
        } else if (events & EPOLLOUT) {
            now_open(c, ep, idx, st, now);
        }
        return;
    }
    if (c->state != CF_OPEN)
        return;
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0)
            continue; /* an error answer; the close follows */
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        break; /* closed or reset by the server */
    }
    if (c->kind == CF_IDLE) {
        st->closed_idle++;
    } else {
        st->closed_slow++;
        if (now - c->since_ms > st->max_slow_life_ms)
            st->max_slow_life_ms = now - c->since_ms;
    }
    drop(c, st, reopen_ms, now);
}

static void print_stats(FILE *f, const struct cf_stats *st)
{
    fprintf(f,
            "connected=%ld\npeak_open=%ld\nclosed_idle=%ld\nclosed_slow=%ld\n"
            "open_idle=%ld\nopen_slow=%ld\nfailed=%ld\nmax_slow_life_ms=%lld\n",
            st->connected, st->peak_open, st->closed_idle, st->closed_slow,
            st->open_idle, st->open_slow, st->failed,
            (long long)st->max_slow_life_ms);
}

static void write_ready(const char *path, const struct cf_stats *st)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    print_stats(f, st);
    if (fclose(f) == 0)
        rename(tmp, path);
}

int main(int argc, char **argv)
{
    long port = 0, nidle = 0, nslow = 0, secs = 30, reopen_ms = -1;
    const char *addr = "127.0.0.1", *ready = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "p:a:i:s:t:r:o:")) != -1) {
        switch (opt) {
        case 'p': port = arg_long(optarg); break;
        case 'a': addr = optarg; break;
        case 'i': nidle = arg_long(optarg); break;
        case 's': nslow = arg_long(optarg); break;
        case 't': secs = arg_long(optarg); break;
        case 'r': reopen_ms = arg_long(optarg); break;
        case 'o': ready = optarg; break;
        default: usage();
        }
    }
    struct sockaddr_in dst = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, addr, &dst.sin_addr) != 1)
        usage();
    size_t n = (size_t)(nidle + nslow);
    if (raise_nofile(nidle + nslow + 32) != 0) {
        fprintf(stderr, "connflood: needs %ld descriptors; the hard "
                "RLIMIT_NOFILE is lower\n", nidle + nslow + 32);
        return 77;
    }
    signal(SIGTERM, cb_signal);
    signal(SIGINT, cb_signal);
    signal(SIGPIPE, SIG_IGN);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct cf_conn *conns = calloc(n ? n : 1, sizeof *conns);
    struct epoll_event *evs = calloc(1024, sizeof *evs);
    if (ep < 0 || conns == NULL || evs == NULL) {
        perror("connflood");
        return 1;
    }
    int64_t start = now_ms(), end = start + secs * 1000, last_status = start;
    for (size_t i = 0; i < n; i++) {
        conns[i].fd = -1;
        conns[i].kind = i < (size_t)nidle ? CF_IDLE : CF_SLOW;
        conns[i].state = CF_WAITING;
        conns[i].next_ms = start;
        conns[i].first = 1;
    }
    struct cf_stats st = {0};
    int ready_written = ready == NULL;
    size_t cursor = 0;   /* where the next scan for work starts */
    while (!cf_stop) {
        int64_t now = now_ms();
        if (now >= end)
            break;
        /* open what is due, a batch at a time; trickle slowloris bytes;
         * give up on connects that hang */
        int opened = 0, pending = 0;
        for (size_t k = 0; k < n; k++) {
            size_t i = (cursor + k) % n;
            struct cf_conn *c = &conns[i];
            if (c->state == CF_WAITING && c->next_ms <= now) {
                if (opened >= CF_OPEN_BATCH) {
                    pending = 1;
                    continue;
                }
                opened++;
                start_connect(c, i, ep, &dst, &st, now);
                if (c->fd < 0)
                    drop(c, &st, reopen_ms, now);
            } else if (c->state == CF_CONNECTING &&
                       now - c->since_ms > CF_CONNECT_TIMEOUT_MS) {
                st.failed++;
                drop(c, &st, reopen_ms, now);
            } else if (c->state == CF_OPEN && c->kind == CF_SLOW &&
                       c->next_ms <= now) {
                c->next_ms += 1000;
                if (send(c->fd, "a", 1, MSG_NOSIGNAL) < 0) {
                    /* the read side reports the failure */
                }
            }
        }
        cursor = (cursor + CF_OPEN_BATCH) % (n ? n : 1);
        int got = epoll_wait(ep, evs, 1024, pending ? 0 : 20);
        now = now_ms();
        for (int e = 0; e < got; e++) {
            size_t i = (size_t)evs[e].data.u64;
            on_event(&conns[i], i, evs[e].events, ep, &st, reopen_ms, now);
        }
        if (!ready_written) {
            if (st.first_done == (long)n ||
                now - start >= CF_READY_AFTER_MS) {
                write_ready(ready, &st);
                ready_written = 1;
            }
        }
        if (now - last_status >= 1000) {
            last_status = now;
            fprintf(stderr, "connflood: t=%llds open_idle=%ld open_slow=%ld "
                    "connecting=%ld connected=%ld closed_idle=%ld "
                    "closed_slow=%ld failed=%ld\n",
                    (long long)((now - start) / 1000), st.open_idle,
                    st.open_slow, st.connecting, st.connected, st.closed_idle,
                    st.closed_slow, st.failed);
        }
    }
    print_stats(stdout, &st);
    for (size_t i = 0; i < n; i++)
        if (conns[i].fd >= 0)
            close(conns[i].fd);
    free(conns);
    free(evs);
    close(ep);
    return 0;
}
