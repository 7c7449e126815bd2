/* fork/fork.h - the fork pool: its workers are processes forked by
 * zygotes (zygote_private.h), so a crashing task costs one attempt, never the
 * daemon. Its operations are tm_pool_fork_ops (pool/pool.h); what other
 * layers read of it besides is here. */
#ifndef TASKMILL_FORK_H
#define TASKMILL_FORK_H

/* tm_zygote_restarts counts the zygotes started after the first one
 * (taskmill_zygote_restarts_total). */
unsigned long tm_zygote_restarts(void);

#endif /* TASKMILL_FORK_H */
