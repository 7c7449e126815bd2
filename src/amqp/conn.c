/* amqp/conn.c - RabbitMQ connections: TCP or TLS, login, channels, errors. */
#include "amqp.h"

#include <assert.h>
#include <string.h>
#include <sys/socket.h> /* shutdown: see tm_amqp_drop */

#include "config/config.h"
#include "util/ssl_dl.h" /* tls_setup: the verified name on the SSL_CTX */
#include "util/util.h"

/* tm_amqp_strerror describes a failed rabbitmq-c call: the library's status,
 * or the broker's close reason ("406 PRECONDITION_FAILED - ..."), as
 * collectd's camqp_strerror does. Returns buf. */
const char *tm_amqp_strerror(amqp_rpc_reply_t r, char *buf, size_t size)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        tm_snprintf(buf, size, "success");
        break;
    case AMQP_RESPONSE_NONE:
        tm_snprintf(buf, size, "no reply from the broker");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        tm_snprintf(buf, size, "%s", sym_amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *m = r.reply.decoded;
            tm_snprintf(buf, size, "connection closed by the broker: %u %.*s",
                        m->reply_code, (int)m->reply_text.len,
                        (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = r.reply.decoded;
            tm_snprintf(buf, size, "%u %.*s", m->reply_code,
                        (int)m->reply_text.len,
                        (const char *)m->reply_text.bytes);
        } else {
            tm_snprintf(buf, size, "unexpected broker method %s",
                        sym_amqp_method_name(r.reply.id));
        }
        break;
    }
    return buf;
}

/* tm_amqp_reply_code returns the broker's code of a channel or connection
 * close (404, 406, ...), or 0. */
int tm_amqp_reply_code(amqp_rpc_reply_t r)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION)
        return 0;
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
        return ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
        return ((const amqp_connection_close_t *)r.reply.decoded)
            ->reply_code;
    return 0;
}

/* tm_amqp_channel_error returns 1 when r closed only its channel: the
 * connection is still usable once the close is answered (see
 * tm_amqp_channel_closed_ok). */
int tm_amqp_channel_error(amqp_rpc_reply_t r)
{
    return r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
           r.reply.id == AMQP_CHANNEL_CLOSE_METHOD;
}

int tm_amqp_channel_closed_ok(amqp_connection_state_t c, amqp_channel_t ch)
{
    amqp_channel_close_ok_t ok;
    memset(&ok, 0, sizeof ok);
    return sym_amqp_send_method(c, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
}

struct timeval tm_amqp_tv_ms(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                         .tv_usec = (suseconds_t)((ms % 1000) * 1000)};
    return tv;
}

/* tm_amqp_drop closes a connection without a goodbye. shutdown(2) first: a
 * forked worker may hold a copy of the socket, and RabbitMQ must see the
 * connection end now to redeliver what it holds. */
void tm_amqp_drop(amqp_connection_state_t c)
{
    if (c == NULL)
        return;
    int fd = sym_amqp_get_sockfd(c);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    sym_amqp_destroy_connection(c);
}

/* tm_amqp_close closes a connection politely (connection.close), briefly. */
void tm_amqp_close(amqp_connection_state_t c)
{
    if (c == NULL)
        return;
    struct timeval tv = tm_amqp_tv_ms(2000);
    sym_amqp_set_rpc_timeout(c, &tv);
    sym_amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    tm_amqp_drop(c);
}

/*
 * tls_setup configures the TLS socket s of node u from broker.tls: the
 * peer verified against ca_file (default: the system CA bundle) and its
 * name against server_name (default: the URL's host) unless verify is
 * false, and the client certificate when given. rabbitmq-c only checks
 * the host it connects to, so another name is set on the OpenSSL context
 * for the handshake to verify (SNI stays the URL's host). Returns 0, or
 * -1 with the reason in buf.
 */
