/* fork/zygote.h - the process that forks the fork pool's workers. */
#ifndef TASKMILL_FORK_ZYGOTE_H
#define TASKMILL_FORK_ZYGOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tm_cfg;
struct tm_task;

/*
 * The zygote is forked once, by the first fork pool to start, while the
 * daemon has no other thread; it never starts a thread itself. Every
 * worker is forked by it, so no worker can inherit a lock that another
 * thread of the daemon held at the time (the daemon's threads never exist
 * in the zygote). Workers are the zygote's children: it reaps them and
 * reports each exit status to the daemon.
 *
 * Each pool generation is known to the zygote by a number. The first one
 * is inherited: its tasks and plugins were loaded before the fork. A
 * generation started later (a reload) is loaded by the zygote itself from
 * the same configuration file: same tasks, its own cb_init for tasks whose
 * plugin the zygote does not have yet.
 *
 * Every function here may be called from any thread of the daemon.
 */

/*
 * tm_zygote_attach registers a pool generation with cfg's tasks (borrowed,
 * in cfg order). The first call starts the zygote (the caller must be the
 * daemon's only thread). Returns 0 with the generation's number in *gen;
 * *gen is 0 when there is no zygote (it could not start, or died): the
 * pool then forks its workers itself. Returns -1 with a reason in err when
 * the zygote could not load the generation.
 */
int tm_zygote_attach(const struct tm_cfg *cfg, struct tm_task **tasks,
                     size_t ntasks, unsigned *gen, char *err, size_t errlen);

/* tm_zygote_detach forgets generation gen (0 is ignored); the zygote
 * exits, and is reaped, when no generation is left. */
void tm_zygote_detach(unsigned gen);

/*
 * tm_zygote_spawn has the zygote fork worker index of generation gen
 * (exiting after max_tasks runs; 0 = never). Returns the worker's pid with
 * the daemon's end of its socket in *fd (close-on-exec, blocking), or -1
 * when the zygote is gone or failed.
 */
pid_t tm_zygote_spawn(unsigned gen, unsigned index, unsigned max_tasks,
                      int *fd);

/*
 * tm_zygote_wait waits until deadline_ns (monotonic) for the exit of the
 * zygote's worker pid. Returns 0 with its wait status in *status, or -1
 * when it has not exited by then. When the zygote itself is gone, its
 * workers are killed with it (SIGKILL): that is the status given.
 */
int tm_zygote_wait(pid_t pid, int64_t deadline_ns, int *status);

#endif /* TASKMILL_FORK_ZYGOTE_H */
