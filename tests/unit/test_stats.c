/* test_stats.c - completion rates, duration percentiles, AsyncAPI ids. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "http/asyncapi.h"
#include "broker/broker.h"
#include "task/stats.h"
#include "util/util.h"

#include "unit_main.h"

#define S 1000000000LL /* one second in ns */

START_TEST(rate_counts_complete_seconds)
{
    struct tm_rate *r = tm_calloc(1, sizeof *r);
    int64_t t0 = 1000 * S; /* start of the daemon */
    double r1, r60;
    /* 10 completions in second 1000, 20 in second 1001, 5 in 1002 */
    for (int i = 0; i < 10; i++)
        tm_rate_note(r, t0 + i * (S / 20));
    for (int i = 0; i < 20; i++)
        tm_rate_note(r, t0 + S + i * (S / 40));
    for (int i = 0; i < 5; i++)
        tm_rate_note(r, t0 + 2 * S + i);
    /* during second 1000: nothing complete yet */
    tm_rate_read(r, t0 + S / 2, t0, &r1, &r60);
    ck_assert(r1 == 0 && r60 == 0);
    /* during second 1002: the last second had 20; 30 over 2 s */
    tm_rate_read(r, t0 + 2 * S + S / 2, t0, &r1, &r60);
    ck_assert(r1 == 20);
    ck_assert(r60 == 15);
    /* a minute later, only the window counts */
    tm_rate_read(r, t0 + 61 * S, t0, &r1, &r60);
    ck_assert(r1 == 0);
    ck_assert(r60 == 25.0 / 60.0);
    tm_rate_read(r, t0 + 70 * S, t0, &r1, &r60);
    ck_assert(r1 == 0 && r60 == 0);
    tm_free(r);
}
END_TEST

START_TEST(rate_ring_wraps_and_late_reports_stay_recent)
{
    struct tm_rate *r = tm_calloc(1, sizeof *r);
    int64_t t0 = 5000 * S;
    double r1, r60;
    /* one completion per second for 200 s: the ring wraps three times */
    for (int s = 0; s < 200; s++)
        tm_rate_note(r, t0 + s * S);
    tm_rate_read(r, t0 + 200 * S, t0, &r1, &r60);
    ck_assert(r1 == 1);
    ck_assert(r60 == 1);
    /* a report 100 s late is counted in the newest second, and does not
     * wipe a slot of the window */
    tm_rate_note(r, t0 + 99 * S);
    tm_rate_read(r, t0 + 200 * S, t0, &r1, &r60);
    ck_assert(r1 == 2);
    ck_assert(r60 == 61.0 / 60.0);
    tm_free(r);
}
END_TEST

START_TEST(percentiles_nearest_rank)
{
    struct tm_durwin *w = tm_calloc(1, sizeof *w);
    double p50, p99;
    ck_assert_uint_eq(tm_durwin_percentiles(w, &p50, &p99), 0);
    ck_assert(p50 == 0 && p99 == 0);
    /* 1..100 ms, in reverse order */
    for (int i = 100; i >= 1; i--)
        tm_durwin_note(w, (int64_t)i * 1000000);
    ck_assert_uint_eq(tm_durwin_percentiles(w, &p50, &p99), 100);
    ck_assert(p50 == 50);
    ck_assert(p99 == 99);
    /* negative and huge durations are clamped, never wrap */
    tm_durwin_note(w, -5);
    tm_durwin_note(w, (int64_t)1 << 62);
    ck_assert_uint_eq(tm_durwin_percentiles(w, &p50, &p99), 102);
    ck_assert(p99 <= 4294967.295 + 1e-6);
    tm_free(w);
}
END_TEST