static int tls_setup(amqp_socket_t *s, const struct tm_tls *tls,
                     const struct tm_url *u, char *buf, size_t size)
{
    int verify = tls->verify;
    int other_name = verify && tls->server_name != NULL &&
                     strcmp(tls->server_name, u->host) != 0;
    sym_amqp_ssl_socket_set_verify_peer(s, verify);
    sym_amqp_ssl_socket_set_verify_hostname(s, verify && !other_name);
    if (other_name) {
        SSL_CTX *ctx = sym_amqp_ssl_socket_get_context(s);
        if (ctx == NULL ||
            sym_X509_VERIFY_PARAM_set1_host(sym_SSL_CTX_get0_param(ctx),
                                            tls->server_name, 0) != 1) {
            tm_snprintf(buf, size, "%s: cannot set the TLS server name "
                        "'%s'", u->redacted, tls->server_name);
            return -1;
        }
    }
    const char *ca = tls->ca_file;
    if (ca == NULL && verify)
        ca = TM_AMQP_CACERT_DEFAULT;
    if (ca != NULL) {
        int rc = sym_amqp_ssl_socket_set_cacert(s, ca);
        if (rc != AMQP_STATUS_OK) {
            tm_snprintf(buf, size, "%s: cannot load the CA certificates %s "
                        "(broker.tls.ca_file): %s", u->redacted, ca,
                        sym_amqp_error_string2(rc));
            return -1;
        }
    }
    /* the configuration holds both or neither */
    assert((tls->cert_file == NULL) == (tls->key_file == NULL));
    if (tls->cert_file != NULL) {
        int rc = sym_amqp_ssl_socket_set_key(s, tls->cert_file, tls->key_file);
        if (rc != AMQP_STATUS_OK) {
            tm_snprintf(buf, size, "%s: cannot load the client certificate "
                        "%s with key %s (broker.tls): %s", u->redacted,
                        tls->cert_file, tls->key_file,
                        sym_amqp_error_string2(rc));
            return -1;
        }
    }
    return 0;
}

/*
 * tm_amqp_open connects and logs in to the current node (tm_amqp_node):
 * TCP or TLS (amqps://, configured by broker.tls, see tls_setup), user
 * and password guest/guest when the URL has none. role names the
 * connection in RabbitMQ's management UI. heartbeat in seconds, 0 none.
 * Returns the connection, with the node's URL (borrowed) in *node when
 * node is not NULL; or NULL with the reason in buf, after moving the
 * broker on to the next node (tm_amqp_node_failed).
 */
