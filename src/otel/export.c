/* otel/export.c - the exporter: a bounded queue of finished spans, one
 * thread that takes them in batches and posts each batch to
 * <otlp_endpoint>/v1/traces as OTLP/HTTP protobuf with libcurl.
 *
 * Invariants: o->n is the length of the list o->head..o->tail and never
 * exceeds TM_OTEL_QUEUE_MAX (tm_otel_add drops instead); every span that
 * enters the exporter is counted once, in exported or in dropped, when
 * the collector answers 2xx for its batch, or when it is dropped (queue
 * full, a batch refused, retries given up, or left at stop). */
#include "otel/otel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "config/config.h"
#include "otel/curl_private.h"
#include "util/log.h"
#include "util/util.h"

#define OTEL_SRC "otel"
/* a request: to connect, and in all */
#define OTEL_CONNECT_MS 2000
#define OTEL_REQUEST_MS 10000
/* tries of one batch (the first and its retries), and the first wait
 * between them, doubling */
#define OTEL_TRIES 4
#define OTEL_BACKOFF_MS 500
#define OTEL_BACKOFF_MAX_MS 4000

struct tm_otel {
    char *url;                   /* <otlp_endpoint>/v1/traces */
    char *service_name;
    double ratio;
    struct curl_slist *headers;  /* Content-Type and telemetry.headers */

    pthread_mutex_t mu;
    pthread_cond_t cv;           /* spans came, or stop */
    struct tm_otel_span *head, *tail;
    size_t n;
    int64_t oldest_ns;           /* when the oldest queued span came */
    int stop;
    int64_t flush_ms;            /* with stop: the last send's bound */
    pthread_t thread;

    atomic_ullong exported;
    atomic_ullong dropped;
    struct tm_log_repeat err_seen; /* exporter thread only */
};

void tm_otel_add(struct tm_otel *o, struct tm_otel_span *s)
{
    if (o == NULL) {
        tm_otel_span_free(s);
        return;
    }
    s->next = NULL;
    pthread_mutex_lock(&o->mu);
    if (o->n >= TM_OTEL_QUEUE_MAX || o->stop) {
        pthread_mutex_unlock(&o->mu);
        atomic_fetch_add_explicit(&o->dropped, 1, memory_order_relaxed);
        tm_otel_span_free(s);
        return;
    }
    if (o->tail != NULL)
        o->tail->next = s;
    else
        o->head = s;
    o->tail = s;
    if (o->n++ == 0)
        o->oldest_ns = tm_now_ns();
    /* the thread waits for a full batch or the oldest span's deadline */
    if (o->n == TM_OTEL_BATCH_MAX)
        pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static void free_list(struct tm_otel_span *s)
{
    while (s != NULL) {
        struct tm_otel_span *next = s->next;
        tm_otel_span_free(s);
        s = next;
    }
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* post sends one request body; returns the HTTP status, or 0 with the
 * reason in why when no answer came (connect, timeout). */
static long post(struct tm_otel *o, CURL *c, const uint8_t *body, size_t len,
                 int64_t timeout_ms, char *why, size_t whylen)
{
    long status = 0;
    sym_curl_easy_setopt(c, CURLOPT_URL, o->url);
    sym_curl_easy_setopt(c, CURLOPT_POST, 1L);
    sym_curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)body);
    sym_curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    sym_curl_easy_setopt(c, CURLOPT_HTTPHEADER, o->headers);
    sym_curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    sym_curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(timeout_ms < OTEL_CONNECT_MS
                                    ? timeout_ms : OTEL_CONNECT_MS));
    sym_curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    sym_curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    CURLcode rc = sym_curl_easy_perform(c);
    if (rc != CURLE_OK) {
        tm_snprintf(why, whylen, "%s", sym_curl_easy_strerror(rc));
        return 0;
    }
    sym_curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    tm_snprintf(why, whylen, "HTTP %ld", status);
    return status;
}

/* retryable: the collector is busy or was not reached (OTLP/HTTP:
 * 429, 502, 503, 504 and no answer may be retried; any other status is
 * final) */
static int retryable(long status)
{
    return status == 0 || status == 429 || status == 502 || status == 503 ||
           status == 504;
}

/* wait_ms waits up to ms unless stop is set; returns stop. */
static int wait_ms(struct tm_otel *o, int64_t ms)
{
    int64_t until = tm_now_ns() + ms * 1000000;
    pthread_mutex_lock(&o->mu);
    while (!o->stop && tm_now_ns() < until)
        tm_cond_wait_ns(&o->cv, &o->mu, until - tm_now_ns());
    int stop = o->stop;
    pthread_mutex_unlock(&o->mu);
    return stop;
}

/* send_batch posts the n spans of batch, retrying with backoff while the
 * collector is busy or unreachable (only once when stopping), and counts
 * them exported or dropped. */