START_TEST(percentiles_keep_the_last_window)
{
    struct tm_durwin *w = tm_calloc(1, sizeof *w);
    double p50, p99;
    /* an old slow period, then TM_DUR_WINDOW fast runs */
    for (int i = 0; i < 5000; i++)
        tm_durwin_note(w, 2 * S);
    for (int i = 0; i < TM_DUR_WINDOW; i++)
        tm_durwin_note(w, 1500000); /* 1.5 ms */
    ck_assert_uint_eq(tm_durwin_percentiles(w, &p50, &p99), TM_DUR_WINDOW);
    ck_assert(p50 == 1.5);
    ck_assert(p99 == 1.5);
    /* sub-microsecond runs round to the nearest microsecond */
    memset(w, 0, sizeof *w);
    tm_durwin_note(w, 400);
    tm_durwin_note(w, 600);
    tm_durwin_percentiles(w, &p50, &p99);
    ck_assert(p50 == 0);
    ck_assert(p99 == 0.001);
    tm_free(w);
}
END_TEST

START_TEST(copies_keep_what_was_counted)
{
    struct tm_rate *r = tm_calloc(1, sizeof *r);
    struct tm_rate *rc = tm_calloc(1, sizeof *rc);
    struct tm_durwin *w = tm_calloc(1, sizeof *w);
    struct tm_durwin *wc = tm_calloc(1, sizeof *wc);
    int64_t t0 = 3000 * S;
    double r1, r60, p50, p99;
    for (int s = 0; s < 10; s++)
        for (int i = 0; i <= s; i++)
            tm_rate_note(r, t0 + s * S);
    for (int i = 1; i <= 100; i++)
        tm_durwin_note(w, (int64_t)i * 1000000);
    tm_rate_copy(rc, r);
    tm_durwin_copy(wc, w);
    tm_rate_read(rc, t0 + 10 * S, t0, &r1, &r60);
    ck_assert(r1 == 10);
    ck_assert(r60 == 5.5);
    ck_assert_uint_eq(tm_durwin_percentiles(wc, &p50, &p99), 100);
    ck_assert(p50 == 50 && p99 == 99);
    /* the copy goes on from where the original was: a late report still
     * lands in the newest second */
    tm_rate_note(rc, t0 + 2 * S);
    tm_rate_read(rc, t0 + 10 * S, t0, &r1, &r60);
    ck_assert(r1 == 11);
    tm_free(r);
    tm_free(rc);
    tm_free(w);
    tm_free(wc);
}
END_TEST

/* writer keeps noting into a rate and a duration window until told to
 * stop, as a settle thread does while a reload copies them */
struct writer {
    struct tm_rate rate;
    struct tm_durwin durs;
    atomic_int stop;
};

static void *writer_main(void *arg)
{
    struct writer *wr = arg;
    int64_t t = 7000 * S;
    while (!atomic_load(&wr->stop)) {
        tm_rate_note(&wr->rate, t);
        tm_durwin_note(&wr->durs, t % S);
        t += S / 64;
    }
    return NULL;
}

/* Under ThreadSanitizer (make check-tsan), a copy that is not made of
 * atomic loads is reported here as a data race. */
START_TEST(copies_race_free_with_the_writer)
{
    struct writer *wr = tm_calloc(1, sizeof *wr);
    struct tm_rate *rc = tm_calloc(1, sizeof *rc);
    struct tm_durwin *wc = tm_calloc(1, sizeof *wc);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, writer_main, wr), 0);
    /* wait until the writer has written something, then copy while it
     * goes on */
    while (atomic_load(&wr->durs.n) < 100)
        sched_yield();
    for (int i = 0; i < 50; i++) {
        tm_rate_copy(rc, &wr->rate);
        tm_durwin_copy(wc, &wr->durs);
    }
    atomic_store(&wr->stop, 1);
    pthread_join(th, NULL);
    ck_assert(atomic_load(&wc->n) >= 100);
    ck_assert(atomic_load(&rc->newest) >= 7000);
    tm_free(wr);
    tm_free(rc);
    tm_free(wc);
}
END_TEST

/* the AsyncAPI document: ids fit ^[A-Za-z0-9_-]+$, stay unique, and
 * local $refs of a plugin schema are rebased into the document */
