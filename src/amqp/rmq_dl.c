/* amqp/rmq_dl.c - rabbitmq-c opened on first need (see rmq_dl.h). */
#include "amqp/rmq_dl.h"

TM_DLSYM_DEFINE(empty_amqp_pool);
TM_DLSYM_DEFINE(init_amqp_pool);
TM_DLSYM_DEFINE(amqp_basic_ack);
TM_DLSYM_DEFINE(amqp_basic_consume);
TM_DLSYM_DEFINE(amqp_basic_get);
TM_DLSYM_DEFINE(amqp_basic_nack);
TM_DLSYM_DEFINE(amqp_basic_publish);
TM_DLSYM_DEFINE(amqp_basic_qos);
TM_DLSYM_DEFINE(amqp_basic_reject);
TM_DLSYM_DEFINE(amqp_channel_open);
TM_DLSYM_DEFINE(amqp_confirm_select);
TM_DLSYM_DEFINE(amqp_connection_close);
TM_DLSYM_DEFINE(amqp_consume_message);
TM_DLSYM_DEFINE(amqp_cstring_bytes);
TM_DLSYM_DEFINE(amqp_data_in_buffer);
TM_DLSYM_DEFINE(amqp_destroy_connection);
TM_DLSYM_DEFINE(amqp_destroy_envelope);
TM_DLSYM_DEFINE(amqp_destroy_message);
TM_DLSYM_DEFINE(amqp_error_string2);
TM_DLSYM_DEFINE(amqp_exchange_declare);
TM_DLSYM_DEFINE(amqp_frames_enqueued);
TM_DLSYM_DEFINE(amqp_get_rpc_reply);
TM_DLSYM_DEFINE(amqp_get_sockfd);
TM_DLSYM_DEFINE(amqp_login_with_properties);
TM_DLSYM_DEFINE(amqp_maybe_release_buffers);
TM_DLSYM_DEFINE(amqp_maybe_release_buffers_on_channel);
TM_DLSYM_DEFINE(amqp_method_name);
TM_DLSYM_DEFINE(amqp_new_connection);
TM_DLSYM_DEFINE(amqp_queue_bind);
TM_DLSYM_DEFINE(amqp_queue_declare);
TM_DLSYM_DEFINE(amqp_queue_purge);
TM_DLSYM_DEFINE(amqp_read_message);
TM_DLSYM_DEFINE(amqp_send_method);
TM_DLSYM_DEFINE(amqp_set_handshake_timeout);
TM_DLSYM_DEFINE(amqp_set_rpc_timeout);
TM_DLSYM_DEFINE(amqp_simple_wait_frame_noblock);
TM_DLSYM_DEFINE(amqp_socket_open_noblock);
TM_DLSYM_DEFINE(amqp_ssl_socket_get_context);
TM_DLSYM_DEFINE(amqp_ssl_socket_new);
TM_DLSYM_DEFINE(amqp_ssl_socket_set_cacert);
TM_DLSYM_DEFINE(amqp_ssl_socket_set_key);
TM_DLSYM_DEFINE(amqp_ssl_socket_set_verify_hostname);
TM_DLSYM_DEFINE(amqp_ssl_socket_set_verify_peer);
TM_DLSYM_DEFINE(amqp_table_clone);
TM_DLSYM_DEFINE(amqp_tcp_socket_new);
TM_DLSYM_DEFINE(amqp_tx_commit);
TM_DLSYM_DEFINE(amqp_tx_select);

static const struct tm_dlsym rmq_syms[] = {
    TM_DLSYM_ARG(empty_amqp_pool),
    TM_DLSYM_ARG(init_amqp_pool),
    TM_DLSYM_ARG(amqp_basic_ack),
    TM_DLSYM_ARG(amqp_basic_consume),
    TM_DLSYM_ARG(amqp_basic_get),
    TM_DLSYM_ARG(amqp_basic_nack),
    TM_DLSYM_ARG(amqp_basic_publish),
    TM_DLSYM_ARG(amqp_basic_qos),
    TM_DLSYM_ARG(amqp_basic_reject),
    TM_DLSYM_ARG(amqp_channel_open),
    TM_DLSYM_ARG(amqp_confirm_select),
    TM_DLSYM_ARG(amqp_connection_close),
    TM_DLSYM_ARG(amqp_consume_message),
    TM_DLSYM_ARG(amqp_cstring_bytes),
    TM_DLSYM_ARG(amqp_data_in_buffer),
    TM_DLSYM_ARG(amqp_destroy_connection),
    TM_DLSYM_ARG(amqp_destroy_envelope),
    TM_DLSYM_ARG(amqp_destroy_message),
    TM_DLSYM_ARG(amqp_error_string2),
    TM_DLSYM_ARG(amqp_exchange_declare),
    TM_DLSYM_ARG(amqp_frames_enqueued),
    TM_DLSYM_ARG(amqp_get_rpc_reply),
    TM_DLSYM_ARG(amqp_get_sockfd),
    TM_DLSYM_ARG(amqp_login_with_properties),
    TM_DLSYM_ARG(amqp_maybe_release_buffers),
    TM_DLSYM_ARG(amqp_maybe_release_buffers_on_channel),
    TM_DLSYM_ARG(amqp_method_name),
    TM_DLSYM_ARG(amqp_new_connection),
    TM_DLSYM_ARG(amqp_queue_bind),
    TM_DLSYM_ARG(amqp_queue_declare),
    TM_DLSYM_ARG(amqp_queue_purge),
    TM_DLSYM_ARG(amqp_read_message),
    TM_DLSYM_ARG(amqp_send_method),
    TM_DLSYM_ARG(amqp_set_handshake_timeout),
    TM_DLSYM_ARG(amqp_set_rpc_timeout),
    TM_DLSYM_ARG(amqp_simple_wait_frame_noblock),
    TM_DLSYM_ARG(amqp_socket_open_noblock),
    TM_DLSYM_ARG(amqp_ssl_socket_get_context),
    TM_DLSYM_ARG(amqp_ssl_socket_new),
    TM_DLSYM_ARG(amqp_ssl_socket_set_cacert),
    TM_DLSYM_ARG(amqp_ssl_socket_set_key),
    TM_DLSYM_ARG(amqp_ssl_socket_set_verify_hostname),
    TM_DLSYM_ARG(amqp_ssl_socket_set_verify_peer),
    TM_DLSYM_ARG(amqp_table_clone),
    TM_DLSYM_ARG(amqp_tcp_socket_new),
    TM_DLSYM_ARG(amqp_tx_commit),
    TM_DLSYM_ARG(amqp_tx_select),
};

static struct tm_dlib rmq_lib = {
    .soname = "librabbitmq.so.4",
    .package = "librabbitmq4",
    .syms = rmq_syms,
    .nsyms = sizeof rmq_syms / sizeof rmq_syms[0],
};

int tm_rmq_dl_open(char *err, size_t errlen)
{
    return tm_dlib_open(&rmq_lib, err, errlen);
}
