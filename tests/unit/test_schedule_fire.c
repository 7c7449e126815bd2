/* test_schedule_fire.c - unit tests for the firing thread
 * (src/daemon/fire.c), on a broker of its own that keeps the last slot
 * of each schedule in memory, with the schedule clock driven by the test:
 * catch-up at start, late slots, the grace, a lead that passes to this
 * daemon, and a broker with a clock against a daemon's fast clock. */
#include "schedule/clock.h"
#include "daemon/fire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <check.h>

#include "broker/broker.h"
#include "config/config.h"
#include "util/util.h"

#include "unit_main.h"

/* ---------------------------------------------------------- the clock */

static atomic_llong fake_now;

static int64_t fake_clock(void)
{
    return atomic_load(&fake_now);
}

/* ---------------------------------------------------------- the broker */

#define MAX_FIRES 256

/* What the fake broker keeps: the last slot fired (-1: none), whether
 * this daemon leads (0: sched_fire answers "another daemon leads"), and
 * the slots it published. Under mu. */
static struct {
    pthread_mutex_t mu;
    int64_t last;
    int leads;
    int64_t fired[MAX_FIRES];
    int nfired;
} fb = {PTHREAD_MUTEX_INITIALIZER, -1, 1, {0}, 0};

static struct tm_sched_session fake_session;

static struct tm_sched_session *fake_open(struct tm_broker *b, int fire,
                                          char *err, size_t errlen)
{
    (void)fire;
    (void)err;
    (void)errlen;
    fake_session.b = b;
    return &fake_session;
}

static int fake_fire(struct tm_sched_session *ss,
                     const struct tm_cfg_schedule *s, int64_t slot,
                     int64_t *last)
{
    (void)ss;
    (void)s;
    int rc = 0;
    pthread_mutex_lock(&fb.mu);
    if (!fb.leads) {
        *last = -1;
    } else if (fb.last >= slot) {
        *last = fb.last;
    } else {
        fb.last = slot;
        *last = slot;
        if (fb.nfired < MAX_FIRES)
            fb.fired[fb.nfired++] = slot;
        rc = 1;
    }
    pthread_mutex_unlock(&fb.mu);
    return rc;
}

static int fake_last(struct tm_sched_session *ss,
                     const struct tm_cfg_schedule *s, int64_t *slot)
{
    (void)ss;
    (void)s;
    pthread_mutex_lock(&fb.mu);
    *slot = fb.last;
    pthread_mutex_unlock(&fb.mu);
    return 0;
}

static void fake_close(struct tm_sched_session *ss)
{
    (void)ss;
}

static const struct tm_broker_sched_ops fake_sched = {
    .sched_open = fake_open,
    .sched_fire = fake_fire,
    .sched_last = fake_last,
    .sched_close = fake_close,
};

static const struct tm_broker_ops fake_ops = {.kind = "fake",
                                              .sched = &fake_sched};

/* ------------------------------------------------------------ helpers */

static char name[] = "tick", task[] = "t", spec[] = "2s";
static struct tm_cfg_schedule sched;
static struct tm_cfg cfg;
static struct tm_broker broker;

/* setup: one schedule, every 2 s, with catch_up; the broker's last slot
 * last; the clock at now. */
static void setup(enum tm_catch_up catch_up, int64_t last, int64_t now)
{
    memset(&sched, 0, sizeof sched);
    sched.name = name;
    sched.task = task;
    sched.spec_text = spec;
    sched.spec.kind = TM_SCHED_EVERY;
    sched.spec.every_ms = 2000;
    sched.catch_up = catch_up;
    memset(&cfg, 0, sizeof cfg);
    cfg.schedules = &sched;
    cfg.nschedules = 1;
    memset(&broker, 0, sizeof broker);
    broker.ops = &fake_ops;
    broker.cfg = &cfg;
    pthread_mutex_lock(&fb.mu);
    fb.last = last;
    fb.leads = 1;
    fb.nfired = 0;
    pthread_mutex_unlock(&fb.mu);
    atomic_store(&fake_now, now);
    tm_sched_set_clock(fake_clock);
}

static int nfired(void)
{
    pthread_mutex_lock(&fb.mu);
    int n = fb.nfired;
    pthread_mutex_unlock(&fb.mu);
    return n;
}

static int64_t fired(int i)
{
    pthread_mutex_lock(&fb.mu);
    int64_t v = fb.fired[i];
    pthread_mutex_unlock(&fb.mu);
    return v;
}

/* wait_fired waits (up to 10 s of real time) until n slots were fired. */
static void wait_fired(int n)
{
    for (int i = 0; i < 1000 && nfired() < n; i++)
        tm_sleep_ms(10);
    ck_assert_int_eq(nfired(), n);
}

/* settle gives the thread time to go round a few times (it turns at
 * least every 500 ms). */
static void settle(void)
{
    tm_sleep_ms(1200);
}