START_TEST(asyncapi_ids_and_refs)
{
    struct tm_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.url.kind = TM_BROKER_AMQP;
    cfg.url.scheme = (char *)"amqp";
    cfg.url.host = (char *)"::1";
    cfg.url.port = 5672;
    cfg.url.vhost = (char *)"/";
    struct tm_cfg_task ct[2];
    memset(ct, 0, sizeof ct);
    ct[0].name = (char *)"a.b";
    ct[0].queue = (char *)"q.a";
    ct[1].name = (char *)"a_b";
    ct[1].queue = (char *)"q.b";
    struct tm_plugin p;
    memset(&p, 0, sizeof p);
    p.desc.name = "x";
    p.desc.version = "1";
    p.desc.request_schema =
        "{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"type\":\"object\","
        "\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}";
    p.desc.response_schema = "true"; /* not an object: no reply */
    struct tm_task t[2];
    memset(t, 0, sizeof t);
    t[0].cfg = &ct[0];
    t[0].plugin = &p;
    t[1].cfg = &ct[1];
    size_t len;
    char *text = tm_asyncapi_render(&cfg, t, 2, &len);
    ck_assert_ptr_nonnull(text);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_ptr_nonnull(doc);
    const cJSON *ch = cJSON_GetObjectItem(doc, "channels");
    ck_assert_int_eq(cJSON_GetArraySize(ch), 2);
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "a_b"),
                                         "address")->valuestring, "q.a");
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "a_b-2"),
                                         "address")->valuestring, "q.b");
    const cJSON *server = cJSON_GetObjectItem(
        cJSON_GetObjectItem(doc, "servers"), "broker");
    ck_assert_str_eq(cJSON_GetObjectItem(server, "host")->valuestring,
                     "[::1]:5672");
    ck_assert_ptr_nonnull(strstr(
        text, "\"$ref\":\"#/channels/a_b/messages/request/payload/$defs/n\""));
    ck_assert_ptr_nonnull(strstr(
        text, "\"$ref\":\"#/channels/a_b/messages/request/payload\""));
    const cJSON *ops = cJSON_GetObjectItem(doc, "operations");
    ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(ops, "a_b"),
                                           "reply"));
    cJSON_Delete(doc);
    tm_free(text);
}
END_TEST

/* jget follows a path of object keys from o; NULL when one is missing. */
static const cJSON *jget(const cJSON *o, const char *a, const char *b,
                         const char *c, const char *d)
{
    const char *keys[] = {a, b, c, d};
    for (size_t i = 0; i < 4 && o != NULL && keys[i] != NULL; i++)
        o = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
    return o;
}

