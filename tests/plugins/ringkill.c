/* ringkill.c - test plugin for the fork pool: task code that dies while
 * its process answers through the shared rings (fork/ring.h). It finds
 * the rings in its own mappings, writes (part of) an answer to the
 * running message there, and kills its process with SIGKILL before the
 * answer is whole. Only on the first attempt; later attempts succeed.
 * Body {"mode": M}:
 *   "unpublished"  a whole, valid answer, its head never stored
 *   "torn"         the head stored over an answer half written
 *   "bulkcut"      an answer whose result goes on the socket: the record
 *                  stored, half of the result written
 *   anything else  succeeds
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <taskmill.h>

#include "fake_reply.h"
#include "fork/ring.h"
#include "fork/wire.h"

/* ring_base finds the read-write mapping of the rings (offset 0) and the
 * read-only one of the request area. Returns 0 or -1. */
static int ring_base(char **rw, const char **ro)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    *rw = NULL;
    *ro = NULL;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi, off;
        char perm[8];
        if (strstr(line, "taskmill-fork-ring") == NULL ||
            sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perm, &off) != 4)
            continue;
        if (perm[1] == 'w' && off == 0)
            *rw = (char *)lo;
        else if (perm[1] != 'w' && off == TM_RING_REQ_OFF)
            *ro = (const char *)lo;
    }
    if (f != NULL)
        fclose(f);
    return *rw != NULL && *ro != NULL ? 0 : -1;
}

/* reserve: tm_ring_reserve's logic (the daemon's own symbols are not
 * for plugins), without the room check: the ring is near empty. */
static char *reserve(char *area, uint64_t *head, uint32_t len, uint32_t kind)
{
    uint64_t off = *head % TM_RING_ANS_CAP, size = tm_ring_rec_size(len);
    struct tm_ring_rec r;
    if (size > TM_RING_ANS_CAP - off) {
        r.len = (uint32_t)(TM_RING_ANS_CAP - off - sizeof r);
        r.kind = TM_RING_SKIP;
        memcpy(area + off, &r, sizeof r);
        *head += TM_RING_ANS_CAP - off;
        off = 0;
    }
    r.len = len;
    r.kind = kind;
    memcpy(area + off, &r, sizeof r);
    *head += size;
    return area + off + sizeof r;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cb_run(struct tm_call *call)
{
    int unpublished = tm_fake_mode_is(call->body, "unpublished");
    int torn = tm_fake_mode_is(call->body, "torn");
    int bulk = tm_fake_mode_is(call->body, "bulkcut");
    if (call->attempt > 1 || !(unpublished || torn || bulk))
        return tm_result(call, "{\"ok\":true}") == 0 ? TM_TASK_OK
                                                     : TM_TASK_ERROR;
    char *rw;
    const char *ro;
    if (ring_base(&rw, &ro) != 0) {
        tm_error(call, "no rings found");
        return TM_TASK_REJECT;
    }
    /* the running request: the one whose id follows its header */
    struct tm_fork_req rq;
    const char *at = memmem(ro, TM_RING_REQ_CAP, call->id, strlen(call->id) + 1);
    if (at == NULL || at - ro < (long)sizeof rq) {
        tm_error(call, "request not found in the ring");
        return TM_TASK_REJECT;
    }
    memcpy(&rq, at - sizeof rq, sizeof rq);
    struct tm_ring_ctl *ctl = (struct tm_ring_ctl *)rw;
    char *ans = rw + TM_RING_ANS_OFF;
    static const char result[] = "{\"ok\":\"written by a process about to die\"}";
    size_t rlen = bulk ? 100000 : sizeof result - 1;
    struct tm_fork_resp rs = {
        .magic = TM_FORK_MAGIC_RESP,
        .outcome = 1, /* success */
        .task_index = rq.task_index,
        .result_len = rlen,
        .seq = rq.seq,
    };
    rs.t_start_ns = mono_ns() - 1000;
    rs.t_end_ns = mono_ns();
    uint64_t head = atomic_load(&ctl->ans_head);
    uint32_t len = bulk ? sizeof rs : (uint32_t)(sizeof rs + rlen);
    char *p = reserve(ans, &head, len,
                      bulk ? TM_RING_FRAME_BULK : TM_RING_FRAME);
    memcpy(p, &rs, sizeof rs);
    if (unpublished) {
        memcpy(p + sizeof rs, result, rlen);
    } else if (torn) {
        memset(p + sizeof rs, 0, rlen);
        memcpy(p + sizeof rs, result, rlen / 2);
        atomic_store(&ctl->ans_head, head);
    } else {
        /* bulkcut */
        atomic_store(&ctl->ans_head, head);
        int fd = tm_fake_reply_fd();
        struct tm_fork_note n = {.magic = TM_FORK_MAGIC_NOTE,
                                 .kind = TM_NOTE_BULK,
                                 .len = rlen};
        char *half = malloc(rlen / 2);
        memset(half, ' ', rlen / 2);
        half[0] = '[';
        if (fd < 0 || write(fd, &n, sizeof n) != (ssize_t)sizeof n ||
            write(fd, half, rlen / 2) != (ssize_t)(rlen / 2)) {
            free(half);
            tm_error(call, "cannot write on the socket");
            return TM_TASK_REJECT;
        }
        free(half);
    }
    raise(SIGKILL);
    return TM_TASK_ERROR;
}

TM_TASK_DECLARE(
    .name = "test-ringkill",
    .version = "0.0.1",
    .description = "test plugin: dies while it answers through the rings",
    .cb_run = cb_run,
)
