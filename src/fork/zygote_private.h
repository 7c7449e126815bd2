/* fork/zygote_private.h - the process that forks the fork pool's workers. */
#ifndef TASKMILL_FORK_ZYGOTE_H
#define TASKMILL_FORK_ZYGOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tm_cfg;
struct tm_task;

/*
 * Every worker of the fork pool is forked by a zygote, a process that
 * never starts a thread, so no worker can inherit a lock that another
 * thread of the daemon held (the daemon's threads never exist in a
 * zygote). Zygotes are forked by the seed, which the first fork pool to
 * start forks while the daemon has no other thread; the seed only forks
 * zygotes (each one a copy of the daemon as it was at the start) and
 * reaps them. Workers are the zygote's children: it reaps them and
 * reports each exit status to the daemon. The daemon never forks a
 * worker itself.
 *
 * Each pool generation is known to the zygote by a number. The first one
 * is inherited: its tasks and plugins were loaded, and cb_init run, by
 * the daemon before the seed was forked. A generation started later (a
 * reload) is loaded by the zygote itself from the same configuration
 * file: same tasks, with the zygote's own cb_init for tasks that keep no
 * plugin of a live generation (the daemon runs none for a fork pool's
 * reload, daemon/gen.c): one cb_init per task and generation.
 *
 * A zygote that dies takes its workers along (their parent-death
 * signal). The next spawn after a backoff (100 ms, doubling at each death
 * to 10 s; back to 100 ms after a zygote lived 30 s) has the seed fork a
 * new zygote, which loads every attached generation after the first
 * again (running their cb_init again), and counts a restart. Until then,
 * workers are not replaced: the pool runs with the workers it has left
 * (none, when they died with the zygote), and messages wait.
 *
 * Every function here may be called from any thread of the daemon.
 */

/*
 * tm_zygote_attach registers a pool generation with cfg's tasks (borrowed,
 * in cfg order). The first call starts the seed and the first zygote (the
 * caller must be the daemon's only thread). A later call restarts a
 * zygote that is down at once, then has it load the generation. Returns
 * 0 with the generation's number in *gen, or -1 with a reason in err when
 * there is no zygote or it could not load the generation (a cb_init that
 * failed: FILE:LINE:COL: tasks.NAME.KEY: reason).
 */
int tm_zygote_attach(const struct tm_cfg *cfg, struct tm_task **tasks,
                     size_t ntasks, unsigned *gen, char *err, size_t errlen);

/* tm_zygote_detach forgets generation gen (0 is ignored); the zygote and
 * the seed exit, and are reaped, when no generation is left. */
void tm_zygote_detach(unsigned gen);

/*
 * tm_zygote_spawn has the zygote fork worker index of generation gen
 * (exiting after max_tasks runs; 0 = never), restarting the zygote first
 * when it is down and its backoff is over. Returns the worker's pid with
 * the daemon's end of its socket in *fd (close-on-exec, blocking) and the
 * zygote that forked it in *zygote (for tm_zygote_wait), or -1: then
 * *retry_ns is when a zygote may be back (monotonic), or 0 when the
 * zygote refused (the caller's own delay).
 */
pid_t tm_zygote_spawn(unsigned gen, unsigned index, unsigned max_tasks,
                      int *fd, unsigned *zygote, int64_t *retry_ns);

/*
 * tm_zygote_wait waits until deadline_ns (monotonic) for the exit of the
 * worker pid forked by zygote (as tm_zygote_spawn gave it). Returns 0
 * with its wait status in *status, or -1 when it has not exited by then.
 * When that zygote is gone, its workers are killed with it (SIGKILL):
 * that is the status given.
 */
int tm_zygote_wait(unsigned zygote, pid_t pid, int64_t deadline_ns,
                   int *status);

#endif /* TASKMILL_FORK_ZYGOTE_H */
