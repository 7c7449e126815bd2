/* stats.h - per-task completion rates and recent durations, fixed size. */
#ifndef TASKMILL_STATS_H
#define TASKMILL_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Both structures have one writer (the settle thread) and any number of
 * readers (HTTP handlers). The writer never locks, allocates or waits:
 * relaxed atomic loads and stores, plus one release store per slot change.
 * Readers tolerate a sample being overwritten while they read.
 */

/* Seconds the completion ring remembers. The rate window is 60 s; the
 * ring is a power of two a few seconds longer so that the slot the writer
 * is filling is never one a reader of the window needs. */
#define TM_RATE_SLOTS 64
#define TM_RATE_WINDOW_S 60

/* Durations kept for percentiles: the most recent TM_DUR_WINDOW runs
 * (a power of two; 1024 gives p99 from the ten slowest). */
#define TM_DUR_WINDOW 1024

/* struct tm_rate counts completions per second of the monotonic clock in
 * a ring of TM_RATE_SLOTS one-second buckets. */
struct tm_rate {
    atomic_llong sec[TM_RATE_SLOTS];    /* the second a slot counts; -1
                                           while the writer resets it */
    atomic_ullong count[TM_RATE_SLOTS];
    atomic_llong newest;                /* newest second; written by the
                                           writer only, read (relaxed) by
                                           it and by tm_rate_copy */
};

/* struct tm_durwin keeps the last TM_DUR_WINDOW durations, in
 * microseconds, in a ring. */
struct tm_durwin {
    atomic_ullong n;                    /* durations ever written */
    atomic_uint us[TM_DUR_WINDOW];
};

/* struct tm_task_window is a task's recent history: completions per
 * second and the last durations, about 5 KiB. A generation keeps all its
 * tasks' windows in one mapping of zero pages apart from the tasks
 * themselves, so an idle task's window costs no memory: its pages are
 * touched, and become resident, at the task's first completion. */
struct tm_task_window {
    struct tm_rate rate;
    struct tm_durwin durs;
};

/* tm_rate_note counts one completion that happened at now_ns (monotonic).
 * A completion more than two seconds older than the newest one seen is
 * counted in the newest second, so a late report cannot clobber a slot of
 * the window. Single writer. */
void tm_rate_note(struct tm_rate *r, int64_t now_ns);

/* tm_rate_read computes, at now_ns (monotonic), the completions of the
 * last complete second (*r1) and the mean per second over the last
 * TM_RATE_WINDOW_S complete seconds (*r60), counting only the seconds
 * since since_ns (the start) while fewer have passed. Lock-free. */
void tm_rate_read(const struct tm_rate *r, int64_t now_ns, int64_t since_ns,
                  double *r1, double *r60);

/* tm_rate_copy sets dst (which nobody else uses yet) to what src holds
 * now, while src's writer may go on writing: a slot being reused as it is
 * read is copied empty. Lock-free, like a reader. */
void tm_rate_copy(struct tm_rate *dst, const struct tm_rate *src);

/* tm_durwin_note records one duration (ns; negative counts as 0, longer
 * than ~71 minutes is clamped). Single writer. */
void tm_durwin_note(struct tm_durwin *w, int64_t dur_ns);

/* tm_durwin_percentiles sets *p50_ms and *p99_ms (nearest rank, in
 * milliseconds) over the durations in the window and returns how many
 * there were; with none both are 0. Lock-free; uses 4 KiB of stack. */
size_t tm_durwin_percentiles(const struct tm_durwin *w, double *p50_ms,
                             double *p99_ms);

/* tm_durwin_copy sets dst (which nobody else uses yet) to what src holds
 * now, while src's writer may go on writing: like a reader, it tolerates
 * a sample overwritten during the copy. Lock-free. */
void tm_durwin_copy(struct tm_durwin *dst, const struct tm_durwin *src);

#endif /* TASKMILL_STATS_H */
