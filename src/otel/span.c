/* otel/span.c - one span in one allocation. */
#include "otel/otel.h"

#include <string.h>
#include <time.h>

#include "util/util.h"

/* text_size: the bytes s takes in a span's text (with its NUL) */
static size_t text_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* put copies n bytes of s and a NUL at *w; returns the copy */
static const char *put(char **w, const char *s, size_t n)
{
    char *c = *w;
    memcpy(c, s, n);
    c[n] = '\0';
    *w += n + 1;
    return c;
}

struct tm_otel_span *tm_otel_span_new(const struct tm_otel_span_in *in)
{
    size_t name_len = strlen(in->name_verb) + 1 +
                      (in->name_object != NULL ? strlen(in->name_object) : 0);
    size_t need = name_len + 1 + text_size(in->status_message) +
                  (in->tracestate != NULL ? in->tracestate_len + 1 : 0);
    size_t nattrs = in->nattrs < TM_OTEL_ATTRS_MAX ? in->nattrs
                                                   : TM_OTEL_ATTRS_MAX;
    for (size_t i = 0; i < nattrs; i++)
        need += text_size(in->attrs[i].s);
    struct tm_otel_span *s = tm_malloc(sizeof *s + need);
    memset(s, 0, sizeof *s);
    char *w = s->text;
    s->ctx = *in->ctx;
    if (in->parent != NULL) {
        memcpy(s->parent_id, in->parent->span_id, sizeof s->parent_id);
        s->has_parent = 1;
    }
    s->kind = in->kind;
    s->start_unix_ns = in->start_unix_ns;
    s->end_unix_ns = in->end_unix_ns;
    s->name = w;
    w += tm_snprintf(w, name_len + 1, "%s %s", in->name_verb,
                     in->name_object != NULL ? in->name_object : "") + 1;
    s->error = in->error;
    if (in->status_message != NULL)
        s->status_message = put(&w, in->status_message,
                                strlen(in->status_message));
    if (in->tracestate != NULL)
        s->tracestate = put(&w, in->tracestate, in->tracestate_len);
    s->nattrs = nattrs;
    for (size_t i = 0; i < nattrs; i++) {
        s->attrs[i] = in->attrs[i];
        if (in->attrs[i].s != NULL)
            s->attrs[i].s = put(&w, in->attrs[i].s, strlen(in->attrs[i].s));
    }
    return s;
}

void tm_otel_span_free(struct tm_otel_span *s)
{
    tm_free(s);
}

int64_t tm_otel_mono_to_unix_ns(int64_t mono_ns)
{
    struct timespec rt, mt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    int64_t off = ((int64_t)rt.tv_sec - (int64_t)mt.tv_sec) * 1000000000LL +
                  ((int64_t)rt.tv_nsec - (int64_t)mt.tv_nsec);
    return mono_ns + off;
}