amqp_connection_state_t tm_amqp_open(struct tm_amqp_broker *ab,
                                     const char *role, int heartbeat,
                                     const struct tm_url **node, char *buf,
                                     size_t size)
{
    char eb[256];
    size_t ni = tm_amqp_node(ab);
    const struct tm_url *u = &ab->nodes[ni];
    amqp_connection_state_t c = sym_amqp_new_connection();
    if (c == NULL) {
        tm_snprintf(buf, size, "%s: out of memory", u->redacted);
        return NULL;
    }
    amqp_socket_t *s;
    if (u->tls) {
        s = sym_amqp_ssl_socket_new(c);
        if (s == NULL) {
            tm_snprintf(buf, size, "%s: cannot create a TLS socket",
                        u->redacted);
            goto fail;
        }
        if (tls_setup(s, &ab->base.cfg->tls, u, buf, size) < 0)
            goto fail;
    } else {
        s = sym_amqp_tcp_socket_new(c);
        if (s == NULL) {
            tm_snprintf(buf, size, "%s: cannot create a socket",
                        u->redacted);
            goto fail;
        }
    }
    struct timeval tv = tm_amqp_tv_ms(TM_AMQP_CONNECT_TIMEOUT_MS);
    int rc = sym_amqp_socket_open_noblock(s, u->host, u->port, &tv);
    if (rc != AMQP_STATUS_OK) {
        /* rabbitmq-c keeps no errno for a failed connect */
        tm_snprintf(buf, size, "cannot connect to %s: %s%s", u->redacted,
                    sym_amqp_error_string2(rc),
                    rc == AMQP_STATUS_SOCKET_ERROR
                        ? " (refused or unreachable: is RabbitMQ listening "
                          "there?)"
                        : "");
        goto fail;
    }
    tv = tm_amqp_tv_ms(TM_AMQP_RPC_TIMEOUT_MS);
    sym_amqp_set_handshake_timeout(c, &tv);
    sym_amqp_set_rpc_timeout(c, &tv);

    char name[300];
    tm_snprintf(name, sizeof name, "taskmill %s %s",
                ab->base.cfg->instance ? ab->base.cfg->instance : "", role);
    amqp_table_entry_t caps[3];
    const char *capnames[3] = {"consumer_cancel_notify", "connection.blocked",
                               "publisher_confirms"};
    for (int i = 0; i < 3; i++) {
        memset(&caps[i], 0, sizeof caps[i]);
        caps[i].key = sym_amqp_cstring_bytes(capnames[i]);
        caps[i].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        caps[i].value.value.boolean = 1;
    }
    amqp_table_entry_t props[3];
    memset(props, 0, sizeof props);
    props[0].key = sym_amqp_cstring_bytes("connection_name");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = sym_amqp_cstring_bytes(name);
    props[1].key = sym_amqp_cstring_bytes("taskmill_version");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = sym_amqp_cstring_bytes(TM_VERSION);
    props[2].key = sym_amqp_cstring_bytes("capabilities");
    props[2].value.kind = AMQP_FIELD_KIND_TABLE;
    props[2].value.value.table.num_entries = 3;
    props[2].value.value.table.entries = caps;
    amqp_table_t ptable = {.num_entries = 3, .entries = props};
    const char *user = u->user != NULL ? u->user : "guest";
    const char *pass = u->password != NULL ? u->password : "guest";
    amqp_rpc_reply_t r = sym_amqp_login_with_properties(
        c, u->vhost != NULL ? u->vhost : "/", 0, TM_AMQP_FRAME_MAX, heartbeat,
        &ptable, AMQP_SASL_METHOD_PLAIN, user, pass);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "%s: login as '%s' to vhost '%s' failed: %s",
                    u->redacted, user, u->vhost ? u->vhost : "/",
                    tm_amqp_strerror(r, eb, sizeof eb));
        goto fail;
    }
    if (node != NULL)
        *node = u;
    return c;
fail:
    tm_amqp_drop(c);
    tm_amqp_node_failed(ab, ni, buf);
    return NULL;
}

/* tm_amqp_channel opens channel ch, in confirm mode when asked. */
int tm_amqp_channel(amqp_connection_state_t c, amqp_channel_t ch,
                      int confirm, char *buf, size_t size)
{
    char eb[256];
    sym_amqp_channel_open(c, ch);
    amqp_rpc_reply_t r = sym_amqp_get_rpc_reply(c);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        tm_snprintf(buf, size, "channel.open: %s",
                    tm_amqp_strerror(r, eb, sizeof eb));
        return -1;
    }
    if (confirm) {
        sym_amqp_confirm_select(c, ch);
        r = sym_amqp_get_rpc_reply(c);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            tm_snprintf(buf, size, "confirm.select: %s",
                        tm_amqp_strerror(r, eb, sizeof eb));
            return -1;
        }
    }
    return 0;
}

int tm_amqp_frame_ends(amqp_connection_state_t c, char *buf, size_t size)
{
    amqp_frame_t f;
    struct timeval tv = tm_amqp_tv_ms(0);
    if (sym_amqp_simple_wait_frame_noblock(c, &f, &tv) != AMQP_STATUS_OK ||
        f.frame_type != AMQP_FRAME_METHOD ||
        (f.payload.method.id != AMQP_CHANNEL_CLOSE_METHOD &&
         f.payload.method.id != AMQP_CONNECTION_CLOSE_METHOD &&
         f.payload.method.id != AMQP_BASIC_CANCEL_METHOD))
        return 0;
    tm_snprintf(buf, size, "%s", sym_amqp_method_name(f.payload.method.id));
    return 1;
}
