/* rmq_dl_private.h - rabbitmq-c (librabbitmq.so.4), opened the first time a
 * configuration names an amqp:// or amqps:// broker (see dlib.h). The
 * RabbitMQ code calls rabbitmq-c only through these sym_ pointers; types
 * and constants come from rabbitmq-c's own headers. Its two data objects
 * (amqp_empty_bytes, amqp_empty_table) are replaced by the equal
 * TM_AMQP_EMPTY_BYTES and TM_AMQP_EMPTY_TABLE. */
#ifndef TASKMILL_AMQP_RMQ_DL_H
#define TASKMILL_AMQP_RMQ_DL_H

#include <stddef.h>

/* rabbitmq-c 0.12 moved its headers under rabbitmq-c/; Debian 12 ships
 * 0.11 with the old names. */
#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

#include "util/dlib.h"

/* rabbitmq-c's amqp_empty_bytes and amqp_empty_table: zero length, no
 * data */
#define TM_AMQP_EMPTY_BYTES ((amqp_bytes_t){ .len = 0, .bytes = NULL })
#define TM_AMQP_EMPTY_TABLE \
    ((amqp_table_t){ .num_entries = 0, .entries = NULL })

/* every rabbitmq-c function the daemon calls, once: X(function) for each
 * (see dlib.h) */
#define TM_RMQ_FUNCS(X)                                                     \
    X(empty_amqp_pool)                                                      \
    X(init_amqp_pool)                                                       \
    X(amqp_basic_ack)                                                       \
    X(amqp_basic_consume)                                                   \
    X(amqp_basic_get)                                                       \
    X(amqp_basic_nack)                                                      \
    X(amqp_basic_publish)                                                   \
    X(amqp_basic_qos)                                                       \
    X(amqp_basic_reject)                                                    \
    X(amqp_channel_close)                                                   \
    X(amqp_channel_open)                                                    \
    X(amqp_confirm_select)                                                  \
    X(amqp_connection_close)                                                \
    X(amqp_consume_message)                                                 \
    X(amqp_cstring_bytes)                                                   \
    X(amqp_data_in_buffer)                                                  \
    X(amqp_destroy_connection)                                              \
    X(amqp_destroy_envelope)                                                \
    X(amqp_destroy_message)                                                 \
    X(amqp_error_string2)                                                   \
    X(amqp_exchange_declare)                                                \
    X(amqp_frames_enqueued)                                                 \
    X(amqp_get_rpc_reply)                                                   \
    X(amqp_get_sockfd)                                                      \
    X(amqp_login_with_properties)                                           \
    X(amqp_maybe_release_buffers)                                           \
    X(amqp_maybe_release_buffers_on_channel)                                \
    X(amqp_method_name)                                                     \
    X(amqp_new_connection)                                                  \
    X(amqp_queue_bind)                                                      \
    X(amqp_queue_declare)                                                   \
    X(amqp_queue_purge)                                                     \
    X(amqp_read_message)                                                    \
    X(amqp_send_method)                                                     \
    X(amqp_set_handshake_timeout)                                           \
    X(amqp_set_rpc_timeout)                                                 \
    X(amqp_simple_wait_frame_noblock)                                       \
    X(amqp_socket_open_noblock)                                             \
    X(amqp_ssl_socket_get_context)                                          \
    X(amqp_ssl_socket_new)                                                  \
    X(amqp_ssl_socket_set_cacert)                                           \
    X(amqp_ssl_socket_set_key)                                              \
    X(amqp_ssl_socket_set_verify_hostname)                                  \
    X(amqp_ssl_socket_set_verify_peer)                                      \
    X(amqp_table_clone)                                                     \
    X(amqp_tcp_socket_new)                                                  \
    X(amqp_tx_commit)                                                       \
    X(amqp_tx_select)

TM_RMQ_FUNCS(TM_DLSYM_EXTERN)

/* tm_rmq_dl_open opens librabbitmq.so.4 and fills every sym_ pointer
 * above (see tm_dlib_open): 0, or -1 with the reason in err. Called where
 * a configuration names a RabbitMQ broker; every sym_ call comes after
 * it. */
int tm_rmq_dl_open(char *err, size_t errlen);

#endif
