/* slots.c - the slot calculator: which instants a schedule fires at.
 *
 * A cron schedule matches minutes of local wall-clock time. The map f
 * from a wall-clock minute to the instant it fires at (its first
 * occurrence; for a minute skipped by a change, the change itself) never
 * decreases as the wall clock advances, so the slots after t are the
 * images of the matching minutes whose image lies after t, found by
 * walking matching minutes upwards from a wall time that no such minute
 * can precede (and downwards, for the previous slot). Minutes mapping to
 * one instant (the skipped minutes of one change) are one slot. */
#include "schedule/slots.h"

#include <assert.h>

#include "schedule/civil.h"
#include "util/util.h"

/* SLOT_WINDOW_S: offsets are looked at three days around the instant,
 * more than any two offsets can differ (RFC 8536: -89999..93599 s). */
#define SLOT_WINDOW_S (3 * TM_DAY_S)
/* SLOT_MAX_SEGMENTS bounds the rule changes looked at in one window. */
#define SLOT_MAX_SEGMENTS 64
/* SLOT_MAX_STEPS bounds the matching minutes tried for one slot: those
 * between the lower bound and t, at most 52 hours of minutes. */
#define SLOT_MAX_STEPS 4000

int tm_sched_wall_to_instant(const struct tm_tz *z, int64_t w, int64_t *u)
{
    int32_t lo_off, hi_off;
    tm_tz_offset_bounds(z, &lo_off, &hi_off);
    /* every instant with wall time w lies in [w - hi_off, w - lo_off]:
     * walk the zone's segments [a, b) of constant offset across it. In
     * each, wall times run from a + o to b + o; the walk starts where the
     * wall clock is before w, and stops at the segment holding w, or at
     * the change whose new wall time jumps past w. */
    int64_t a = w - hi_off - 1;
    for (int i = 0; i < SLOT_MAX_SEGMENTS; i++) {
        int32_t o = tm_tz_offset(z, a);
        int64_t b = tm_tz_next_change(z, a);
        assert(a + o <= w);
        if (w - o < b) {
            *u = w - o;
            return 0;
        }
        if (b + tm_tz_offset(z, b) > w) {
            *u = b;
            return 1;
        }
        a = b;
    }
    /* unreachable with real zones: more changes than minutes */
    assert(0);
    *u = w - tm_tz_offset(z, w);
    return 0;
}

/* local_bounds gives the least and greatest offset of z within
 * SLOT_WINDOW_S of the instant t. */
static void local_bounds(const struct tm_tz *z, int64_t t, int32_t *min,
                         int32_t *max)
{
    int64_t a = t - SLOT_WINDOW_S;
    *min = *max = tm_tz_offset(z, a);
    for (int i = 0; i < SLOT_MAX_SEGMENTS; i++) {
        a = tm_tz_next_change(z, a);
        if (a > t + SLOT_WINDOW_S)
            return;
        int32_t o = tm_tz_offset(z, a);
        if (o < *min)
            *min = o;
        if (o > *max)
            *max = o;
    }
    tm_tz_offset_bounds(z, min, max);
}

static int cron_next(const struct tm_sched_spec *s, int64_t t, int64_t *out)
{
    int32_t lmin, lmax;
    local_bounds(s->tz, t, &lmin, &lmax);
    /* a wall time w firing after t satisfies w > t + lmin: its instant u
     * > t has w = u + off(u), and off(u) >= lmin near t (a far u has a
     * far w); a skipped w fires at a change T > t and lies at or after
     * the wall time T + off(before T) */
    int64_t w = t + lmin;
    for (int i = 0; i < SLOT_MAX_STEPS; i++) {
        int64_t m, u;
        if (tm_cron_next(&s->cron, w, &m) < 0)
            return -1;
        tm_sched_wall_to_instant(s->tz, m, &u);
        if (u > t) {
            *out = u;
            return 0;
        }
        w = m + 60;
    }
    return -1;
}

static int cron_prev(const struct tm_sched_spec *s, int64_t t, int64_t *out)
{
    int32_t lmin, lmax;
    local_bounds(s->tz, t, &lmin, &lmax);
    /* symmetric: a wall time firing at or before t is at most t + lmax */
    int64_t w = t + lmax;
    for (int i = 0; i < SLOT_MAX_STEPS; i++) {
        int64_t m, u;
        if (tm_cron_prev(&s->cron, w, &m) < 0)
            return -1;
        tm_sched_wall_to_instant(s->tz, m, &u);
        if (u <= t) {
            *out = u;
            return 0;
        }
        w = m - 60;
    }
    return -1;
}

int tm_sched_next(const struct tm_sched_spec *s, int64_t t_ms,
                  int64_t *slot_ms)
{
    int64_t slot;
    if (t_ms < TM_SCHED_MIN_MS || t_ms > TM_SCHED_MAX_MS)
        return -1;
    if (s->kind == TM_SCHED_EVERY) {
        assert(s->every_ms > 0);
        slot = (tm_floor_div(t_ms, s->every_ms) + 1) * s->every_ms;
    } else {
        int64_t u;
        assert(s->kind == TM_SCHED_CRON && s->tz != NULL);
        /* slots are whole seconds: S * 1000 > t_ms iff S > floor(t/1000) */
        if (cron_next(s, tm_floor_div(t_ms, 1000), &u) < 0)
            return -1;
        slot = u * 1000;
    }
    if (slot > TM_SCHED_MAX_MS)
        return -1;
    assert(slot > t_ms);
    *slot_ms = slot;
    return 0;
}

int tm_sched_prev(const struct tm_sched_spec *s, int64_t t_ms,
                  int64_t *slot_ms)
{
    int64_t slot;
    if (t_ms < TM_SCHED_MIN_MS || t_ms > TM_SCHED_MAX_MS)
        return -1;
    if (s->kind == TM_SCHED_EVERY) {
        assert(s->every_ms > 0);
        slot = tm_floor_div(t_ms, s->every_ms) * s->every_ms;
    } else {
        int64_t u;
        assert(s->kind == TM_SCHED_CRON && s->tz != NULL);
        if (cron_prev(s, tm_floor_div(t_ms, 1000), &u) < 0)
            return -1;
        slot = u * 1000;
    }
    if (slot < TM_SCHED_MIN_MS)
        return -1;
    assert(slot <= t_ms);
    *slot_ms = slot;
    return 0;
}

char *tm_sched_dedup_key(const char *name, int64_t slot_ms)
{
    return tm_asprintf("schedule:%s:%lld", name, (long long)slot_ms);
}
