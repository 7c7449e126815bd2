/* history.c - a task's counts per minute (24 h) and per hour (7 d), in
 * memory: the rings behind GET /api/v1/history. */
#include "task/history.h"

#include <sched.h>
#include <string.h>

#include "util/util.h"

#define MS_PER_MIN 60000
/* A slot's stamp while a writer resets it for a new bucket (no minute
 * or hour since the epoch reaches it); 0 is a slot never used. */
#define TM_HIST_RESETTING UINT32_MAX

void tm_hist_store_init(struct tm_hist_store *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
}

void tm_hist_store_free(struct tm_hist_store *s)
{
    for (size_t i = 0; i < s->n; i++) {
        tm_free(atomic_load(&s->v[i]->ring));
        tm_free(s->v[i]->name);
        tm_free(s->v[i]);
    }
    tm_free(s->v);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

static struct tm_hist *find_locked(struct tm_hist_store *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i]->name, name) == 0)
            return s->v[i];
    return NULL;
}

struct tm_hist *tm_hist_find(struct tm_hist_store *s, const char *name)
{
    pthread_mutex_lock(&s->mu);
    struct tm_hist *h = find_locked(s, name);
    pthread_mutex_unlock(&s->mu);
    return h;
}

struct tm_hist *tm_hist_get(struct tm_hist_store *s, const char *name)
{
    pthread_mutex_lock(&s->mu);
    struct tm_hist *h = find_locked(s, name);
    if (h == NULL) {
        if (s->n == s->cap) {
            s->cap = s->cap > 0 ? 2 * s->cap : 16;
            s->v = tm_realloc(s->v, s->cap * sizeof *s->v);
        }
        h = tm_calloc(1, sizeof *h);
        h->name = tm_strdup(name);
        s->v[s->n++] = h;
    }
    pthread_mutex_unlock(&s->mu);
    return h;
}

struct tm_hist **tm_hist_snapshot(struct tm_hist_store *s, size_t *n)
{
    pthread_mutex_lock(&s->mu);
    struct tm_hist **v = tm_calloc(s->n > 0 ? s->n : 1, sizeof *v);
    memcpy(v, s->v, s->n * sizeof *v);
    *n = s->n;
    pthread_mutex_unlock(&s->mu);
    return v;
}

/* slot_add adds add[] to sl for bucket stamp, taking the slot over from
 * an older bucket first. A slot a later bucket holds already drops the
 * counts (a report more than a ring's length late). */
static void slot_add(struct tm_hist_slot *sl, unsigned stamp,
                     const unsigned add[TM_HK_N])
{
    for (;;) {
        unsigned s = atomic_load_explicit(&sl->stamp, memory_order_acquire);
        if (s == stamp)
            break;
        if (s == TM_HIST_RESETTING) {
            /* another settle thread resets it (reload: two at once) */
            sched_yield();
            continue;
        }
        if (s > stamp)
            return;
        if (atomic_compare_exchange_strong(&sl->stamp, &s,
                                           TM_HIST_RESETTING)) {
            for (int k = 0; k < TM_HK_N; k++)
                atomic_store_explicit(&sl->n[k], 0, memory_order_relaxed);
            atomic_store_explicit(&sl->stamp, stamp, memory_order_release);
            break;
        }
    }
    for (int k = 0; k < TM_HK_N; k++)
        if (add[k] != 0)
            atomic_fetch_add_explicit(&sl->n[k], add[k],
                                      memory_order_relaxed);
}

/* slot_read reads sl's counts when it holds bucket stamp; 0 otherwise
 * (n[] then zeros). */
static int slot_read(const struct tm_hist_slot *sl, unsigned stamp,
                     unsigned n[TM_HK_N])
{
    memset(n, 0, TM_HK_N * sizeof *n);
    if (atomic_load_explicit(&sl->stamp, memory_order_acquire) != stamp)
        return 0;
    for (int k = 0; k < TM_HK_N; k++)
        n[k] = atomic_load_explicit(&sl->n[k], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&sl->stamp, memory_order_relaxed) != stamp) {
        memset(n, 0, TM_HK_N * sizeof *n);
        return 0;
    }
    return 1;
}

