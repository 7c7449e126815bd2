/* daemon.h - the running daemon: lifecycle, intake and settle threads. */
#ifndef TASKMILL_DAEMON_H
#define TASKMILL_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "broker/broker.h"
#include "pool/pool.h"
#include "task/task.h"

enum tm_state {
    TM_STATE_STARTING = 1,
    TM_STATE_RUNNING = 2,
    TM_STATE_STOPPING = 3
};

struct tm_broker;
struct tm_fire;
struct tm_sched_stats;
struct tm_http;
struct tm_daemon;

/*
 * struct tm_beat is the heartbeat of one of the daemon's own loops (the
 * main loop, a generation's settle loop), for /healthz and /ping. The loop
 * ticks each time round. Around a broker call, which the adapter bounds
 * with its own timeouts, it marks itself waiting: a loop waiting for a
 * hung broker is alive, not wedged. Written by its loop only.
 */
struct tm_beat {
    atomic_int active;              /* the loop runs; else not counted */
    atomic_llong tick_ms;           /* monotonic: last time round */
    atomic_llong io_since_ms;       /* monotonic: in a broker call since
                                       then; 0 when not in one */
};

/*
 * struct tm_gen is one generation of the running configuration: its tasks
 * and plugins, broker connections, pool, intake threads and settle thread.
 * A reload (SIGHUP, plugin_watch) starts a new generation and retires the
 * old one in the background: its intake stops at once, what it holds runs
 * to the end (up to shutdown_timeout) and is settled, then it is freed.
 * Calls still running at that deadline are abandoned (abandon is set for
 * this generation alone), and the generation, with its plugins' code,
 * task data and worker data, is freed only once the last of them has
 * returned (tm_gen_wait_idle), however long that takes.
 *
 * A generation is counted (refs): the daemon holds one reference from
 * tm_gen_create until it retires the generation (or, for the last one,
 * until it exits), and every thread that uses a generation's broker,
 * configuration or tasks without gen_lock held (an HTTP handler, the
 * queue depth refresher, the admin API worker) holds one of its own
 * meanwhile (tm_gen_current). The last tm_gen_unref frees it, on the
 * thread that drops that reference: a reload never waits for those
 * users, and never frees what one of them still reads. Only the published
 * generation gains references (under gen_lock), so a replaced one's count
 * only falls.
 */
struct tm_gen {
    struct tm_daemon *d;
    unsigned id;
    atomic_uint refs;               /* see above */
    struct tm_cfg *cfg;
    struct tm_task *tasks;          /* cfg->ntasks of them */
    struct tm_task **task_ptrs;
    size_t ntasks;
    struct tm_task_window *wins;    /* the tasks' windows, ntasks of them
                                       in zero pages (tm_zero_pages) */
    struct tm_broker *broker;
    struct tm_pool *pool;
    atomic_int stopping;            /* intake stops */
    /* set when this generation gives up on its running calls (its drain
     * reached shutdown_timeout): should_stop() answers yes to them, and
     * to no other generation's; its plugins stay loaded until they
     * return */
    atomic_int abandon;

    /* finished messages: a lock-free stack pushed by workers, taken whole
     * by the settle thread */
    _Atomic(struct tm_msg *) done_head;
    int done_fd;                    /* eventfd: stack became non-empty */
    pthread_t settle_thread;
    int settle_started;
    atomic_int settle_stop;
    struct tm_beat settle_beat;     /* its settle loop */
    int64_t settle_deadline_ns;
    struct tm_msg **scratch;        /* settle thread only */
    size_t scratch_cap;
    struct tm_msg *unsettled;       /* settlement failed; retried */

    pthread_mutex_t mu;
    pthread_cond_t cv;              /* intake waits: room, stop */
    struct tm_intake_lane *lanes;   /* a broker with lanes: one intake
                                       thread each (intake.c) */
    size_t nlanes;

