/* test_http.c - the HTTP server's connection table and its queue depth
 * refresher. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker/broker.h"
#include "daemon/daemon.h"
#include "http/http_private.h"
#include "util/util.h"

#include "unit_main.h"

/* ---- connection table ---- */

/* a cut of a dead letter's body never ends inside a UTF-8 sequence */
START_TEST(dlq_utf8_cut_backs_off_to_a_character_start)
{
    const char *s = "ab\xc3\xa9" "\xe2\x82\xac" "\xf0\x9f\x98\x80";
    /* a, b, é (2 bytes), € (3), 😀 (4) */
    static const size_t want[] = {0, 1, 2, 2, 4, 4, 4, 7, 7, 7, 7, 11};
    for (size_t n = 0; n < sizeof want / sizeof want[0]; n++)
        ck_assert_uint_eq(tm_dlq_utf8_cut(s, n), want[n]);
    /* continuation bytes without their lead are left alone */
    ck_assert_uint_eq(tm_dlq_utf8_cut("a\x80\x80\x80\x80", 5), 5);
}
END_TEST

START_TEST(conns_shed_the_longest_waiting_first)
{
    struct tm_http_conns t;
    tm_http_conns_init(&t);
    ck_assert_ptr_null(tm_http_conns_victim(&t));
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), -1);
    struct tm_http_conn *a = tm_http_conns_add(&t, 10, 100);
    struct tm_http_conn *b = tm_http_conns_add(&t, 11, 200);
    struct tm_http_conn *c = tm_http_conns_add(&t, 12, 300);
    ck_assert_uint_eq(t.nlive, 3);
    /* a is being answered: b has waited longest */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_BUSY, 400);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), b);
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), 5200);
    ck_assert_ptr_null(tm_http_conns_expired(&t, 5199, 5000));
    ck_assert_ptr_eq(tm_http_conns_expired(&t, 5200, 5000), b);
    tm_http_conns_shed(&t, b);
    ck_assert_uint_eq(t.nlive, 2);
    ck_assert_int_eq(b->state, TM_HTTP_CONN_SHED);
    /* a shed connection stays shed when its request completes */
    tm_http_conns_set(&t, b, TM_HTTP_CONN_WAITING, 500);
    ck_assert_int_eq(b->state, TM_HTTP_CONN_SHED);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), c);
    /* a's answer is sent: it waits again, after c */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_WAITING, 600);
    tm_http_conns_shed(&t, c);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), a);
    ck_assert_int_eq(tm_http_conns_next_expiry(&t, 5000), 5600);
    /* with nothing waiting, the oldest busy one goes */
    tm_http_conns_set(&t, a, TM_HTTP_CONN_BUSY, 700);
    ck_assert_ptr_eq(tm_http_conns_victim(&t), a);
    ck_assert_ptr_null(tm_http_conns_expired(&t, 100000, 5000));
    tm_http_conns_remove(&t, a);
    tm_http_conns_remove(&t, b);
    tm_http_conns_remove(&t, c);
    ck_assert_uint_eq(t.nlive, 0);
    ck_assert_ptr_null(tm_http_conns_victim(&t));
}
END_TEST

/* ---- depth refresher ---- */

/* A broker whose depth read blocks until the test lets it go, as one
 * waiting on a hung broker would. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered;      /* reads begun */
    int go;           /* reads may return */
} hang = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static int hang_depth(struct tm_broker *b, size_t ti,
                      struct tm_broker_depth *out)
{
    (void)b;
    if (ti == TM_BROKER_DEPTH_CLOSE)
        return 0;
    pthread_mutex_lock(&hang.mu);
    hang.entered++;
    pthread_cond_broadcast(&hang.cv);
    while (!hang.go)
        pthread_cond_wait(&hang.cv, &hang.mu);
    pthread_mutex_unlock(&hang.mu);
    out->depth = 7;
    out->pending = 3;
    out->dlq = 1;
    out->oldest_age_ms = 2500;
    out->delayed_due = 4;
    return 0;
}

