/* bench_amqp.h - rabbitmq-c helpers shared by the bench/ programs. */
#ifndef TASKMILL_BENCH_AMQP_H
#define TASKMILL_BENCH_AMQP_H

#include "bench.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>

/* bench_amqp_check dies with what failed unless r is a normal reply. */
static inline void bench_amqp_check(const char *prog, amqp_rpc_reply_t r,
                                    const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        bench_die(prog, "%s: %s", what, amqp_error_string2(r.library_error));
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *c = r.reply.decoded;
        bench_die(prog, "%s: channel closed: %.*s", what,
                  (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *c = r.reply.decoded;
        bench_die(prog, "%s: connection closed: %.*s", what,
                  (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    }
    bench_die(prog, "%s: failed (reply type %d)", what, (int)r.reply_type);
}

/* bench_amqp_open connects as guest/guest to vhost "/" and opens channel
 * 1. Dies on failure. */
static inline amqp_connection_state_t bench_amqp_open(const char *prog,
                                                      const char *host,
                                                      int port)
{
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (s == NULL)
        bench_die(prog, "out of memory");
    int rc = amqp_socket_open(s, host, port);
    if (rc != AMQP_STATUS_OK)
        bench_die(prog, "connect %s:%d: %s", host, port,
                  amqp_error_string2(rc));
    bench_amqp_check(prog,
                     amqp_login(c, "/", /* channel_max = */ 0,
                                /* frame_max = */ 131072,
                                /* heartbeat = */ 0, AMQP_SASL_METHOD_PLAIN,
                                "guest", "guest"),
                     "login");
    amqp_channel_open(c, 1);
    bench_amqp_check(prog, amqp_get_rpc_reply(c), "channel.open");
    return c;
}

/* bench_amqp_ready returns the ready-message count of queue (a passive
 * queue.declare: one round trip through the channel and the queue). */
static inline long long bench_amqp_ready(const char *prog,
                                         amqp_connection_state_t c,
                                         const char *queue)
{
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        c, 1, amqp_cstring_bytes(queue), /* passive = */ 1,
        /* durable = */ 0, /* exclusive = */ 0, /* auto_delete = */ 0,
        amqp_empty_table);
    bench_amqp_check(prog, amqp_get_rpc_reply(c), "queue.declare passive");
    long long n = ok->message_count;
    amqp_maybe_release_buffers(c);
    return n;
}

static inline void bench_amqp_close(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

#endif /* TASKMILL_BENCH_AMQP_H */
