/* history.h - a task's counts per minute (24 h) and per hour (7 d), in
 * memory, for GET /api/v1/history. */
#ifndef TASKMILL_HISTORY_H
#define TASKMILL_HISTORY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Minutes and hours a ring keeps: 24 h per minute, 7 d per hour. */
#define TM_HIST_MINUTES 1440
#define TM_HIST_HOURS 168
/* Minutes back a flush looks for counts it has not sent yet (a broker
 * down longer loses the counts of the minutes before). */
#define TM_HIST_SHADOW 64

/* What a bucket counts (docs/http.md, GET /api/v1/history):
 * success: attempts that ended in success; failed: attempts that ended in
 * error, rejected, timeout, crashed or invalid (duplicates and attempts
 * abandoned at shutdown count nowhere); dead_lettered and retried: the
 * settlements, as taskmill_dead_lettered_total and taskmill_retries_total
 * count them. */
enum tm_hist_kind {
    TM_HK_SUCCESS = 0,
    TM_HK_FAILED = 1,
    TM_HK_DEAD = 2,
    TM_HK_RETRIED = 3,
    TM_HK_N = 4
};

/* struct tm_hist_slot is one bucket: the minute (or hour) since the epoch
 * it counts (0: none yet; UINT32_MAX while a writer resets it for a new
 * one). */
struct tm_hist_slot {
    atomic_uint stamp;
    atomic_uint n[TM_HK_N];
};

/* struct tm_hist_ring is a task's buckets (about 32 KiB), allocated at
 * the task's first count. */
struct tm_hist_ring {
    struct tm_hist_slot min[TM_HIST_MINUTES];
    struct tm_hist_slot hour[TM_HIST_HOURS];
};

/* struct tm_hist_shadow is what a flush sent of one minute (stamp 0:
 * none); the flushing thread writes it, the API reads it. */
struct tm_hist_shadow {
    atomic_uint stamp;
    atomic_uint n[TM_HK_N];
};

/* struct tm_hist is one task name's history in a process: it outlives
 * generations (a reload keeps it). Writers: any settle thread (relaxed
 * atomic adds; a slot changes minute by compare-and-swap); readers: any
 * thread, without locks. */
struct tm_hist {
    char *name;
    _Atomic(struct tm_hist_ring *) ring;  /* NULL until the first count */
    struct tm_hist_shadow shadow[TM_HIST_SHADOW];
};

/* struct tm_hist_store is a process's histories, by task name; entries
 * are added under mu and never removed before tm_hist_store_free. */
struct tm_hist_store {
    pthread_mutex_t mu;
    struct tm_hist **v;
    size_t n, cap;
};

void tm_hist_store_init(struct tm_hist_store *s);
/* tm_hist_store_free frees every history; nothing may use them after. */
void tm_hist_store_free(struct tm_hist_store *s);

/* tm_hist_get returns the history of task name, adding it when new (the
 * store owns it). */
struct tm_hist *tm_hist_get(struct tm_hist_store *s, const char *name);

/* tm_hist_find returns name's history, NULL when none. */
struct tm_hist *tm_hist_find(struct tm_hist_store *s, const char *name);

/* tm_hist_snapshot copies the store's histories into a new array (*n of
 * them; free the array only, with tm_free). */
struct tm_hist **tm_hist_snapshot(struct tm_hist_store *s, size_t *n);

/* tm_hist_note adds add[kind] to the buckets of wall_ms (epoch ms) of h.
 * Lock-free: relaxed atomic adds; once a minute, one compare-and-swap. */
void tm_hist_note(struct tm_hist *h, int64_t wall_ms,
                  const unsigned add[TM_HK_N]);

/* tm_hist_read adds to out[i][k] the counts of bucket first + i, for i
 * below n: minutes since the epoch, or hours when hourly. A bucket the
 * ring no longer (or not yet) holds adds nothing. */
void tm_hist_read(const struct tm_hist *h, int hourly, int64_t first,
                  size_t n, uint64_t (*out)[TM_HK_N]);

/* tm_hist_minute reads the counts of minute m into n[] (zeros when the
 * ring does not hold it). */
void tm_hist_minute(const struct tm_hist *h, int64_t m,
                    unsigned n[TM_HK_N]);

/* tm_hist_unsent reads what minute m counts beyond what a flush sent of
 * it (tm_hist_sent) into n[], and, when cur is not NULL, the whole counts
 * that one read found into cur[] (what to pass to tm_hist_sent once n[]
 * is in the broker). */
void tm_hist_unsent(const struct tm_hist *h, int64_t m, unsigned n[TM_HK_N],
                    unsigned cur[TM_HK_N]);

/* tm_hist_sent records that the counts n[] of minute m are in the broker.
 * One flushing thread per history. */
void tm_hist_sent(struct tm_hist *h, int64_t m, const unsigned n[TM_HK_N]);

#endif /* TASKMILL_HISTORY_H */
