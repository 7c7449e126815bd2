/* rmq_dl.h - rabbitmq-c (librabbitmq.so.4), opened the first time a
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

#include "dlib.h"

/* rabbitmq-c's amqp_empty_bytes and amqp_empty_table: zero length, no
 * data */
#define TM_AMQP_EMPTY_BYTES ((amqp_bytes_t){ .len = 0, .bytes = NULL })
#define TM_AMQP_EMPTY_TABLE \
    ((amqp_table_t){ .num_entries = 0, .entries = NULL })

TM_DLSYM_PROTOTYPE(empty_amqp_pool);
TM_DLSYM_PROTOTYPE(init_amqp_pool);
TM_DLSYM_PROTOTYPE(amqp_basic_ack);
TM_DLSYM_PROTOTYPE(amqp_basic_consume);
TM_DLSYM_PROTOTYPE(amqp_basic_get);
TM_DLSYM_PROTOTYPE(amqp_basic_nack);
TM_DLSYM_PROTOTYPE(amqp_basic_publish);
TM_DLSYM_PROTOTYPE(amqp_basic_qos);
TM_DLSYM_PROTOTYPE(amqp_basic_reject);
TM_DLSYM_PROTOTYPE(amqp_channel_open);
TM_DLSYM_PROTOTYPE(amqp_confirm_select);
TM_DLSYM_PROTOTYPE(amqp_connection_close);
TM_DLSYM_PROTOTYPE(amqp_consume_message);
TM_DLSYM_PROTOTYPE(amqp_cstring_bytes);
TM_DLSYM_PROTOTYPE(amqp_data_in_buffer);
TM_DLSYM_PROTOTYPE(amqp_destroy_connection);
TM_DLSYM_PROTOTYPE(amqp_destroy_envelope);
TM_DLSYM_PROTOTYPE(amqp_destroy_message);
TM_DLSYM_PROTOTYPE(amqp_error_string2);
TM_DLSYM_PROTOTYPE(amqp_exchange_declare);
TM_DLSYM_PROTOTYPE(amqp_frames_enqueued);
TM_DLSYM_PROTOTYPE(amqp_get_rpc_reply);
TM_DLSYM_PROTOTYPE(amqp_get_sockfd);
TM_DLSYM_PROTOTYPE(amqp_login_with_properties);
TM_DLSYM_PROTOTYPE(amqp_maybe_release_buffers);
TM_DLSYM_PROTOTYPE(amqp_maybe_release_buffers_on_channel);
TM_DLSYM_PROTOTYPE(amqp_method_name);
TM_DLSYM_PROTOTYPE(amqp_new_connection);
TM_DLSYM_PROTOTYPE(amqp_queue_bind);
TM_DLSYM_PROTOTYPE(amqp_queue_declare);
TM_DLSYM_PROTOTYPE(amqp_queue_purge);
TM_DLSYM_PROTOTYPE(amqp_read_message);
TM_DLSYM_PROTOTYPE(amqp_send_method);
TM_DLSYM_PROTOTYPE(amqp_set_handshake_timeout);
TM_DLSYM_PROTOTYPE(amqp_set_rpc_timeout);
TM_DLSYM_PROTOTYPE(amqp_simple_wait_frame_noblock);
TM_DLSYM_PROTOTYPE(amqp_socket_open_noblock);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_get_context);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_new);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_set_cacert);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_set_key);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_set_verify_hostname);
TM_DLSYM_PROTOTYPE(amqp_ssl_socket_set_verify_peer);
TM_DLSYM_PROTOTYPE(amqp_table_clone);
TM_DLSYM_PROTOTYPE(amqp_tcp_socket_new);
TM_DLSYM_PROTOTYPE(amqp_tx_commit);
TM_DLSYM_PROTOTYPE(amqp_tx_select);

/* tm_rmq_dl_open opens librabbitmq.so.4 and fills every sym_ pointer
 * above (see tm_dlib_open): 0, or -1 with the reason in err. Called where
 * a configuration names a RabbitMQ broker; every sym_ call comes after
 * it. */
int tm_rmq_dl_open(char *err, size_t errlen);

#endif
