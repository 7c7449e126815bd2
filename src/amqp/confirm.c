/* amqp/confirm.c - the one loop that waits for publisher confirms on a
 * RabbitMQ connection (the publishing connection's copies, a pause state
 * and its notice, a CLI publish and the reply to a request), and the
 * reading of a confirm (basic.ack, basic.nack) that each of them needs. */
#include "amqp.h"

#include <poll.h>
#include <string.h>

#include "util/util.h"

/* The longest single wait for the socket: the loop asks its caller again
 * at least this often (ms). */
#define CONFIRM_POLL_MAX_MS 1000

int tm_amqp_confirm_covers(uint64_t seq, uint64_t tag, int multiple)
{
    return seq != 0 && (seq == tag || (multiple && seq < tag));
}

void tm_amqp_confirm_note(struct tm_amqp_confirm *w, const amqp_frame_t *f)
{
    if (f->frame_type != AMQP_FRAME_METHOD || f->channel != w->ch ||
        w->state != TM_AMQP_WAITING)
        return;
    const amqp_method_t *m = &f->payload.method;
    if (m->id == AMQP_BASIC_ACK_METHOD) {
        const amqp_basic_ack_t *x = m->decoded;
        if (tm_amqp_confirm_covers(w->seq, x->delivery_tag, x->multiple))
            w->state = TM_AMQP_ACKED;
    } else if (m->id == AMQP_BASIC_NACK_METHOD) {
        const amqp_basic_nack_t *x = m->decoded;
        if (tm_amqp_confirm_covers(w->seq, x->delivery_tag, x->multiple))
            w->state = TM_AMQP_NACKED;
    }
}

int tm_amqp_closed_why(const amqp_frame_t *f, char *buf, size_t size)
{
    if (f->frame_type != AMQP_FRAME_METHOD ||
        (f->payload.method.id != AMQP_CHANNEL_CLOSE_METHOD &&
         f->payload.method.id != AMQP_CONNECTION_CLOSE_METHOD))
        return 0;
    amqp_rpc_reply_t r;
    memset(&r, 0, sizeof r);
    r.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION;
    r.reply = f->payload.method;
    tm_amqp_strerror(r, buf, size);
    return 1;
}

/* pump hands every frame available now on c to cb_frame, without
 * blocking (a 1 us timeout rather than 0 keeps rabbitmq-c's heartbeat
 * checks alive); *more is set when it stopped at TM_AMQP_PUMP_MAX with
 * frames left. -1 when the connection failed (reason in buf) or cb_frame
 * said so. */
static int pump(amqp_connection_state_t c,
                int (*cb_frame)(void *arg, const amqp_frame_t *f),
                void *arg, int *more, char *buf, size_t size)
{
    *more = 1;
    for (int i = 0; i < TM_AMQP_PUMP_MAX; i++) {
        amqp_frame_t f;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 1};
        int rc = sym_amqp_simple_wait_frame_noblock(c, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT) {
            *more = 0;
            break;
        }
        if (rc != AMQP_STATUS_OK) {
            tm_snprintf(buf, size, "%s", sym_amqp_error_string2(rc));
            return -1;
        }
        if (cb_frame(arg, &f) != 0)
            return -1;
    }
    sym_amqp_maybe_release_buffers(c);
    return 0;
}

int tm_amqp_confirm_wait(amqp_connection_state_t c, int64_t deadline,
                         int (*cb_frame)(void *arg, const amqp_frame_t *f),
                         int (*cb_step)(void *arg), void *arg, char *buf,
                         size_t size)
{
    for (;;) {
        int more = 0;
        if (pump(c, cb_frame, arg, &more, buf, size) != 0)
            return -1;
        int st = cb_step(arg);
        if (st != 0)
            return st > 0 ? 0 : -1;
        int64_t left = deadline - tm_now_ms();
        if (left <= 0)
            return 1;
        if (more)
            continue; /* frames wait in rabbitmq-c: no poll for them */
        struct pollfd p = {.fd = sym_amqp_get_sockfd(c), .events = POLLIN};
        if (poll(&p, 1,
                 (int)(left < CONFIRM_POLL_MAX_MS ? left
                                                  : CONFIRM_POLL_MAX_MS)) <
            0) {
            /* EINTR: the loop reads and asks again */
        }
    }
}
