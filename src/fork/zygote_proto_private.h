/* fork/zygote_proto_private.h - what the daemon and its zygote say to each other
 * (private to fork/zygote.c and fork/zygote_client.c). */
#ifndef TASKMILL_FORK_ZYGOTE_PROTO_H
#define TASKMILL_FORK_ZYGOTE_PROTO_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tm_task;

/* The zygote's process name, as ps(1) and /proc/PID/comm show it. */
#define ZY_NAME "tm-zygote"
/* The seed's: the process every zygote is forked from. */
#define ZY_SEED_NAME "tm-zygote-seed"

/* The daemon sends one request at a time over a SOCK_SEQPACKET pair and
 * reads the reply; worker exits come on the same socket whenever they
 * happen. */
enum zy_op { ZY_LOAD = 1, ZY_DROP = 2, ZY_SPAWN = 3,
             ZY_ZYGOTE = 4 /* to the seed: fork a zygote */ };

struct zy_req {
    uint32_t op;
    uint32_t gen;
    uint32_t index;             /* ZY_SPAWN */
    uint32_t max_tasks;         /* ZY_SPAWN */
    uint64_t fingerprint;       /* ZY_LOAD: of the tasks it must find */
    char path[PATH_MAX];        /* ZY_LOAD: the configuration file */
};

enum zy_kind { ZY_REPLY = 1, ZY_EXIT = 2 };

/* struct zy_msg is a reply to the last request (a ZY_SPAWN reply carries
 * the worker's socket as SCM_RIGHTS, a ZY_ZYGOTE reply of the seed the
 * new zygote's control socket), or the exit of a worker, sent whenever it
 * happens (the seed sends none). */
struct zy_msg {
    uint32_t kind;
    int32_t rc;                 /* ZY_REPLY: 0 or -1 */
    int32_t pid;                /* the worker */
    int32_t status;             /* ZY_EXIT: its wait status */
    char err[1024];             /* ZY_REPLY with rc -1 */
};

/* tm_zy_fingerprint sums up what the daemon and the zygote must agree on
 * about each task of a generation (FNV-1a). */
uint64_t tm_zy_fingerprint(struct tm_task **tasks, size_t n);

/* tm_zy_send sends the len bytes at m, with descriptor fd attached when
 * fd >= 0. Returns 0 or -1. */
int tm_zy_send(int sock, const void *m, size_t len, int fd);

/* tm_zy_recv receives one message into m (len bytes at most) and a passed
 * descriptor into *fd (-1 when none; fd may be NULL; close-on-exec).
 * Returns the size, 0 when the peer is gone, -1 with errno (EAGAIN when
 * dontwait). */
ssize_t tm_zy_recv(int sock, void *m, size_t len, int *fd, int dontwait);

/* tm_zygote_main is the zygote: it serves the daemon on ctl until the
 * daemon closes it, with tasks (inherited) as generation 1. parent_pid is
 * the seed that forked it. */
void tm_zygote_main(int ctl, pid_t parent_pid, struct tm_task **tasks,
                    size_t ntasks) __attribute__((noreturn));

/* tm_zygote_seed_main is the seed: forked by the daemon while it has no
 * other thread, it forks a zygote (with tasks as its generation 1) for
 * each ZY_ZYGOTE request on ctl and reaps them, until the daemon closes
 * ctl. It never starts a thread, loads nothing and runs no task code, so
 * that each zygote it forks starts as the first one did. */
void tm_zygote_seed_main(int ctl, pid_t daemon_pid, struct tm_task **tasks,
                         size_t ntasks) __attribute__((noreturn));

#endif /* TASKMILL_FORK_ZYGOTE_PROTO_H */
