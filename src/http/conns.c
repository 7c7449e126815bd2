/* conns.c - the HTTP server's connection table: who waits for a request,
 * who is being answered, and which one to shed first. */
#include "http/http_private.h"

#include <assert.h>

#include "util/util.h"

static void list_init(struct tm_http_conn *head)
{
    head->prev = head->next = head;
}

static void list_unlink(struct tm_http_conn *c)
{
    c->prev->next = c->next;
    c->next->prev = c->prev;
    c->prev = c->next = c;
}

static void list_append(struct tm_http_conn *head, struct tm_http_conn *c)
{
    c->prev = head->prev;
    c->next = head;
    head->prev->next = c;
    head->prev = c;
}

static struct tm_http_conn *list_first(const struct tm_http_conn *head)
{
    return head->next != head ? head->next : NULL;
}

void tm_http_conns_init(struct tm_http_conns *t)
{
    list_init(&t->waiting);
    list_init(&t->busy);
    t->nlive = 0;
}

struct tm_http_conn *tm_http_conns_add(struct tm_http_conns *t, int fd,
                                       int64_t now)
{
    struct tm_http_conn *c = tm_calloc(1, sizeof *c);
    c->fd = fd;
    c->state = TM_HTTP_CONN_WAITING;
    c->since_ms = now;
    list_append(&t->waiting, c);
    t->nlive++;
    return c;
}

void tm_http_conns_set(struct tm_http_conns *t, struct tm_http_conn *c,
                       enum tm_http_conn_state state, int64_t now)
{
    assert(state == TM_HTTP_CONN_WAITING || state == TM_HTTP_CONN_BUSY);
    if (c->state == TM_HTTP_CONN_SHED)
        return;
    list_unlink(c);
    c->state = state;
    /* appending with the current time keeps each list in since order */
    c->since_ms = now;
    list_append(state == TM_HTTP_CONN_WAITING ? &t->waiting : &t->busy, c);
}

void tm_http_conns_shed(struct tm_http_conns *t, struct tm_http_conn *c)
{
    if (c->state == TM_HTTP_CONN_SHED)
        return;
    assert(t->nlive > 0);
    list_unlink(c);
    c->state = TM_HTTP_CONN_SHED;
    t->nlive--;
}

void tm_http_conns_remove(struct tm_http_conns *t, struct tm_http_conn *c)
{
    if (c == NULL)
        return;
    tm_http_conns_shed(t, c);
    tm_free(c);
}

struct tm_http_conn *tm_http_conns_victim(struct tm_http_conns *t)
{
    struct tm_http_conn *c = list_first(&t->waiting);
    return c != NULL ? c : list_first(&t->busy);
}

struct tm_http_conn *tm_http_conns_expired(struct tm_http_conns *t,
                                           int64_t now, int64_t deadline_ms)
{
    struct tm_http_conn *c = list_first(&t->waiting);
    return c != NULL && now - c->since_ms >= deadline_ms ? c : NULL;
}

int64_t tm_http_conns_next_expiry(const struct tm_http_conns *t,
                                  int64_t deadline_ms)
{
    const struct tm_http_conn *c = list_first(&t->waiting);
    return c != NULL ? c->since_ms + deadline_ms : -1;
}
