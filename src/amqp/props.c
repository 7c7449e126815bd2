/* amqp/props.c - RabbitMQ adapter: message properties, header tables, ids. */
#include "amqp.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h> /* getrandom: message ids */

#include "util/util.h"

amqp_bytes_t tm_amqp_bytes_of(const char *s)
{
    return sym_amqp_cstring_bytes(s != NULL ? s : "");
}

char *tm_amqp_bytes_dup(amqp_bytes_t b)
{
    return tm_strndup(b.len > 0 ? (const char *)b.bytes : "", b.len);
}

/* tm_amqp_fnv64 hashes bytes (FNV-1a): names too long for AMQP, ids of
 * dead letters that carry none. */
uint64_t tm_amqp_fnv64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

const amqp_field_value_t *tm_amqp_table_get(const amqp_table_t *t,
                                           const char *key)
{
    size_t klen = strlen(key);
    for (int i = 0; t != NULL && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == klen && memcmp(e->key.bytes, key, klen) == 0)
            return &e->value;
    }
    return NULL;
}

/* tm_amqp_field_int reads an integer header of any integer kind (or a decimal
 * string). Returns 0, or -1 when v is absent or not a number. */
int tm_amqp_field_int(const amqp_field_value_t *v, long long *out)
{
    if (v == NULL)
        return -1;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8:
        *out = v->value.i8;
        return 0;
    case AMQP_FIELD_KIND_U8:
        *out = v->value.u8;
        return 0;
    case AMQP_FIELD_KIND_I16:
        *out = v->value.i16;
        return 0;
    case AMQP_FIELD_KIND_U16:
        *out = v->value.u16;
        return 0;
    case AMQP_FIELD_KIND_I32:
        *out = v->value.i32;
        return 0;
    case AMQP_FIELD_KIND_U32:
        *out = v->value.u32;
        return 0;
    case AMQP_FIELD_KIND_I64:
        *out = v->value.i64;
        return 0;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        *out = v->value.u64 > (uint64_t)LLONG_MAX ? LLONG_MAX
                                                  : (long long)v->value.u64;
        return 0;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES: {
        char buf[24];
        if (v->value.bytes.len == 0 || v->value.bytes.len >= sizeof buf)
            return -1;
        memcpy(buf, v->value.bytes.bytes, v->value.bytes.len);
        buf[v->value.bytes.len] = '\0';
        char *end;
        errno = 0;
        long long x = strtoll(buf, &end, 10);
        if (errno != 0 || *end != '\0')
            return -1;
        *out = x;
        return 0;
    }
    default:
        return -1;
    }
}

/* tm_amqp_field_str returns a copy of a string header, or NULL. */
char *tm_amqp_field_str(const amqp_field_value_t *v)
{
    if (v == NULL || (v->kind != AMQP_FIELD_KIND_UTF8 &&
                      v->kind != AMQP_FIELD_KIND_BYTES))
        return NULL;
    return tm_amqp_bytes_dup(v->value.bytes);
}

/* taskmill_header says whether a header is one taskmill sets, or one
 * RabbitMQ adds when it dead-letters: dropped when a message is
 * republished (retry, dead letter, replay), then set again as needed. */
static int taskmill_header(amqp_bytes_t key)
{
    static const char *const exact[] = {
        "x-attempts", "x-task", "x-error", "x-failed-at", "x-origin-id",
        "x-outcome", "x-last-error", "x-death", "x-delivery-count",
    };
    static const char *const prefix[] = {"x-first-death-",
                                         "x-last-death-"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (key.len == strlen(exact[i]) &&
            memcmp(key.bytes, exact[i], key.len) == 0)
            return 1;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++) {
        size_t n = strlen(prefix[i]);
        if (key.len >= n && memcmp(key.bytes, prefix[i], n) == 0)
            return 1;
    }
    return 0;
}

static amqp_table_entry_t *hdr_add(struct tm_amqp_hdrs *h, const char *key)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->e = tm_realloc(h->e, (size_t)h->cap * sizeof *h->e);
    }
    amqp_table_entry_t *e = &h->e[h->n++];
    memset(e, 0, sizeof *e);
    e->key = sym_amqp_cstring_bytes(key);
    return e;
}

void tm_amqp_hdr_str(struct tm_amqp_hdrs *h, const char *key, const char *val,
                    size_t max)
{
    amqp_table_entry_t *e = hdr_add(h, key);
    size_t n = strlen(val);
    if (n > max) {
        /* cut on a UTF-8 character boundary */
        n = max;
        while (n > 0 && ((unsigned char)val[n] & 0xC0) == 0x80)
            n--;
    }
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes.len = n;
    e->value.value.bytes.bytes = (void *)(uintptr_t)val;
}

void tm_amqp_hdr_i64(struct tm_amqp_hdrs *h, const char *key, int64_t v)
{
    amqp_table_entry_t *e = hdr_add(h, key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = v;
}

/* tm_amqp_hdr_user copies the headers of src that are not taskmill's own. */
void tm_amqp_hdr_user(struct tm_amqp_hdrs *h, const amqp_table_t *src)
{
    for (int i = 0; src != NULL && i < src->num_entries; i++) {
        if (taskmill_header(src->entries[i].key))
            continue;
        hdr_add(h, "");
        h->e[h->n - 1] = src->entries[i];
    }
}

amqp_table_t tm_amqp_hdr_table(const struct tm_amqp_hdrs *h)
{
    amqp_table_t t = {.num_entries = h->n, .entries = h->e};
    return t;
}

/* tm_amqp_base_props fills the properties a republished copy keeps. */
void tm_amqp_base_props(amqp_basic_properties_t *p,
                       const struct tm_amqp_delivery *d)
{
    memset(p, 0, sizeof *p);
    p->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                AMQP_BASIC_HEADERS_FLAG;
    p->content_type = tm_amqp_bytes_of(
        d->content_type != NULL ? d->content_type : "application/json");
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    if (d->has_priority) {
        p->_flags |= AMQP_BASIC_PRIORITY_FLAG;
        p->priority = d->priority;
    }
    if (d->reply_to != NULL) {
        p->_flags |= AMQP_BASIC_REPLY_TO_FLAG;
        p->reply_to = tm_amqp_bytes_of(d->reply_to);
    }
    if (d->correlation_id != NULL) {
        p->_flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
        p->correlation_id = tm_amqp_bytes_of(d->correlation_id);
    }
}

void tm_amqp_new_message_props(amqp_basic_properties_t *p,
                              const struct tm_cfg_task *t, int priority,
                              const char *id)
{
    memset(p, 0, sizeof *p);
    p->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG |
                AMQP_BASIC_APP_ID_FLAG;
    p->content_type = sym_amqp_cstring_bytes("application/json");
    p->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    p->message_id = sym_amqp_cstring_bytes(id);
    p->timestamp = (uint64_t)(tm_wall_ms() / 1000);
    p->app_id = sym_amqp_cstring_bytes("taskmill");
    if (priority < 0 && t->max_priority > 0)
        priority = t->priority;
    if (priority >= 0) {
        p->_flags |= AMQP_BASIC_PRIORITY_FLAG;
        p->priority = (uint8_t)priority;
    }
}