    /* counters carried over from the generation this one replaced: at
     * creation they are copied (snap); once that generation has stopped,
     * this settle thread adds what it counted since (prev_done, folded) */
    struct tm_gen *prev;
    struct tm_task_stats *snap;     /* per task */
    long *snap_from;                /* per task: index in prev, or -1 */
    atomic_int prev_done;
    atomic_int folded;
    /* its pool's and broker's counts when it was replaced */
    unsigned long restarts_at_swap;
    unsigned long reconnects_at_swap;
    /* the thread firing its schedules (daemon/fire.h), NULL without
     * schedules; started with intake, stopped before the next
     * generation's starts */
    struct tm_fire *fire;
};

/*
 * struct tm_saturation is the pool's saturation, busy workers over its
 * size, sampled once a second by the main loop (no broker I/O) over the
 * last TM_SATURATION_SAMPLES seconds, for taskmill_pool_saturation and
 * /status. Written by the main thread only; read by any thread without
 * a lock (a reader may see a sample replaced while it sums: a gauge).
 */
#define TM_SATURATION_SAMPLES 60
struct tm_saturation {
    atomic_uint ppm[TM_SATURATION_SAMPLES]; /* busy/size, in millionths */
    atomic_uint taken;              /* samples taken; the next goes to
                                       ppm[taken % TM_SATURATION_SAMPLES] */
    int64_t next_ms;                /* main thread: next sample due */
};

struct tm_daemon {
    /* the current generation, as HTTP sees it: read under gen_lock */
    pthread_rwlock_t gen_lock;
    struct tm_gen *gen;
    struct tm_cfg *cfg;
    struct tm_task *tasks;
    size_t ntasks;
    struct tm_broker *broker;
    struct tm_pool *pool;

    const struct tm_daemon_http *http_ops; /* given to tm_daemon_run */
    struct tm_http *http;
    const char *config_path;

    /* Reload visibility (metrics, /status). config_generation is the
     * running configuration's number: 1 at start, one more for each
     * reload that took effect (a refused one takes no number). The last
     * reload took effect (1) or was refused (0); 1 before any reload.
     * last_reload_ok_wall_ms: when the running configuration took effect
     * (start or reload), epoch ms. Written by the main thread. */
    atomic_uint config_generation;
    atomic_int last_reload_ok;
    atomic_llong last_reload_ok_wall_ms;
    /* while the first connection fails: "broker unreachable: <reason>",
     * for /ping; "" otherwise. Written by the main thread, read by HTTP,
     * both under stop_mu. */
    char starting_why[512];
    /* why the last reload was refused ("" after one that took effect);
     * written and read under gen_lock */
    char last_reload_error[1024];

    atomic_int state;               /* enum tm_state */
    struct tm_beat main_beat;       /* the main loop */
    int64_t start_wall_ms;
    int64_t start_mono_ms;

    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;         /* signals, reload requests; with
                                       stop_mu, also guards freeing and
                                       exiting */
    int freeing;                    /* retired generations being freed */
    int exiting;                    /* tm_daemon_run returns: no retired
                                       generation is freed from now on */
    atomic_int signals;             /* termination signals received */
    atomic_int reload;              /* reload requested */
    atomic_int retiring;            /* a generation is being retired */
    /* worker restarts and broker reconnects of generations that were
     * replaced, so that the counters do not go back on a reload */
    atomic_ulong restarts_before;
    atomic_ulong reconnects_before;
    /* schedule fires and last slots, across reloads (daemon/fire.h) */
    struct tm_sched_stats *sched_stats;
    /* the trace exporter (otel/otel.h), NULL without
     * telemetry.otlp_endpoint; made once the pool runs (its thread after
     * the fork pool's forks), freed after the last settlement */
    struct tm_otel *otel;
    /* the pool's busy/size over the last minute (saturation.c) */
    struct tm_saturation saturation;
    /* every task name's counts per minute and hour, across reloads
     * (task/history.h), and the thread announcing this daemon and
     * flushing them (fleet.c; NULL when not running) */
    struct tm_hist_store hist;
    struct tm_fleet *fleet;
};

/* tm_saturation_sample takes one sample of the current generation's pool
 * when a second has passed since the last one. Main thread only, each
 * time round its loop. */
void tm_saturation_sample(struct tm_daemon *d);

/* tm_daemon_pool_saturation returns the mean of the samples of the last
 * TM_SATURATION_SAMPLES seconds (fewer since start), 0..1 while busy
 * never exceeds the size, or -1 before the first sample. Any thread. */