/* jstr is the string at a path, or "" */
static const char *jstr(const cJSON *o, const char *a, const char *b,
                        const char *c, const char *d)
{
    const cJSON *v = jget(o, a, b, c, d);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* render_two renders tasks "send_mail" (schemas with nested objects, an
 * enumeration and a plugin title) and "send.mail" (no schema) on a
 * broker of kind; returns the parsed document. */
static cJSON *render_two(enum tm_broker_kind kind)
{
    struct tm_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.url.kind = kind;
    cfg.url.scheme = (char *)(kind == TM_BROKER_AMQP ? "amqp" : "redis");
    cfg.url.host = (char *)"127.0.0.1";
    cfg.url.port = 1;
    struct tm_cfg_task ct[2];
    memset(ct, 0, sizeof ct);
    ct[0].name = (char *)"send_mail";
    ct[0].queue = (char *)"q.m";
    ct[1].name = (char *)"send.mail";
    ct[1].queue = (char *)"q.m2";
    struct tm_plugin p;
    memset(&p, 0, sizeof p);
    p.desc.name = "mail";
    p.desc.version = "1";
    p.desc.request_schema =
        "{\"title\":\"Mail\",\"type\":\"object\",\"properties\":{"
        "\"to\":{\"type\":\"object\",\"properties\":{\"addr\":"
        "{\"type\":\"string\"}}},"
        "\"prio\":{\"enum\":[\"low\",\"high\"]},"
        "\"cc\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
        "\"properties\":{\"addr\":{\"type\":\"string\"}}}},"
        "\"n\":{\"type\":\"integer\"}}}";
    p.desc.response_schema =
        "{\"type\":\"object\",\"properties\":{\"sent\":"
        "{\"type\":\"boolean\"}}}";
    struct tm_task t[2];
    memset(t, 0, sizeof t);
    t[0].cfg = &ct[0];
    t[0].plugin = &p;
    t[1].cfg = &ct[1];
    size_t len;
    char *text = tm_asyncapi_render(&cfg, t, 2, &len);
    ck_assert_ptr_nonnull(text);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_ptr_nonnull(doc);
    tm_free(text);
    return doc;
}

/* every message and every schema that becomes a type has a name from
 * its task; a reply only where the broker has request/reply */
START_TEST(asyncapi_model_names)
{
    cJSON *doc = render_two(TM_BROKER_AMQP);
    const cJSON *ch = cJSON_GetObjectItem(doc, "channels");
    const cJSON *req = jget(ch, "send_mail", "messages", "request", NULL);
    ck_assert_str_eq(jstr(req, "name", NULL, NULL, NULL), "SendMailRequest");
    const cJSON *pl = cJSON_GetObjectItem(req, "payload");
    ck_assert_str_eq(jstr(pl, "title", NULL, NULL, NULL), "SendMailRequest");
    ck_assert_str_eq(jstr(pl, "description", NULL, NULL, NULL), "Mail");
    ck_assert_str_eq(jstr(pl, "properties", "to", "title", NULL),
                     "SendMailRequestTo");
    ck_assert_str_eq(jstr(pl, "properties", "prio", "title", NULL),
                     "SendMailRequestPrio");
    ck_assert_str_eq(jstr(pl, "properties", "cc", "items", "title"),
                     "SendMailRequestCcItem");
    ck_assert_ptr_null(jget(pl, "properties", "n", "title", NULL));
    /* the second task's PascalCase is taken: a number is added */
    const cJSON *req2 = jget(ch, "send_mail-2", "messages", "request", NULL);
    ck_assert_str_eq(jstr(req2, "name", NULL, NULL, NULL),
                     "SendMail2Request");
    ck_assert_str_eq(jstr(req2, "payload", "title", NULL, NULL),
                     "SendMail2Request");
    const cJSON *reply = jget(doc, "operations", "send_mail", "reply",
                              "channel");
    ck_assert_ptr_nonnull(reply);
    const cJSON *rep = jget(ch, "send_mail_reply", "messages", "reply", NULL);
    ck_assert_str_eq(jstr(rep, "name", NULL, NULL, NULL), "SendMailResponse");
    ck_assert_str_eq(jstr(rep, "payload", "title", NULL, NULL),
                     "SendMailResponse");
    cJSON_Delete(doc);

    /* on Redis, a reply only when its adapter has request/reply */
    int redis_replies = tm_broker_redis_ops.produce->request != NULL;
    doc = render_two(TM_BROKER_REDIS);
    ck_assert_int_eq(jget(doc, "operations", "send_mail", "reply", NULL) !=
                         NULL, redis_replies);
    ck_assert_int_eq(jget(doc, "channels", "send_mail_reply", NULL, NULL) !=
                         NULL, redis_replies);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc,
                                                            "channels")),
                     2 + redis_replies);
    cJSON_Delete(doc);
}
END_TEST

static Suite *stats_suite(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rate_counts_complete_seconds);
    tcase_add_test(tc, rate_ring_wraps_and_late_reports_stay_recent);
    tcase_add_test(tc, percentiles_nearest_rank);
    tcase_add_test(tc, percentiles_keep_the_last_window);
    tcase_add_test(tc, copies_keep_what_was_counted);
    tcase_add_test(tc, copies_race_free_with_the_writer);
    tcase_add_test(tc, asyncapi_ids_and_refs);
    tcase_add_test(tc, asyncapi_model_names);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(stats_suite)
