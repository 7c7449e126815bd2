/* amqp/publish.c - RabbitMQ publishing: confirm trackers, returns. */
#include "amqp.h"

#include <string.h>

#include "log.h"
#include "util.h"

void tm_amqp_pub_reset(struct tm_amqp_pub *p, int open)
{
    p->open = open;
    p->next_seq = 1;
    p->lo = 1;
    p->waiting = 0;
}

void tm_amqp_pub_round(struct tm_amqp_pub *p)
{
    p->lo = p->next_seq;
    p->waiting = 0;
}

void tm_amqp_pub_confirm(struct tm_amqp_pub *p, uint64_t tag, int multiple,
                        unsigned char st)
{
    uint64_t from = multiple ? p->lo : tag;
    if (from < p->lo)
        from = p->lo;
    for (uint64_t s = from; s <= tag && s < p->next_seq; s++) {
        unsigned char *x = &p->st[s - p->lo];
        if (*x == TM_AMQP_WAITING) {
            *x = st;
            p->waiting--;
        }
    }
}

void tm_amqp_pub_lose_all(struct tm_amqp_pub *p)
{
    for (uint64_t s = p->lo; s < p->next_seq; s++)
        if (p->st[s - p->lo] == TM_AMQP_WAITING)
            p->st[s - p->lo] = TM_AMQP_LOST;
    p->waiting = 0;
}

unsigned char tm_amqp_pub_state(const struct tm_amqp_pub *p, uint64_t seq)
{
    if (seq < p->lo || seq >= p->next_seq)
        return TM_AMQP_LOST;
    return p->st[seq - p->lo];
}

/* tm_amqp_pub_send publishes one message on a confirm channel through the
 * default exchange. Returns its confirm sequence, or 0 when the
 * connection failed. */
uint64_t tm_amqp_pub_send(struct tm_amqp_task *at, struct tm_amqp_pub *p,
                         const char *rk, const amqp_basic_properties_t *props,
                         const char *body, size_t len, int mandatory)
{
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)body};
    int rc = amqp_basic_publish(at->conn, p->ch, amqp_empty_bytes,
                                amqp_cstring_bytes(rk), mandatory,
                                /* immediate = */ 0, props, b);
    if (rc != AMQP_STATUS_OK) {
        tm_snprintf(at->errstr, sizeof at->errstr, "basic.publish to '%s': "
                    "%s", rk, amqp_error_string2(rc));
        return 0;
    }
    uint64_t seq = p->next_seq++;
    size_t i = (size_t)(seq - p->lo);
    if (i >= p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        while (p->cap <= i)
            p->cap *= 2;
        p->st = tm_realloc(p->st, p->cap);
    }
    p->st[i] = TM_AMQP_WAITING;
    p->waiting++;
    return seq;
}

/* tm_amqp_returned_done matches a message the broker could not route
 * (mandatory publish: the dead-letter or retry queue is gone) with its
 * record. */
void tm_amqp_returned_done(struct tm_amqp_task *at, const char *msgid)
{
    at->ret_state = 0;
    for (size_t i = 0; i < at->work.n; i++) {
        struct tm_amqp_rec *r = &at->work.v[i];
        if (r->returned || r->rk == NULL || r->d == NULL ||
            strcmp(r->rk, at->ret_rk) != 0 ||
            (msgid != NULL &&
             strcmp(r->settle == TM_SETTLE_DEAD ? r->copy_id : r->d->id,
                    msgid) != 0))
            continue;
        r->returned = 1;
        tm_log_write(TM_LOG_ERR, TM_AMQP_SRC, at->cfg->name, r->d->id,
                     "RabbitMQ could not route the %s copy to '%s' (%s); "
                     "the message stays in the queue and is delivered "
                     "again", r->settle == TM_SETTLE_DEAD ? "dead-letter"
                                                          : "retry",
                     at->ret_rk, at->ret_text);
        return;
    }
    tm_log_write(TM_LOG_WARNING, TM_AMQP_SRC, at->cfg->name, msgid,
                 "RabbitMQ returned a message sent to '%s' (%s)", at->ret_rk,
                 at->ret_text);
}

/* tm_amqp_wait_confirms reads frames until every publish of the round is
 * confirmed (or nacked, or lost with the reply channel). */
int tm_amqp_wait_confirms(struct tm_amqp_task *at)
{
    int64_t deadline = tm_now_ms() + TM_AMQP_CONFIRM_TIMEOUT_MS;
    for (;;) {
        if (tm_amqp_pump(at) != 0)
            return -1;
        if (at->pub.waiting == 0 && at->rpub.waiting == 0)
            return 0;
        int64_t left = deadline - tm_now_ms();
        if (left <= 0) {
            tm_snprintf(at->errstr, sizeof at->errstr, "no publisher "
                        "confirm from RabbitMQ within %d s",
                        TM_AMQP_CONFIRM_TIMEOUT_MS / 1000);
            return -1;
        }
        tm_amqp_wait_readable(at, left < 1000 ? left : 1000);
    }
}
