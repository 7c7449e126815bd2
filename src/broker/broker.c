/* broker.c - helpers every broker adapter shares (errors, dead-letter
 * entries, libraries opened by a check). Choosing an adapter is the
 * daemon's (daemon/adapters.c): the seam knows no adapter. */
#include "broker/broker.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/util.h"

atomic_ulong tm_broker_lowat_batches;

int tm_broker_open_lib(const struct tm_cfg *cfg, struct tm_cfg_errors *e,
                       int (*open)(char *err, size_t errlen))
{
    char why[512];
    if (open(why, sizeof why) == 0)
        return 0;
    tm_cfg_error(e, cfg->url_at, "broker.url %s %s", cfg->url.redacted, why);
    return -1;
}

void tm_broker_set_error(struct tm_broker *b, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errstr, sizeof b->errstr, fmt, ap);
    va_end(ap);
    b->err = err;
}

void tm_sched_session_error(struct tm_sched_session *ss, const char *fmt,
                            ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ss->errstr, sizeof ss->errstr, fmt, ap);
    va_end(ap);
}

void tm_dlq_entries_free_one(struct tm_dlq_entry *e)
{
    tm_free(e->id);
    tm_free(e->origin_id);
    tm_free(e->task);
    tm_free(e->error);
    tm_free(e->body);
    memset(e, 0, sizeof *e);
}

void tm_dlq_entries_free(struct tm_dlq_entry *e, size_t n)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        tm_dlq_entries_free_one(&e[i]);
    tm_free(e);
}

void tm_delayed_entries_free(struct tm_delayed_entry *e, size_t n)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        tm_free(e[i].id);
        tm_free(e[i].body);
    }
    tm_free(e);
}

size_t tm_dlq_utf8_cut(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = n, back = 0;
    /* back over at most three continuation bytes to the last lead byte */
    while (i > 0 && back < 3 && (u[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0 || u[i - 1] < 0xC0)
        return n; /* ends in ASCII, or in bytes that were not UTF-8 */
    size_t want = u[i - 1] >= 0xF0 ? 4 : u[i - 1] >= 0xE0 ? 3 : 2;
    /* the last sequence is whole when its lead and continuations make
     * want bytes; else the cut goes before its lead */
    return back + 1 >= want ? n : i - 1;
}

int tm_dlq_filter_set(const struct tm_dlq_filter *f)
{
    return f != NULL && ((f->text != NULL && f->text[0] != '\0') ||
                         f->since != INT64_MIN || f->until != INT64_MAX);
}

int tm_dlq_filter_match(const struct tm_dlq_filter *f, const char *error,
                        const char *body, size_t body_len,
                        int64_t failed_at)
{
    if (f == NULL)
        return 1;
    if (failed_at < f->since || failed_at > f->until)
        return 0;
    if (f->text == NULL || f->text[0] == '\0')
        return 1;
    size_t n = strlen(f->text);
    return (error != NULL && strstr(error, f->text) != NULL) ||
           (body != NULL && memmem(body, body_len, f->text, n) != NULL);
}

size_t tm_broker_nodes(const struct tm_cfg *cfg, struct tm_broker *b,
                       struct tm_broker_node *out, size_t max)
{
    if (b != NULL && b->ops->admin->nodes != NULL)
        return b->ops->admin->nodes(b, out, max);
    int up = b != NULL && atomic_load(&b->up);
    int on = b != NULL ? atomic_load(&b->node) : -1;
    size_t k = 0;
    for (size_t i = 0; i < cfg->nnodes && k < max; i++, k++) {
        tm_snprintf(out[k].name, sizeof out[k].name, "%s",
                    cfg->nodes[i].redacted);
        out[k].up = up && on == (int)i;
    }
    return k;
}
