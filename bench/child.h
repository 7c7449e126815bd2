/* child.h - the consumer a watcher runs (bench/measure.c and
 * bench/peers/peer_measure.c; header only, like bench.h): started with
 * its output in a log file, stopped with SIGTERM, then SIGKILL. */
#ifndef TASKMILL_BENCH_CHILD_H
#define TASKMILL_BENCH_CHILD_H

#include "bench.h"

#include <sys/wait.h>

/* how long a consumer may take to exit after SIGTERM */
#define BENCH_STOP_NS 20000000000LL

/* bench_exec_logged, in a forked child: stdout and stderr appended to log
 * (when not NULL), then cmd; exits 127 when cmd cannot run. */
static inline void bench_exec_logged(const char *prog, const char *log,
                                     char **cmd) __attribute__((noreturn));

static inline void bench_exec_logged(const char *prog, const char *log,
                                     char **cmd)
{
    if (log != NULL) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
    }
    execvp(cmd[0], cmd);
    fprintf(stderr, "%s: exec %s: %s\n", prog, cmd[0], strerror(errno));
    _exit(127);
}

/* bench_stop_child sends pid SIGTERM and reaps it into *status; SIGKILL
 * after BENCH_STOP_NS. Returns a failure to report, or NULL. */
static inline const char *bench_stop_child(pid_t pid, int *status)
{
    kill(pid, SIGTERM);
    int64_t t0 = bench_mono_ns();
    while (waitpid(pid, status, WNOHANG) != pid) {
        if (bench_mono_ns() - t0 > BENCH_STOP_NS) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return "the command ignored SIGTERM for 20 s";
        }
        bench_sleep_until(bench_mono_ns() + 5000000LL);
    }
    return NULL;
}

#endif /* TASKMILL_BENCH_CHILD_H */