static const struct tm_broker_admin_ops hang_admin = {.depth = hang_depth};
static const struct tm_broker_ops hang_ops = {.kind = "hang",
                                              .admin = &hang_admin};

/* the hanging broker */
static struct tm_broker hang_broker;

/* wait_refs waits up to 5 s for g to hold n references; returns them. */
static unsigned wait_refs(struct tm_gen *g, unsigned n)
{
    for (int i = 0; i < 500 && atomic_load(&g->refs) != n; i++)
        tm_sleep_ms(10);
    return atomic_load(&g->refs);
}

START_TEST(depth_refresher_does_not_hold_the_generation_lock)
{
    struct tm_daemon d;
    memset(&d, 0, sizeof d);
    pthread_rwlock_init(&d.gen_lock, NULL);
    struct tm_task tasks[2];
    memset(tasks, 0, sizeof tasks);
    hang_broker.ops = &hang_ops;
    atomic_store(&hang_broker.up, 1);
    /* a published generation: the daemon's reference is the test's */
    struct tm_gen g;
    memset(&g, 0, sizeof g);
    g.d = &d;
    g.broker = &hang_broker;
    g.tasks = tasks;
    g.ntasks = 2;
    atomic_store(&g.refs, 1);
    d.gen = &g;
    d.broker = &hang_broker;
    d.tasks = tasks;
    d.ntasks = 2;

    struct tm_http_depth *r = tm_http_depth_start(&d);
    ck_assert_ptr_nonnull(r);
    /* depths are read only when a scrape wants them: this one waits its
     * TM_DEPTH_WAIT_MS for the hung read, then returns */
    tm_http_depth_want();
    pthread_mutex_lock(&hang.mu);
    while (hang.entered == 0)
        pthread_cond_wait(&hang.cv, &hang.mu);
    pthread_mutex_unlock(&hang.mu);

    /* a reload's writer lock is not held up by the hung read */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 3;
    int rc = pthread_rwlock_timedwrlock(&d.gen_lock, &ts);
    ck_assert_msg(rc == 0, "the generation lock stays taken while the "
                  "refresher waits on the broker (%d)", rc);
    pthread_rwlock_unlock(&d.gen_lock);

    /* the read in progress holds the generation by a reference of its
     * own, so dropping the daemon's would not free it; it lets go once
     * the read returns */
    unsigned refs = atomic_load(&g.refs);
    ck_assert_uint_eq(refs, 2);
    tm_sleep_ms(200);
    refs = atomic_load(&g.refs);
    ck_assert_uint_eq(refs, 2);
    pthread_mutex_lock(&hang.mu);
    hang.go = 1;
    pthread_cond_broadcast(&hang.cv);
    pthread_mutex_unlock(&hang.mu);
    ck_assert_uint_eq(wait_refs(&g, 1), 1);
    /* the values read are those of the broker's own generation */
    ck_assert_int_eq(atomic_load(&tasks[0].stats.queue_depth), 7);
    ck_assert_int_eq(atomic_load(&tasks[1].stats.queue_pending), 3);
    ck_assert_int_eq(atomic_load(&tasks[1].stats.dead_letter_depth), 1);
    ck_assert_int_eq(atomic_load(&tasks[1].stats.oldest_age_ms), 2500);
    ck_assert_int_eq(atomic_load(&tasks[1].stats.delayed_due), 4);
    tm_http_depth_stop(r);
    /* its last pick (closing the monitoring connection) let go too */
    refs = atomic_load(&g.refs);
    ck_assert_uint_eq(refs, 1);
    pthread_rwlock_destroy(&d.gen_lock);
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, dlq_utf8_cut_backs_off_to_a_character_start);
    tcase_add_test(tc, conns_shed_the_longest_waiting_first);
    tcase_add_test(tc, depth_refresher_does_not_hold_the_generation_lock);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(http_suite)
