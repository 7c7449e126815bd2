/* fork/ring.c - shared rings of the fork pool, the memfd, HELLO. */
#include "fork/ring.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

void *tm_ring_reserve(char *area, uint32_t cap, uint64_t *head,
                      uint64_t tail, uint32_t len, uint32_t kind)
{
    uint64_t h = *head, size = tm_ring_rec_size(len);
    assert(h - tail <= cap && h % 8u == 0 && cap % 8u == 0);
    uint64_t off = h % cap, to_end = cap - off;
    /* a record never wraps: fill the rest of the area with a SKIP */
    uint64_t skip = size > to_end ? to_end : 0;
    if (size > cap || h - tail + skip + size > cap)
        return NULL;
    struct tm_ring_rec r;
    if (skip > 0) {
        r.len = (uint32_t)(skip - sizeof r);
        r.kind = TM_RING_SKIP;
        memcpy(area + off, &r, sizeof r);
        h += skip;
        off = 0;
    }
    r.len = len;
    r.kind = kind;
    memcpy(area + off, &r, sizeof r);
    *head = h + size;
    return area + off + sizeof r;
}

int tm_ring_peek(const char *area, uint32_t cap, uint64_t head,
                 uint64_t *tail, struct tm_ring_rec *rec,
                 const char **payload, const char **why)
{
    for (;;) {
        uint64_t t = *tail;
        if (head == t)
            return 0;
        if (head - t > cap || head % 8u != 0) {
            *why = "its ring position is impossible";
            return -1;
        }
        uint64_t off = t % cap, to_end = cap - off;
        memcpy(rec, area + off, sizeof *rec);
        uint64_t size = tm_ring_rec_size(rec->len);
        if (rec->kind == TM_RING_SKIP) {
            if (size != to_end || head - t < size) {
                *why = "a ring record that skips the wrong length";
                return -1;
            }
            *tail = t + size;
            continue;
        }
        if (rec->kind != TM_RING_FRAME && rec->kind != TM_RING_FRAME_BULK) {
            *why = "a ring record of no known kind";
            return -1;
        }
        if (size > to_end || size > head - t) {
            *why = "a ring record longer than the ring holds";
            return -1;
        }
        *payload = area + off + sizeof *rec;
        return 1;
    }
}

int tm_ring_create(void **base)
{
    int fd = memfd_create("taskmill-fork-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *p = MAP_FAILED;
    if (fd < 0)
        goto out;
    /* sealed: the child can neither shrink the file under the parent's
     * mapping (a SIGBUS in the daemon) nor grow it */
    if (ftruncate(fd, TM_RING_SIZE) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, TM_RING_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        fd = -1;
        errno = e;
        goto out;
    }
    struct tm_ring_ctl *ctl = p;
    ctl->magic = TM_RING_MAGIC;
    ctl->ans_cap = TM_RING_ANS_CAP;
    ctl->req_cap = TM_RING_REQ_CAP;
    *base = p;
out:
    return fd;
}

int tm_ring_send_hello(int sock, int memfd)
{
    struct tm_fork_note n = {.magic = TM_FORK_MAGIC_NOTE,
                             .kind = TM_NOTE_HELLO,
                             .len = TM_RING_SIZE};
    struct iovec iov = {.iov_base = &n, .iov_len = sizeof n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &memfd, sizeof memfd);
    ssize_t w;
    do {
        w = sendmsg(sock, &mh, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w == (ssize_t)sizeof n)
        return 0;
    if (w >= 0)
        errno = EPIPE;
    return -1;
}

int tm_ring_recv_hello(int sock)
{
    struct tm_fork_note n;
    struct iovec iov = {.iov_base = &n, .iov_len = sizeof n};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = u.buf,
                        .msg_controllen = sizeof u.buf};
    ssize_t r;
    do {
        r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    } while (r < 0 && errno == EINTR);
    int fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); r > 0 && cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    }
    if (r != (ssize_t)sizeof n || n.magic != TM_FORK_MAGIC_NOTE ||
        n.kind != TM_NOTE_HELLO || n.len != TM_RING_SIZE) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}