#define T0 1796083200000LL /* a multiple of 2 s */

/* ------------------------------------------------------------ tests */

/* catch_up: once, every daemon down across slots: the latest missed slot
 * is fired once at start, and no other. */
START_TEST(catch_up_once_fires_the_latest)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_ONCE, T0 - 10000, T0 + 500);
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    ck_assert_ptr_nonnull(f);
    wait_fired(1);
    ck_assert_int_eq(fired(0), T0);
    settle();
    ck_assert_int_eq(nfired(), 1);
    /* then the next slot, when its time comes */
    atomic_store(&fake_now, T0 + 2000);
    wait_fired(2);
    ck_assert_int_eq(fired(1), T0 + 2000);
    tm_fire_free(f);
    unsigned long long n;
    int64_t last;
    tm_sched_stats_get(st, "tick", &n, &last);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(last, T0 + 2000);
    tm_sched_stats_free(st);
}
END_TEST

/* catch_up: skip: nothing missed is fired; a schedule never fired has
 * nothing to catch up either. */
START_TEST(skip_and_never_fired_catch_nothing)
{
    for (int k = 0; k < 2; k++) {
        struct tm_sched_stats *st = tm_sched_stats_new();
        if (k == 0)
            setup(TM_CATCH_UP_SKIP, T0 - 10000, T0 + 500);
        else
            setup(TM_CATCH_UP_ONCE, -1, T0 + 500);
        struct tm_fire *f = tm_fire_start(&broker, st, NULL);
        settle();
        ck_assert_int_eq(nfired(), 0);
        atomic_store(&fake_now, T0 + 2000);
        wait_fired(1);
        ck_assert_int_eq(fired(0), T0 + 2000);
        tm_fire_free(f);
        tm_sched_stats_free(st);
    }
}
END_TEST

/* A running daemon that finds slots late fires each of them, in order,
 * within the grace (less than TM_FIRE_GRACE_MS late); past it, skip drops
 * what is older than the grace and once fires only the latest. */
START_TEST(late_slots_and_the_grace)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_SKIP, -1, T0 + 500);
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    settle();
    atomic_store(&fake_now, T0 + 6500); /* 3 slots late */
    wait_fired(3);
    ck_assert_int_eq(fired(0), T0 + 2000);
    ck_assert_int_eq(fired(2), T0 + 6000);
    /* 5 minutes on: the slots of the last 60 s only */
    int64_t later = T0 + 6000 + 300000;
    atomic_store(&fake_now, later);
    wait_fired(3 + TM_FIRE_GRACE_MS / 2000);
    ck_assert_int_eq(fired(3), later - TM_FIRE_GRACE_MS + 2000);
    ck_assert_int_eq(fired(nfired() - 1), later);
    tm_fire_free(f);

    setup(TM_CATCH_UP_ONCE, -1, T0 + 500);
    f = tm_fire_start(&broker, st, NULL);
    settle();
    atomic_store(&fake_now, T0 + 300000 + 100);
    wait_fired(1);
    ck_assert_int_eq(fired(0), T0 + 300000);
    settle();
    ck_assert_int_eq(nfired(), 1);
    tm_fire_free(f);
    tm_sched_stats_free(st);
}
END_TEST

/* While another daemon leads, nothing is fired here; when the lead comes
 * to this daemon, it fires what the old leader left, after its last
 * slot, and nothing the old leader fired. */
START_TEST(a_lead_passed_on_fires_what_was_left)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_SKIP, -1, T0 + 500);
    pthread_mutex_lock(&fb.mu);
    fb.leads = 0;
    pthread_mutex_unlock(&fb.mu);
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    atomic_store(&fake_now, T0 + 8500);
    settle();
    ck_assert_int_eq(nfired(), 0);
    /* the old leader fired up to T0 + 4000 and died; the lead is ours */
    pthread_mutex_lock(&fb.mu);
    fb.last = T0 + 4000;
    fb.leads = 1;
    pthread_mutex_unlock(&fb.mu);
    wait_fired(2);
    ck_assert_int_eq(fired(0), T0 + 6000);
    ck_assert_int_eq(fired(1), T0 + 8000);
    settle();
    ck_assert_int_eq(nfired(), 2);
    tm_fire_free(f);
    tm_sched_stats_free(st);
}
END_TEST

/* A reload goes on from the cursor of the stopped thread: the slot that
 * passed between the stop and the start is fired, none twice. */
START_TEST(reload_goes_on_from_the_old_cursor)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_SKIP, -1, T0 + 500);
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    atomic_store(&fake_now, T0 + 2000);
    wait_fired(1);
    tm_fire_stop(f);
    atomic_store(&fake_now, T0 + 4100); /* a slot while stopped */
    struct tm_fire *g = tm_fire_start(&broker, st, f);
    tm_fire_free(f);
    wait_fired(2);
    ck_assert_int_eq(fired(1), T0 + 4000);
    settle();
    ck_assert_int_eq(nfired(), 2);
    tm_fire_free(g);
    tm_sched_stats_free(st);
}
END_TEST