double tm_daemon_pool_saturation(struct tm_daemon *d);

/*
 * tm_tasks_load loads and initialises every task's plugin. Returns 0, or
 * -1 with one line "FILE:LINE:COL: message" per refused task in err (at
 * the task's plugin: value, the config key the plugin does not know, or
 * the task's config: key when cb_init refused it), every task tried. Loaded plugins are stored in tasks[i].plugin; free them with
 * tm_tasks_unload() also on failure.
 */
int tm_tasks_load(const struct tm_cfg *cfg, struct tm_task *tasks,
                  char *err, size_t errlen);
void tm_tasks_unload(struct tm_task *tasks, size_t n);

/*
 * struct tm_daemon_http is the HTTP server the daemon starts once its pool
 * runs (when http.listen is set) and stops before it frees its last
 * generation: tm_http_start and tm_http_stop (http/http.h), given by the
 * caller so that the daemon, below http/, calls nothing of it by name.
 */
struct tm_daemon_http {
    struct tm_http *(*start)(struct tm_daemon *d, char *err, size_t errlen);
    void (*stop)(struct tm_http *h); /* NULL is accepted */
};

/* tm_daemon_run runs the daemon until a termination signal; returns the
 * process exit status (0 clean stop, 1 runtime failure or abandoned work,
 * 2 configuration error). Takes ownership of cfg; http serves its
 * endpoints. */
int tm_daemon_run(struct tm_cfg *cfg, const struct tm_daemon_http *http);

/* tm_gen_current returns d's published generation with a reference
 * taken for the caller, who drops it with tm_gen_unref; gen_lock is
 * taken (read) for that moment only. HTTP starts after the first
 * generation is published, so there always is one. */
struct tm_gen *tm_gen_current(struct tm_daemon *d);

/* tm_gen_ref takes one more reference to g: the caller holds one already,
 * or holds gen_lock (read) and g is d->gen. */
void tm_gen_ref(struct tm_gen *g);

/* tm_gen_unref drops a reference; the last one frees g (tm_gen_free),
 * on the calling thread. NULL is accepted. */
void tm_gen_unref(struct tm_gen *g);

/* tm_daemon_ready returns 1 when /ping should answer 200: running, the
 * broker connected, every task subscribed, and the main and settle loops
 * going round (a loop stuck in a broker call for long is not ready);
 * otherwise 0 with a reason in why. The caller holds gen_lock (read) or
 * is the main thread. */
int tm_daemon_ready(struct tm_daemon *d, char *why, size_t size);

/* tm_daemon_alive returns 1 while the daemon's own loops are not wedged:
 * each one went round recently, or waits in a broker call that its
 * adapter bounds (a hung or unreachable broker is not a reason to restart
 * the daemon). Takes gen_lock (read) itself. */
int tm_daemon_alive(struct tm_daemon *d);

/* ---- the adapters of this build (adapters.c) ---- */

/* tm_broker_ops_for returns the adapter for a URL kind, or NULL when this
 * build has none. */
const struct tm_broker_ops *tm_broker_ops_for(enum tm_broker_kind kind);

/* tm_broker_new creates the adapter for cfg->url; NULL with a message in
 * err when the kind is not built in. */
struct tm_broker *tm_broker_new(const struct tm_cfg *cfg, char *err,
                                size_t errlen);

/*
 * tm_broker_load_config loads the config file at path as tm_cfg_load_all
 * does (same arguments, same error lines), then runs its broker adapter's
 * check op on it: a config this returns is one the adapter takes, its
 * libraries opened. With max_errors 1 it is tm_cfg_load's single error.
 * A config refused by the check is freed and its errors reported in err
 * and *nerrors as the loader's; the check runs only on a config that
 * loaded, so its errors come after every other of the file.
 */
struct tm_cfg *tm_broker_load_config(const char *path, size_t max_errors,
                                     char *err, size_t errlen,
                                     size_t *nerrors);

/* tm_pool_ops_for returns the pool kind's operations, or NULL. */
const struct tm_pool_ops *tm_pool_ops_for(enum tm_pool_kind kind);

#endif /* TASKMILL_DAEMON_H */
