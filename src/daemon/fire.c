/* fire.c - the daemon's firing thread: one for all the schedules of a
 * configuration, asleep until the next slot; the broker publishes each
 * slot once, whatever the number of daemons trying. */
#include "daemon/fire.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "broker/broker.h"
#include "config/config.h"
#include "util/log.h"
#include "schedule/schedule.h"
#include "util/util.h"

#define SRC "schedule"

/* The thread looks at its stop flag (and, on RabbitMQ, serves the
 * session) at least this often. */
#define TM_FIRE_TURN_MS 500
/* Reconnect backoff of the session: first delay and cap. */
#define TM_FIRE_BACKOFF_MIN_MS 200
#define TM_FIRE_BACKOFF_MAX_MS 5000

/* ---- counts ------------------------------------------------------------- */

struct stat_row {
    char *name;
    unsigned long long fired;
    int64_t last_ms;
};

struct tm_sched_stats {
    pthread_mutex_t mu;
    struct stat_row *v;
    size_t n, cap;
};

struct tm_sched_stats *tm_sched_stats_new(void)
{
    struct tm_sched_stats *st = tm_calloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    return st;
}

void tm_sched_stats_free(struct tm_sched_stats *st)
{
    if (st == NULL)
        return;
    for (size_t i = 0; i < st->n; i++)
        tm_free(st->v[i].name);
    tm_free(st->v);
    pthread_mutex_destroy(&st->mu);
    tm_free(st);
}

/* row finds name's row, adding it when add is set (mu held). */
static struct stat_row *row(struct tm_sched_stats *st, const char *name,
                            int add)
{
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->v[i].name, name) == 0)
            return &st->v[i];
    if (!add)
        return NULL;
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 8;
        st->v = tm_realloc(st->v, st->cap * sizeof *st->v);
    }
    struct stat_row *r = &st->v[st->n++];
    r->name = tm_strdup(name);
    r->fired = 0;
    r->last_ms = -1;
    return r;
}

void tm_sched_stats_note(struct tm_sched_stats *st, const char *name,
                         int fired, int64_t last_ms)
{
    pthread_mutex_lock(&st->mu);
    struct stat_row *r = row(st, name, 1);
    if (fired)
        r->fired++;
    if (last_ms > r->last_ms)
        r->last_ms = last_ms;
    pthread_mutex_unlock(&st->mu);
}

void tm_sched_stats_get(struct tm_sched_stats *st, const char *name,
                        unsigned long long *fired, int64_t *last_ms)
{
    pthread_mutex_lock(&st->mu);
    const struct stat_row *r = row(st, name, 0);
    *fired = r != NULL ? r->fired : 0;
    *last_ms = r != NULL ? r->last_ms : -1;
    pthread_mutex_unlock(&st->mu);
}

/* ---- the firing thread -------------------------------------------------- */

/* struct cursor is where one schedule stands: next is the next slot to
 * fire (INT64_MAX: none left); started once the thread placed it (from
 * the broker's last fired slot, or from the configuration replaced).
 * follower: the broker said another daemon leads the schedule (RabbitMQ)
 * and did not say whether next was fired: next stays due here, tried
 * again every turn, so that if the lead passes to this daemon it fires
 * what the old leader left (up to TM_FIRE_GRACE_MS back). */
struct cursor {
    const struct tm_cfg_schedule *s;
    int64_t next;
    int started;
    int follower;
};

struct tm_fire {
    struct tm_broker *b;
    struct tm_sched_stats *st;
    struct cursor *cur;        /* one per schedule of b->cfg */
    size_t n;
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* stop */
    atomic_int stop;
    struct tm_sched_session *ss; /* the thread's; NULL while closed */
    int64_t started_ms;        /* when tm_fire_start ran, on this
                                  daemon's clock: schedules are placed
                                  from then (on the broker's clock: minus
                                  the skew), so that slots passing while
                                  the first session opens are fired late,
                                  not skipped */
    int64_t skew_at;           /* monotonic ms of the last skew
                                  measurement of this thread, 0: none */
};

/* wait_ms sleeps up to ms, or until a stop is asked. */
static void wait_ms(struct tm_fire *f, int64_t ms)
{
    pthread_mutex_lock(&f->mu);
    if (!atomic_load(&f->stop) && ms > 0)
        tm_cond_wait_ns(&f->cv, &f->mu, ms * 1000000LL);
    pthread_mutex_unlock(&f->mu);
}

static void close_session(struct tm_fire *f)
{
    f->b->ops->sched->sched_close(f->ss);
    f->ss = NULL;
}

/* next_after is the first slot of s strictly after t, INT64_MAX if none. */
static int64_t next_after(const struct tm_cfg_schedule *s, int64_t t)
{
    int64_t slot;
    return tm_sched_next(&s->spec, t, &slot) == 0 ? slot : INT64_MAX;
}

