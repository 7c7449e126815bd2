/* fork/child_private.h - a fork pool worker process: runs what the parent sends. */
#ifndef TASKMILL_FORK_CHILD_H
#define TASKMILL_FORK_CHILD_H

#include <stddef.h>
#include <sys/types.h>

struct tm_task;

/* struct tm_fork_child describes the worker a freshly forked process is
 * to be; everything it points to is the parent's, inherited by fork. */
struct tm_fork_child {
    struct tm_task **tasks;
    size_t ntasks;
    unsigned index;             /* worker number, for logs */
    int fd;                     /* the child's end of the socketpair */
    pid_t parent_pid;           /* dies when it is no longer the parent */
    unsigned max_tasks;         /* exits after this many; 0 = never */
};

/*
 * tm_fork_child_main runs in a forked process that holds no descriptor of
 * the parent's but a->fd (and inherited broker sockets it never touches):
 * it runs every task's cb_worker_init, then reads requests from a->fd and
 * answers each with one reply frame (fork/wire.h) until the parent closes
 * the socket or max_tasks were run, then runs cb_worker_fini and _exits
 * (0; 4 on a malformed request). A task whose worker init refused here is
 * not run by this process: its messages are answered rejected, with a
 * reason; the other tasks run. Never returns.
 */
void tm_fork_child_main(const struct tm_fork_child *a)
    __attribute__((noreturn));

#endif /* TASKMILL_FORK_CHILD_H */
