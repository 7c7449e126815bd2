/* daemon_private.h - what the daemon's own files share: generations,
 * intake, settlement, reload and plugin_watch. Not installed; only
 * src/daemon/ includes it. */
#ifndef TASKMILL_DAEMON_PRIVATE_H
#define TASKMILL_DAEMON_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/daemon.h"

/* Log source of the daemon's own lines. */
#define TM_DAEMON_SRC "daemon"

/* Reconnect backoff: first delay and cap. */
#define TM_RECONNECT_MIN_MS 100
#define TM_RECONNECT_MAX_MS 5000

/* ---- generations (gen.c) -------------------------------------------- */

/* tm_gen_create loads a generation for cfg (taken over, also on failure):
 * plugins, broker adapter, pool (not started). With prev, unchanged tasks
 * keep their plugins and every task keeps its counters. Returns NULL with
 * one line in err. */
struct tm_gen *tm_gen_create(struct tm_daemon *d, struct tm_cfg *cfg,
                             struct tm_gen *prev, char *err, size_t errlen);

/* tm_gen_start starts the pool, the settle thread and the intake
 * threads. Returns 0 or -1. */
int tm_gen_start(struct tm_gen *g);

/*
 * tm_gen_stop stops a started generation: intake first, then running work
 * until deadline_ns, then settlement. With finish_queued (a reload), the
 * messages it already holds run too; otherwise (shutdown) those not yet
 * started are left unacknowledged. Returns 0 when everything finished and
 * was settled, -1 when work was abandoned.
 */
int tm_gen_stop(struct tm_gen *g, int64_t deadline_ns, int finish_queued);
size_t tm_gen_only_stuck(struct tm_gen *g);

/* tm_gen_fire_start starts g's schedule firing thread, going on from the
 * cursors of from (a stopped firing thread: the replaced generation's,
 * or g's own after a reload that failed; NULL: none), and frees g's
 * stopped one if it had one. tm_gen_fire_stop stops it (idempotent). */
void tm_gen_fire_start(struct tm_gen *g, const struct tm_fire *from);
void tm_gen_fire_stop(struct tm_gen *g);

/* tm_gen_wait_idle waits, however long it takes, until no call runs in
 * g's pool: a call abandoned at the drain deadline still runs the
 * generation's plugin code with its task and worker data. */
void tm_gen_wait_idle(struct tm_gen *g);

/* tm_gen_free releases what tm_gen_create made; the generation is
 * stopped. It first waits (tm_gen_wait_idle) for abandoned calls, so its
 * plugins are unloaded only once nothing runs their code. Called directly
 * only on a generation that was never published (no other thread can
 * hold a reference); a published one goes by its last tm_gen_unref. NULL
 * is accepted. */
void tm_gen_free(struct tm_gen *g);

/* tm_gen_publish makes g the generation HTTP and the main loop see: the
 * configuration took effect (start or reload), as number g->id. */
void tm_gen_publish(struct tm_daemon *d, struct tm_gen *g);

/* ---- intake (intake.c) ---------------------------------------------- */

/* tm_intake_submit hands a batch read by intake to the pool. */
void tm_intake_submit(struct tm_gen *g, struct tm_batch *batch);
/* tm_intake_start starts one intake thread per lane of g's broker. */
void tm_intake_start(struct tm_gen *g);

/* tm_intake_stop stops reading new messages and joins the intake
 * threads; what was read runs on. */
void tm_intake_stop(struct tm_gen *g);
void tm_intake_join(struct tm_gen *g);


/* ---- flow control (flow.c) ------------------------------------------ */

/* Tokens of a bucket the broker keeps (shared by the daemons) are held
 * at most about this long unused: they go back with the next request
 * after it, and a read made while they are held waits at most this. */
#define TM_FLOW_HOLD_MS 1000

/* While another generation's runs of a task take its concurrency, its
 * intake looks again at least this often (ms): their settlement wakes
 * their own generation's intake only. */
#define TM_FLOW_OTHERS_MS 50

/* tm_flow_cap returns how many messages of t may be in flight (read, not
 * yet settled) in t's generation: prefetch, or concurrency less what the
 * other generations of the task hold when lower (*by_conc = 1, or 2 when
 * the others leave t no room). */
long tm_flow_cap(const struct tm_task *t, int *by_conc);

/* tm_flow_in counts n messages of t in flight (the thread that reads t),
 * tm_flow_out one fewer (any thread): t's own count and the count its
 * generations share. */
void tm_flow_in(struct tm_task *t, long long n);
void tm_flow_out(struct tm_task *t);