/*
 * place puts a schedule's cursor at start, from the last slot fired (by
 * any daemon; the broker keeps it): with catch_up: once and a slot
 * missed since, that latest missed slot (fired at once); otherwise the
 * first slot after now. A schedule never fired has nothing to catch up.
 * now is when the firing started. Returns 0, or -1 when the broker could
 * not be read.
 */
static int place(struct tm_fire *f, struct cursor *c, int64_t now)
{
    int64_t last = -1, prev = -1;
    if (f->b->ops->sched->sched_last(f->ss, c->s, &last) != 0)
        return -1;
    tm_sched_stats_note(f->st, c->s->name, 0, last);
    c->next = next_after(c->s, now);
    if (c->s->catch_up == TM_CATCH_UP_ONCE && last >= 0 &&
        tm_sched_prev(&c->s->spec, now, &prev) == 0 && prev > last) {
        tm_log_info(SRC, "schedule '%s': catching up slot %lld, missed "
                    "while no daemon ran it", c->s->name, (long long)prev);
        c->next = prev;
    }
    c->started = 1;
    return 0;
}

/*
 * fire_due fires the due slots of one schedule, in order. A cursor left
 * behind by more than TM_FIRE_GRACE_MS (the broker was unreachable, the
 * process stopped) is moved on as after downtime: with catch_up: once to
 * the latest slot due, otherwise to the first slot within the grace.
 * Returns 0, or -1 when the session broke (the slot stays due).
 */
static int fire_due(struct tm_fire *f, struct cursor *c, int64_t now)
{
    int64_t prev;
    if (c->follower && c->next < now - TM_FIRE_GRACE_MS) {
        /* the leader fired these, or will answer for them */
        c->next = next_after(c->s, now - TM_FIRE_GRACE_MS);
    } else if (c->next < now - TM_FIRE_GRACE_MS &&
        tm_sched_prev(&c->s->spec, now, &prev) == 0 && prev >= c->next) {
        int64_t from = c->next;
        c->next = c->s->catch_up == TM_CATCH_UP_ONCE
                      ? prev
                      : next_after(c->s, now - TM_FIRE_GRACE_MS);
        tm_log_warn(SRC, "schedule '%s': slots from %lld on were missed "
                    "(more than %d s late); %s", c->s->name,
                    (long long)from, TM_FIRE_GRACE_MS / 1000,
                    c->s->catch_up == TM_CATCH_UP_ONCE
                        ? "catching up the latest once"
                        : "skipped (catch_up: skip)");
    }
    while (c->next <= now && !atomic_load(&f->stop)) {
        int64_t last = -1;
        int64_t asked = tm_sched_now_ms();
        int rc = f->b->ops->sched->sched_fire(f->ss, c->s, c->next, &last);
        if (rc < 0)
            return -1;
        if (rc == 2) {
            /* the slot is in the future on the broker's clock (last is
             * its now): this daemon's clock jumped ahead since the last
             * measurement. Note the skew (no round-trip correction: it
             * is far beyond it), and go on from the broker's now */
            tm_sched_skew_note(asked - last);
            f->skew_at = tm_now_ms();
            c->next = next_after(c->s, last - 1);
            break;
        }
        c->follower = rc == 0 && last < 0;
        if (c->follower)
            break;
        tm_sched_stats_note(f->st, c->s->name, rc == 1,
                            rc == 1 ? c->next : last);
        if (rc == 1)
            tm_log_write(TM_LOG_DEBUG, SRC, NULL, NULL, "schedule '%s': "
                         "fired slot %lld", c->s->name, (long long)c->next);
        /* slots strictly increase: the loop ends */
        int64_t n = next_after(c->s, c->next);
        assert(n > c->next);
        c->next = n;
    }
    return 0;
}

/* measure_skew measures the skew from the broker's clock when the
 * broker has one and the last measurement is TM_SCHED_SKEW_EVERY_MS old
 * (or there was none). 0, or -1 when the session broke. */
static int measure_skew(struct tm_fire *f)
{
    int64_t skew, mono = tm_now_ms();
    if (f->b->ops->sched->sched_clock == NULL ||
        (f->skew_at != 0 && mono - f->skew_at < TM_SCHED_SKEW_EVERY_MS))
        return 0;
    if (f->b->ops->sched->sched_clock(f->ss, &skew) != 0)
        return -1;
    tm_sched_skew_note(skew);
    f->skew_at = mono != 0 ? mono : 1;
    return 0;
}