/* ------------------------------------------- a broker with a clock */

/* broker_now is the fake broker's clock (epoch ms), apart from the
 * daemon's (fake_now). */
static atomic_llong broker_now;

/* clock_fire is fake_fire on a broker with a clock: a slot more than
 * TM_SCHED_EARLY_MS past its now is refused (2, *last its now). */
static int clock_fire(struct tm_sched_session *ss,
                      const struct tm_cfg_schedule *s, int64_t slot,
                      int64_t *last)
{
    int64_t now = atomic_load(&broker_now);
    if (slot > now + TM_SCHED_EARLY_MS) {
        *last = now;
        return 2;
    }
    return fake_fire(ss, s, slot, last);
}

static int clock_skew(struct tm_sched_session *ss, int64_t *skew)
{
    (void)ss;
    *skew = atomic_load(&fake_now) - atomic_load(&broker_now);
    return 0;
}

static const struct tm_broker_sched_ops clock_sched = {
    .sched_open = fake_open,
    .sched_fire = clock_fire,
    .sched_last = fake_last,
    .sched_clock = clock_skew,
    .sched_close = fake_close,
};

static const struct tm_broker_ops clock_ops = {.kind = "fake-clock",
                                               .sched = &clock_sched};

#define DAY_MS 86400000LL

/* advance moves both clocks on by ms. */
static void advance(int64_t ms)
{
    atomic_fetch_add(&fake_now, ms);
    atomic_fetch_add(&broker_now, ms);
}

/* A daemon whose clock is a day ahead fires on the broker's clock: the
 * skew is measured when the session opens, the slots are the broker's,
 * and none of the daemon's future is fired. */
START_TEST(a_fast_clock_fires_on_the_broker_clock)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_SKIP, T0 - 2000, T0 + 500 + DAY_MS);
    atomic_store(&broker_now, T0 + 500);
    broker.ops = &clock_ops;
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    ck_assert_ptr_nonnull(f);
    settle();
    ck_assert_int_eq(nfired(), 0);
    int64_t skew;
    ck_assert_int_eq(tm_sched_skew_ms(&skew), 1);
    ck_assert_int_eq(skew, DAY_MS);
    advance(2000);
    wait_fired(1);
    ck_assert_int_eq(fired(0), T0 + 2000);
    advance(2000);
    wait_fired(2);
    ck_assert_int_eq(fired(1), T0 + 4000);
    tm_fire_free(f);
    tm_sched_stats_free(st);
}
END_TEST

/* A daemon's clock that jumps a day ahead after the skew was measured:
 * the broker refuses its future slot, the refusal gives the skew, and
 * the daemon goes on with the broker's slots. */
START_TEST(a_clock_jump_is_refused_and_measured)
{
    struct tm_sched_stats *st = tm_sched_stats_new();
    setup(TM_CATCH_UP_SKIP, T0 - 2000, T0 + 500);
    atomic_store(&broker_now, T0 + 500);
    broker.ops = &clock_ops;
    struct tm_fire *f = tm_fire_start(&broker, st, NULL);
    ck_assert_ptr_nonnull(f);
    advance(2000);
    wait_fired(1);
    ck_assert_int_eq(fired(0), T0 + 2000);
    /* the next measurement is TM_SCHED_SKEW_EVERY_MS away (monotonic) */
    atomic_fetch_add(&fake_now, DAY_MS);
    settle();
    ck_assert_int_eq(nfired(), 1);
    int64_t skew;
    ck_assert_int_eq(tm_sched_skew_ms(&skew), 1);
    ck_assert(skew > DAY_MS - 1000 && skew <= DAY_MS);
    advance(2000);
    wait_fired(2);
    ck_assert_int_eq(fired(1), T0 + 4000);
    pthread_mutex_lock(&fb.mu);
    ck_assert_int_eq(fb.last, T0 + 4000);
    pthread_mutex_unlock(&fb.mu);
    tm_fire_free(f);
    tm_sched_stats_free(st);
}
END_TEST

static Suite *fire_suite(void)
{
    Suite *s = suite_create("schedule_fire");
    TCase *tc = tcase_create("fire");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, catch_up_once_fires_the_latest);
    tcase_add_test(tc, skip_and_never_fired_catch_nothing);
    tcase_add_test(tc, late_slots_and_the_grace);
    tcase_add_test(tc, a_lead_passed_on_fires_what_was_left);
    tcase_add_test(tc, reload_goes_on_from_the_old_cursor);
    tcase_add_test(tc, a_fast_clock_fires_on_the_broker_clock);
    tcase_add_test(tc, a_clock_jump_is_refused_and_measured);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(fire_suite)