static void send_batch(struct tm_otel *o, CURL *c, struct tm_otel_span *batch,
                       size_t n, int stopping, int64_t flush_ms)
{
    size_t len = 0;
    uint8_t *body = tm_otel_encode(batch, n, o->service_name, &len);
    char why[256] = "";
    long status = 0;
    int64_t backoff = OTEL_BACKOFF_MS;
    for (int try = 1;; try++) {
        status = post(o, c, body, len, stopping ? flush_ms : OTEL_REQUEST_MS,
                      why, sizeof why);
        if ((status >= 200 && status < 300) || !retryable(status) ||
            stopping || try == OTEL_TRIES)
            break;
        stopping = wait_ms(o, tm_backoff_jitter(backoff));
        backoff = tm_backoff_next(backoff, OTEL_BACKOFF_MS,
                                  OTEL_BACKOFF_MAX_MS);
    }
    tm_free(body);
    if (status >= 200 && status < 300) {
        atomic_fetch_add_explicit(&o->exported, n, memory_order_relaxed);
        tm_log_repeat_reset(&o->err_seen);
        return;
    }
    atomic_fetch_add_explicit(&o->dropped, n, memory_order_relaxed);
    tm_log_write(tm_log_repeat_level(&o->err_seen, TM_LOG_WARNING, why),
                 OTEL_SRC, NULL, NULL, "export to %s failed (%s): %zu spans "
                 "dropped", o->url, why, n);
}

static void *exporter_main(void *arg)
{
    struct tm_otel *o = arg;
    CURL *c = sym_curl_easy_init();
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && o->n < TM_OTEL_BATCH_MAX) {
            if (o->n == 0) {
                tm_cond_wait_ns(&o->cv, &o->mu, 1000000000LL);
                continue;
            }
            int64_t due = o->oldest_ns + TM_OTEL_BATCH_MS * 1000000LL;
            int64_t now = tm_now_ns();
            if (now >= due)
                break;
            tm_cond_wait_ns(&o->cv, &o->mu, due - now);
        }
        if (o->n == 0 && o->stop)
            break;
        if (o->n == 0)
            continue;
        /* take one batch off the head */
        struct tm_otel_span *batch = o->head, *last = o->head;
        size_t k = 1;
        while (k < TM_OTEL_BATCH_MAX && last->next != NULL) {
            last = last->next;
            k++;
        }
        o->head = last->next;
        last->next = NULL;
        if (o->head == NULL)
            o->tail = NULL;
        o->n -= k;
        /* what is left came later than the batch: waiting since now at
         * most */
        o->oldest_ns = tm_now_ns();
        int stopping = o->stop;
        int64_t flush_ms = o->flush_ms;
        pthread_mutex_unlock(&o->mu);
        if (c != NULL)
            send_batch(o, c, batch, k, stopping, flush_ms);
        else
            atomic_fetch_add_explicit(&o->dropped, k, memory_order_relaxed);
        free_list(batch);
        pthread_mutex_lock(&o->mu);
    }
    pthread_mutex_unlock(&o->mu);
    if (c != NULL)
        sym_curl_easy_cleanup(c);
    return NULL;
}

/* release frees what tm_otel_new made, the thread stopped or never
 * started */
static void release(struct tm_otel *o)
{
    sym_curl_slist_free_all(o->headers);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    tm_free(o->url);
    tm_free(o->service_name);
    tm_free(o);
}

struct tm_otel *tm_otel_new(const struct tm_cfg *cfg, char *err,
                            size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    if (cfg->otel_endpoint == NULL)
        return NULL;
    if (tm_curl_dl_open(err, errlen) != 0)
        return NULL;
    struct tm_otel *o = tm_calloc(1, sizeof *o);
    o->url = tm_asprintf("%s/v1/traces", cfg->otel_endpoint);
    o->service_name = tm_strdup(cfg->otel_service_name != NULL
                                    ? cfg->otel_service_name
                                    : "taskmill");
    o->ratio = cfg->otel_sample_ratio;
    o->headers = sym_curl_slist_append(NULL, "Content-Type: "
                                             "application/x-protobuf");
    /* no "Expect: 100-continue" round trip on large batches */
    o->headers = sym_curl_slist_append(o->headers, "Expect:");
    for (size_t i = 0; i < cfg->otel_nheaders; i++) {
        char *line = tm_asprintf("%s: %s", cfg->otel_headers[i].name,
                                 cfg->otel_headers[i].value);
        o->headers = sym_curl_slist_append(o->headers, line);
        tm_free(line);
    }
    pthread_mutex_init(&o->mu, NULL);
    tm_cond_init(&o->cv);
    atomic_init(&o->exported, 0);
    atomic_init(&o->dropped, 0);
    int rc = pthread_create(&o->thread, NULL, exporter_main, o);
    if (rc != 0) {
        char eb[128];
        tm_snprintf(err, errlen, "telemetry: cannot start the exporter "
                    "thread: %s", tm_strerror(rc, eb, sizeof eb));
        release(o);
        return NULL;
    }
    return o;
}

void tm_otel_free(struct tm_otel *o, int64_t flush_ms)
{
    if (o == NULL)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    o->flush_ms = flush_ms > 0 ? flush_ms : 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    /* the thread leaves nothing queued: tm_otel_add drops once stop is
     * set, and the thread sent what was there */
    free_list(o->head);
    release(o);
}

double tm_otel_ratio(const struct tm_otel *o)
{
    return o != NULL ? o->ratio : 0.0;
}

void tm_otel_stats(const struct tm_otel *o, struct tm_otel_stats *out)
{
    out->exported = o != NULL ? atomic_load_explicit(
                                    (atomic_ullong *)&o->exported,
                                    memory_order_relaxed)
                              : 0;
    out->dropped = o != NULL ? atomic_load_explicit(
                                   (atomic_ullong *)&o->dropped,
                                   memory_order_relaxed)
                             : 0;
}