static void *fire_main(void *arg)
{
    struct tm_fire *f = arg;
    const struct tm_broker_ops *ops = f->b->ops;
    /* a failure is logged once, until a round goes through again; the
     * attempts back off exponentially meanwhile */
    int64_t backoff = TM_FIRE_BACKOFF_MIN_MS;
    int logged = 0;
    char err[512];
    while (!atomic_load(&f->stop)) {
        if (f->ss == NULL) {
            f->ss = ops->sched->sched_open(f->b, 1, err, sizeof err);
            if (f->ss == NULL) {
                if (!logged)
                    tm_log_warn(SRC, "cannot reach the broker to fire "
                                "schedules: %s; retrying", err);
                logged = 1;
                wait_ms(f, backoff);
                backoff = tm_backoff_next(backoff, TM_FIRE_BACKOFF_MIN_MS,
                                          TM_FIRE_BACKOFF_MAX_MS);
                continue;
            }
        }
        int broken = measure_skew(f) != 0;
        /* slots are decided on the broker's clock where it has one */
        int64_t skew;
        tm_sched_skew_ms(&skew);
        int64_t now = tm_sched_now_ms() - skew;
        int64_t wake = INT64_MAX;
        for (size_t i = 0; i < f->n && !broken; i++) {
            struct cursor *c = &f->cur[i];
            if (!c->started && place(f, c, f->started_ms - skew) != 0)
                broken = 1;
            else if (fire_due(f, c, now) != 0)
                broken = 1;
            else if (c->follower && c->next <= now)
                wake = wake < now + TM_FIRE_TURN_MS ? wake
                                                    : now + TM_FIRE_TURN_MS;
            else if (c->next < wake)
                wake = c->next;
        }
        if (broken) {
            if (!logged)
                tm_log_warn(SRC, "firing schedules: %s; reconnecting",
                            f->ss->errstr);
            logged = 1;
            close_session(f);
            wait_ms(f, backoff);
            backoff = tm_backoff_next(backoff, TM_FIRE_BACKOFF_MIN_MS,
                                          TM_FIRE_BACKOFF_MAX_MS);
            continue;
        }
        if (logged)
            tm_log_info(SRC, "firing schedules again");
        logged = 0;
        backoff = TM_FIRE_BACKOFF_MIN_MS;
        int64_t ms = wake == INT64_MAX ? TM_FIRE_TURN_MS
                                       : wake - tm_sched_broker_now_ms();
        if (ms > TM_FIRE_TURN_MS)
            ms = TM_FIRE_TURN_MS;
        if (ms < 0)
            ms = 0;
        if (ops->sched->sched_serve != NULL) {
            if (ops->sched->sched_serve(f->ss, ms) != 0) {
                tm_log_warn(SRC, "schedule session: %s; reconnecting",
                            f->ss->errstr);
                close_session(f);
            }
        } else {
            wait_ms(f, ms);
        }
    }
    if (f->ss != NULL)
        close_session(f);
    return NULL;
}

/* same_slots tells whether a and b have the same slots (and task). */
static int same_slots(const struct tm_cfg_schedule *a,
                      const struct tm_cfg_schedule *b)
{
    return strcmp(a->name, b->name) == 0 && strcmp(a->task, b->task) == 0 &&
           strcmp(a->spec_text, b->spec_text) == 0 &&
           (a->timezone == NULL) == (b->timezone == NULL) &&
           (a->timezone == NULL || strcmp(a->timezone, b->timezone) == 0);
}

struct tm_fire *tm_fire_start(struct tm_broker *b, struct tm_sched_stats *st,
                              const struct tm_fire *prev)
{
    const struct tm_cfg *cfg = b->cfg;
    if (cfg->nschedules == 0 || b->ops->sched->sched_open == NULL)
        return NULL;
    struct tm_fire *f = tm_calloc(1, sizeof *f);
    f->b = b;
    f->st = st;
    f->started_ms = tm_sched_now_ms();
    f->n = cfg->nschedules;
    f->cur = tm_calloc(f->n, sizeof *f->cur);
    for (size_t i = 0; i < f->n; i++) {
        struct cursor *c = &f->cur[i];
        c->s = &cfg->schedules[i];
        /* a stopped thread's cursors are read without its lock: its
         * thread was joined */
        for (size_t j = 0; prev != NULL && j < prev->n; j++) {
            assert(!prev->running);
            if (prev->cur[j].started && same_slots(prev->cur[j].s, c->s)) {
                c->next = prev->cur[j].next;
                c->started = 1;
            }
        }
    }
    pthread_mutex_init(&f->mu, NULL);
    tm_cond_init(&f->cv);
    if (pthread_create(&f->thread, NULL, fire_main, f) != 0) {
        tm_log_err(SRC, "cannot start the thread that fires schedules");
        tm_fire_free(f);
        return NULL;
    }
    f->running = 1;
    return f;
}

void tm_fire_stop(struct tm_fire *f)
{
    if (f == NULL || !f->running)
        return;
    pthread_mutex_lock(&f->mu);
    atomic_store(&f->stop, 1);
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    f->running = 0;
}

void tm_fire_free(struct tm_fire *f)
{
    if (f == NULL)
        return;
    tm_fire_stop(f);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    tm_free(f->cur);
    tm_free(f);
}