void tm_hist_note(struct tm_hist *h, int64_t wall_ms,
                  const unsigned add[TM_HK_N])
{
    if (wall_ms < MS_PER_MIN)
        return;
    struct tm_hist_ring *r =
        atomic_load_explicit(&h->ring, memory_order_acquire);
    if (r == NULL) {
        struct tm_hist_ring *fresh = tm_calloc(1, sizeof *fresh);
        struct tm_hist_ring *none = NULL;
        if (atomic_compare_exchange_strong(&h->ring, &none, fresh)) {
            r = fresh;
        } else {
            tm_free(fresh);
            r = none;
        }
    }
    unsigned m = (unsigned)(wall_ms / MS_PER_MIN);
    slot_add(&r->min[m % TM_HIST_MINUTES], m, add);
    slot_add(&r->hour[(m / 60) % TM_HIST_HOURS], m / 60, add);
}

void tm_hist_read(const struct tm_hist *h, int hourly, int64_t first,
                  size_t n, uint64_t (*out)[TM_HK_N])
{
    const struct tm_hist_ring *r =
        atomic_load_explicit(&h->ring, memory_order_acquire);
    if (r == NULL)
        return;
    const struct tm_hist_slot *slots = hourly ? r->hour : r->min;
    size_t len = hourly ? TM_HIST_HOURS : TM_HIST_MINUTES;
    for (size_t i = 0; i < n; i++) {
        int64_t b = first + (int64_t)i;
        unsigned c[TM_HK_N];
        if (b <= 0 || b > (int64_t)UINT32_MAX)
            continue;
        if (slot_read(&slots[(size_t)b % len], (unsigned)b, c))
            for (int k = 0; k < TM_HK_N; k++)
                out[i][k] += c[k];
    }
}

void tm_hist_minute(const struct tm_hist *h, int64_t m, unsigned n[TM_HK_N])
{
    memset(n, 0, TM_HK_N * sizeof *n);
    const struct tm_hist_ring *r =
        atomic_load_explicit(&h->ring, memory_order_acquire);
    if (r == NULL || m <= 0 || m > (int64_t)UINT32_MAX)
        return;
    slot_read(&r->min[(size_t)m % TM_HIST_MINUTES], (unsigned)m, n);
}

void tm_hist_unsent(const struct tm_hist *h, int64_t m, unsigned n[TM_HK_N],
                    unsigned cur[TM_HK_N])
{
    tm_hist_minute(h, m, n);
    if (cur != NULL)
        memcpy(cur, n, TM_HK_N * sizeof *n);
    const struct tm_hist_shadow *sh = &h->shadow[(size_t)m % TM_HIST_SHADOW];
    if (m <= 0 ||
        atomic_load_explicit(&sh->stamp, memory_order_acquire) != (unsigned)m)
        return;
    for (int k = 0; k < TM_HK_N; k++) {
        unsigned s = atomic_load_explicit(&sh->n[k], memory_order_relaxed);
        n[k] = n[k] > s ? n[k] - s : 0;
    }
}

void tm_hist_sent(struct tm_hist *h, int64_t m, const unsigned n[TM_HK_N])
{
    if (m <= 0 || m > (int64_t)UINT32_MAX)
        return;
    struct tm_hist_shadow *sh = &h->shadow[(size_t)m % TM_HIST_SHADOW];
    /* the one flushing thread writes it: the stamp goes first, so that a
     * reader that sees the new stamp with the old counts reads more
     * unsent than there is for a moment, never less */
    if (atomic_load_explicit(&sh->stamp, memory_order_relaxed) !=
        (unsigned)m) {
        for (int k = 0; k < TM_HK_N; k++)
            atomic_store_explicit(&sh->n[k], 0, memory_order_relaxed);
        atomic_store_explicit(&sh->stamp, (unsigned)m, memory_order_release);
    }
    for (int k = 0; k < TM_HK_N; k++)
        atomic_store_explicit(&sh->n[k], n[k], memory_order_release);
}