/* tm_flow_share gives each task of the created generation g its shared
 * count: its predecessor's in g->prev (g->snap_from), else a new one.
 * tm_flow_unshare takes what g still counts in flight out of the shared
 * counts and drops g's references (tm_gen_free, once nothing of g runs). */
void tm_flow_share(struct tm_gen *g);
void tm_flow_unshare(struct tm_gen *g);

/* tm_flow_stopped takes what the stopped generation g still counts in
 * flight (messages it gave up on, to be delivered again) out of the
 * shared counts: called once tm_gen_stop returned. */
void tm_flow_stopped(struct tm_gen *g);

/* tm_flow_held records whether the last look held t's intake back by
 * rate_limit or concurrency; a wait is counted once, when it starts. */
void tm_flow_held(struct tm_task *t, int held);

/* tm_flow_take_local takes up to room tokens of t's rate_limit from this
 * daemon's bucket and returns how many the next read may take (room
 * without a rate_limit); when 0, *wait is the ms until the next token.
 * tm_flow_used_local then gives back what the read (used) left. */
size_t tm_flow_take_local(struct tm_task *t, size_t room, int64_t *wait);
void tm_flow_used_local(struct tm_task *t, size_t used);

/* struct tm_lane_flow is a lane thread's scratch for rate_limit, by task
 * index (arrays of the generation's count of tasks). */
struct tm_lane_flow {
    size_t *want, *back, *got;
    int64_t *wait;
    int waiting;        /* a task waits for its next token */
};

/* tm_flow_lane_rate caps room[] of lane's rate-limited tasks by their
 * tokens before a read, lowering *hold to the next token's wait; returns
 * how many tasks have room, or -1 when the broker could not be asked.
 * tm_flow_lane_used accounts the read that followed (n batches in out,
 * n < 0: failed). Lane thread only. */
int tm_flow_lane_rate(struct tm_gen *g, size_t lane, size_t *room,
                      int64_t *hold, struct tm_lane_flow *f);
void tm_flow_lane_used(struct tm_gen *g, size_t lane, struct tm_batch **out,
                       int n);

/* ---- settlement (settle.c) ------------------------------------------ */

/* tm_settle_pool_done is the pools' done callback (ctx: the generation):
 * pushes finished messages on the generation's completion stack. */
void tm_settle_pool_done(void *ctx, struct tm_msg *list);

/* tm_settle_main is the body of a generation's settle thread (arg: the
 * generation). */
void *tm_settle_main(void *arg);

/* tm_settle_carry adds src to dst, counter by counter; sub, when given,
 * is taken off. Only the settle thread of dst's generation (or its
 * creator, before that thread starts) writes dst. */
void tm_settle_carry(struct tm_task_stats *dst,
                     const struct tm_task_stats *src,
                     const struct tm_task_stats *sub);

/* ---- liveness (health.c) -------------------------------------------- */

/* tm_beat_start marks b's loop running (counted from now on); tm_beat_stop
 * marks it ended (no longer counted). */
void tm_beat_start(struct tm_beat *b);
void tm_beat_stop(struct tm_beat *b);

/* tm_beat_tick notes that b's loop went round. */
void tm_beat_tick(struct tm_beat *b);

/* tm_beat_io_begin and tm_beat_io_end bracket one broker call of b's loop
 * (bounded by the adapter's timeouts); io_end also ticks. */
void tm_beat_io_begin(struct tm_beat *b);
void tm_beat_io_end(struct tm_beat *b);

/* ---- the fleet (fleet.c) ------------------------------------------- */

/* tm_fleet_start starts the thread that announces d through its broker
 * and sends its history (nothing for a broker without a fleet);
 * tm_fleet_leave withdraws the announcement at once (the daemon stops);
 * tm_fleet_stop sends the last history counts, withdraws the
 * announcement if still there, and joins the thread. Main thread. */
void tm_fleet_start(struct tm_daemon *d);
void tm_fleet_leave(struct tm_daemon *d);
void tm_fleet_stop(struct tm_daemon *d);

/* ---- reload (reload.c) and plugin_watch (plugin_watch.c) ------------ */

/* tm_reload re-reads the configuration file and, when it is good and
 * needs no restart, replaces the running generation. Main thread only. */
void tm_reload(struct tm_daemon *d);

/* tm_plugin_watch_main asks for a reload when a .so file in plugin_dir
 * changes (arg: the daemon). */
void *tm_plugin_watch_main(void *arg);

#endif /* TASKMILL_DAEMON_PRIVATE_H */
