# shellcheck shell=bash
# Helpers for the RabbitMQ tests (tests/integration/test_amqp_*.sh). Each
# such test sources it after lib.sh (which run.sh has already sourced):
#
#   . "$TM_SRCDIR/tests/integration/lib_amqp.sh"
#
# run.sh starts one rabbitmq-server per run when an amqp test is selected and
# exports RABBIT_PORT, RABBIT_NODE, RABBIT_BIN, RABBIT_HOME and
# RABBIT_EPMD_PORT; without them (rabbitmq-server not installed) every amqp
# test skips. The node is shared by the run's tests and never flushed: each
# test names its queues with its own prefix, AQ (e.g. "$AQ.add").
#
# Adds: write_amqp_config, rabbitctl (rabbitmqctl on the test node), and
# amqptool, a tiny raw AMQP client compiled once per run: ready counts,
# bulk publishing, one large message, a direct reply-to RPC client, plain
# declarations.

: "${TEST_DIR:?lib_amqp.sh is sourced after lib.sh}"
declare -F start_daemon >/dev/null || {
	echo "lib_amqp.sh: source lib.sh first" >&2
	exit 1
}
[[ -n ${RABBIT_PORT:-} ]] || skip "no rabbitmq-server for this run (install rabbitmq-server; run.sh starts it)"

# AQ: this test's queue name prefix, unique in the run.
AQ="tm.${0#test_}.$$"

# --------------------------------------------------------------- config

# write_amqp_config FILE [key=value...] < TASKS_YAML: like lib.sh's
# write_config, for the run's RabbitMQ. Keys: pool_kind (thread), pool_size
# (4), shutdown_timeout (10s), log_level (debug), http_port (HTTP_PORT, or a
# free port which then becomes HTTP_PORT), url (amqp://127.0.0.1:PORT/; a
# value starting with '[' is written as a YAML list), tls and amqp (flow
# mappings for broker.tls and broker.amqp, e.g. amqp='{queue_type: quorum}').
write_amqp_config() {
	local file=$1 kv
	shift
	local pool_kind=thread pool_size=4 shutdown_timeout=10s log_level=debug
	local http_port=${HTTP_PORT:-} url="amqp://127.0.0.1:$RABBIT_PORT/"
	local tls='' amqp=''
	for kv in "$@"; do
		case $kv in
		tls=*) tls=${kv#*=} ;;
		amqp=*) amqp=${kv#*=} ;;
		pool_kind=*) pool_kind=${kv#*=} ;;
		pool_size=*) pool_size=${kv#*=} ;;
		shutdown_timeout=*) shutdown_timeout=${kv#*=} ;;
		log_level=*) log_level=${kv#*=} ;;
		http_port=*) http_port=${kv#*=} ;;
		url=*) url=${kv#*=} ;;
		*) fail "write_amqp_config: unknown option '$kv'" ;;
		esac
	done
	if [[ -z $http_port ]]; then
		http_port=$(free_port)
	fi
	HTTP_PORT=$http_port
	{
		echo "broker:"
		if [[ $url == \[* ]]; then
			echo "  url: $url"
		else
			echo "  url: \"$url\""
		fi
		[[ -z $tls ]] || echo "  tls: $tls"
		[[ -z $amqp ]] || echo "  amqp: $amqp"
		echo "pool: { kind: $pool_kind, size: $pool_size }"
		echo "plugin_dir: $TM_PLUGINS"
		echo "http: { listen: 127.0.0.1:$http_port }"
		echo "shutdown_timeout: $shutdown_timeout"
		echo "log: { level: $log_level, format: text }"
		cat
	} >"$file"
}

# ------------------------------------------------------------ the node

# rabbitctl ARGS...: rabbitmqctl against the run's node (bounded).
rabbitctl() {
	HOME=$RABBIT_HOME ERL_EPMD_PORT=$RABBIT_EPMD_PORT timeout 60 \
		"$RABBIT_BIN/rabbitmqctl" -n "$RABBIT_NODE" "$@"
}

# ------------------------------------------------------------- amqptool

AMQPTOOL=${TEST_DIR%/*}/amqptool

# build_amqptool: compile amqptool once per run (the scratch dir is shared):
# in the test's own dir, then renamed into place, so that two amqp tests
# running at once never see each other's half-written file.
build_amqptool() {
	[[ -x $AMQPTOOL ]] && return 0
	local src=$TEST_DIR/amqptool.c
	cat >"$src" <<'C'
/* amqptool - a raw AMQP client for taskmill's tests. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#if defined(__has_include) && __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_tcp_socket.h>
#endif

static amqp_connection_state_t c;

static void check(amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = r.reply.decoded;
        fprintf(stderr, "amqptool: %s: %.*s\n", what,
                (int)m->reply_text.len, (char *)m->reply_text.bytes);
        exit(3);
    }
    fprintf(stderr, "amqptool: %s failed (%d)\n", what, r.reply_type);
    exit(1);
}

static void wait_confirms(unsigned long n)
{
    unsigned long acked = 0;
    while (acked < n) {
        amqp_frame_t f;
        struct timeval tv = {10, 0};
        if (amqp_simple_wait_frame_noblock(c, &f, &tv) != AMQP_STATUS_OK) {
            fprintf(stderr, "amqptool: no confirms\n");
            exit(1);
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            acked = a->multiple ? a->delivery_tag : acked + 1;
        } else if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD ||
                   f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            fprintf(stderr, "amqptool: message returned or refused\n");
            exit(1);
        }
    }
}

/* get_one reads one message of queue with basic.get (acknowledged by the
 * broker when ack): 1 with it in *m, 0 when the queue is empty */
static int get_one(const char *queue, int ack, amqp_message_t *m)
{
    amqp_rpc_reply_t r = amqp_basic_get(c, 1, amqp_cstring_bytes(queue), ack);
    check(r, "basic.get");
    if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
        return 0;
    check(amqp_read_message(c, 1, m, 0), "read message");
    return 1;
}

/* publish_one publishes one message with properties p to queue through
 * the default exchange on a confirm channel, and waits for its confirm */
static void publish_one(const char *queue, const amqp_basic_properties_t *p,
                        const char *body)
{
    amqp_confirm_select(c, 1);
    check(amqp_get_rpc_reply(c), "confirm.select");
    if (amqp_basic_publish(c, 1, amqp_empty_bytes, amqp_cstring_bytes(queue),
                           1, 0, p, amqp_cstring_bytes(body)) != 0) {
        fprintf(stderr, "amqptool: publish failed\n");
        exit(1);
    }
    wait_confirms(1);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: amqptool PORT count|publish|rpc|take|"
                "meta|props|declare QUEUE ...\n");
        return 2;
    }
    const char *cmd = argv[2], *queue = argv[3];
    c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (amqp_socket_open(s, "127.0.0.1", atoi(argv[1])) != AMQP_STATUS_OK) {
        fprintf(stderr, "amqptool: cannot connect\n");
        return 1;
    }
    check(amqp_login(c, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest",
                     "guest"), "login");
    amqp_channel_open(c, 1);
    check(amqp_get_rpc_reply(c), "channel.open");
    if (strcmp(cmd, "count") == 0) {
        /* count QUEUE: ready messages, or "missing" */
        amqp_queue_declare_ok_t *ok = amqp_queue_declare(
            c, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
        amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
        if (ok == NULL && r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) {
            printf("missing\n");
            return 0;
        }
        check(r, "queue.declare");
        printf("%u\n", ok->message_count);
    } else if (strcmp(cmd, "publish") == 0 && argc >= 6) {
        /* publish QUEUE COUNT FORMAT [PRIORITY|-] [noid]: FORMAT's %d is
         * the message's number; ids ID_PREFIX-N are printed */
        unsigned long n = strtoul(argv[4], NULL, 10);
        const char *fmt = argv[5];
        int prio = argc >= 7 && strcmp(argv[6], "-") != 0 ? atoi(argv[6])
                                                           : -1;
        int noid = argc >= 8 && strcmp(argv[7], "noid") == 0;
        amqp_confirm_select(c, 1);
        check(amqp_get_rpc_reply(c), "confirm.select");
        for (unsigned long i = 1; i <= n; i++) {
            char body[4096], id[64];
            snprintf(body, sizeof body, fmt, (int)i);
            snprintf(id, sizeof id, "raw-%d-%lu", (int)getpid(), i);
            amqp_basic_properties_t p;
            memset(&p, 0, sizeof p);
            p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
            p.delivery_mode = 2;
            if (!noid) {
                p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
                p.message_id = amqp_cstring_bytes(id);
            }
            if (prio >= 0) {
                p._flags |= AMQP_BASIC_PRIORITY_FLAG;
                p.priority = (uint8_t)prio;
            }
            if (amqp_basic_publish(c, 1, amqp_empty_bytes,
                                   amqp_cstring_bytes(queue), 1, 0, &p,
                                   amqp_cstring_bytes(body)) != 0) {
                fprintf(stderr, "amqptool: publish failed\n");
                return 1;
            }
            if (!noid)
                printf("%s\n", id);
        }
        wait_confirms(n);
    } else if (strcmp(cmd, "big") == 0 && argc >= 6) {
        /* big QUEUE BYTES ID: one JSON message of exactly BYTES bytes
         * ({"pad":"xxx..."}) with message id ID, confirmed */
        size_t n = strtoul(argv[4], NULL, 10);
        if (n < 16) {
            fprintf(stderr, "amqptool: big: at least 16 bytes\n");
            return 2;
        }
        char *body = malloc(n);
        if (body == NULL)
            return 1;
        memset(body, 'x', n);
        memcpy(body, "{\"pad\":\"", 8);
        memcpy(body + n - 2, "\"}", 2);
        amqp_confirm_select(c, 1);
        check(amqp_get_rpc_reply(c), "confirm.select");
        amqp_basic_properties_t p;
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
        p.delivery_mode = 2;
        p.message_id = amqp_cstring_bytes(argv[5]);
        amqp_bytes_t b = {n, body};
        if (amqp_basic_publish(c, 1, amqp_empty_bytes,
                               amqp_cstring_bytes(queue), 1, 0, &p, b) != 0) {
            fprintf(stderr, "amqptool: publish failed\n");
            return 1;
        }
        wait_confirms(1);
        free(body);
    } else if (strcmp(cmd, "rpc") == 0 && argc >= 6) {
        /* rpc QUEUE BODY SECONDS: request with direct reply-to */
        amqp_basic_consume(c, 1, amqp_cstring_bytes("amq.rabbitmq.reply-to"),
                           amqp_empty_bytes, 0, 1, 0, amqp_empty_table);
        check(amqp_get_rpc_reply(c), "basic.consume");
        char corr[64];
        snprintf(corr, sizeof corr, "rpc-%d", (int)getpid());
        amqp_basic_properties_t p;
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
                   AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.reply_to = amqp_cstring_bytes("amq.rabbitmq.reply-to");
        p.correlation_id = amqp_cstring_bytes(corr);
        p.content_type = amqp_cstring_bytes("application/json");
        if (amqp_basic_publish(c, 1, amqp_empty_bytes,
                               amqp_cstring_bytes(queue), 1, 0, &p,
                               amqp_cstring_bytes(argv[4])) != 0)
            return 1;
        struct timeval tv = {atoi(argv[5]), 0};
        for (;;) {
            amqp_envelope_t e;
            amqp_maybe_release_buffers(c);
            amqp_rpc_reply_t r = amqp_consume_message(c, &e, &tv, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL) {
                fprintf(stderr, "amqptool: no reply\n");
                return 1;
            }
            amqp_bytes_t got = e.message.properties.correlation_id;
            if (got.len == strlen(corr) && memcmp(got.bytes, corr,
                                                  got.len) == 0) {
                printf("%.*s\n", (int)e.message.body.len,
                       (char *)e.message.body.bytes);
                amqp_destroy_envelope(&e);
                break;
            }
            amqp_destroy_envelope(&e);
        }
    } else if (strcmp(cmd, "take") == 0) {
        /* take QUEUE: basic.get one message without acknowledging it and
         * disconnect, so that the broker takes it back: a consumer that
         * dies before it settles. Prints the delivery's x-delivery-count
         * (0 without one), or "empty" */
        amqp_message_t m;
        if (!get_one(queue, 0, &m)) {
            printf("empty\n");
        } else {
            long long n = 0;
            amqp_table_t *h = &m.properties.headers;
            for (int i = 0; (m.properties._flags & AMQP_BASIC_HEADERS_FLAG) &&
                            i < h->num_entries; i++) {
                amqp_table_entry_t *e = &h->entries[i];
                if (e->key.len != 16 ||
                    memcmp(e->key.bytes, "x-delivery-count", 16) != 0)
                    continue;
                switch (e->value.kind) {
                case AMQP_FIELD_KIND_I64: n = e->value.value.i64; break;
                case AMQP_FIELD_KIND_I32: n = e->value.value.i32; break;
                case AMQP_FIELD_KIND_U32: n = e->value.value.u32; break;
                default: n = -1;
                }
            }
            printf("%lld\n", n);
            amqp_destroy_message(&m);
        }
        /* no ack: closing the connection gives the message back */
    } else if (strcmp(cmd, "meta") == 0 && argc >= 8) {
        /* meta QUEUE BODY ID REPLY_TO CORRELATION_ID [NAME=VALUE...]: one
         * message with these properties and string headers, confirmed */
        amqp_table_entry_t h[16];
        int nh = 0;
        for (int i = 8; i < argc && nh < 16; i++) {
            const char *eq = strchr(argv[i], '=');
            if (eq == NULL)
                return 2;
            h[nh].key.bytes = argv[i];
            h[nh].key.len = (size_t)(eq - argv[i]);
            h[nh].value.kind = AMQP_FIELD_KIND_UTF8;
            h[nh].value.value.bytes = amqp_cstring_bytes(eq + 1);
            nh++;
        }
        amqp_basic_properties_t p;
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                   AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
                   AMQP_BASIC_HEADERS_FLAG;
        p.delivery_mode = 2;
        p.message_id = amqp_cstring_bytes(argv[5]);
        p.reply_to = amqp_cstring_bytes(argv[6]);
        p.correlation_id = amqp_cstring_bytes(argv[7]);
        p.headers.num_entries = nh;
        p.headers.entries = h;
        publish_one(queue, &p, argv[4]);
    } else if (strcmp(cmd, "dead") == 0 && argc >= 9) {
        /* dead QUEUE BODY ID TASK ERROR FAILED_AT: one dead letter as the
         * daemon writes it (message id ID, headers x-origin-id ID, x-task,
         * x-error, x-attempts 1, x-failed-at FAILED_AT epoch ms), confirmed */
        const char *k[] = {"x-origin-id", "x-task", "x-error",
                           "x-attempts", "x-failed-at"};
        amqp_table_entry_t h[5];
        for (int i = 0; i < 5; i++) {
            h[i].key = amqp_cstring_bytes(k[i]);
            h[i].value.kind = AMQP_FIELD_KIND_UTF8;
            h[i].value.value.bytes = amqp_cstring_bytes(
                i == 0 ? argv[5] : i == 1 ? argv[6] : argv[7]);
        }
        h[3].value.kind = AMQP_FIELD_KIND_I64;
        h[3].value.value.i64 = 1;
        h[4].value.kind = AMQP_FIELD_KIND_I64;
        h[4].value.value.i64 = atoll(argv[8]);
        amqp_basic_properties_t p;
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                   AMQP_BASIC_HEADERS_FLAG;
        p.delivery_mode = 2;
        p.message_id = amqp_cstring_bytes(argv[5]);
        p.headers.num_entries = 5;
        p.headers.entries = h;
        publish_one(queue, &p, argv[4]);
    } else if (strcmp(cmd, "props") == 0) {
        /* props QUEUE: basic.get one message (acknowledged) and print its
         * reply_to, correlation_id and message_id properties and its
         * string headers, one "name=value" a line; or "empty" */
        amqp_message_t m;
        if (!get_one(queue, 1, &m)) {
            printf("empty\n");
        } else {
            amqp_basic_properties_t *p = &m.properties;
            if (p->_flags & AMQP_BASIC_REPLY_TO_FLAG)
                printf("reply_to=%.*s\n", (int)p->reply_to.len,
                       (char *)p->reply_to.bytes);
            if (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
                printf("correlation_id=%.*s\n", (int)p->correlation_id.len,
                       (char *)p->correlation_id.bytes);
            if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                printf("message_id=%.*s\n", (int)p->message_id.len,
                       (char *)p->message_id.bytes);
            for (int i = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) &&
                            i < p->headers.num_entries; i++) {
                amqp_table_entry_t *e = &p->headers.entries[i];
                if (e->value.kind == AMQP_FIELD_KIND_UTF8 ||
                    e->value.kind == AMQP_FIELD_KIND_BYTES)
                    printf("%.*s=%.*s\n", (int)e->key.len,
                           (char *)e->key.bytes,
                           (int)e->value.value.bytes.len,
                           (char *)e->value.value.bytes.bytes);
            }
            amqp_destroy_message(&m);
        }
    } else if (strcmp(cmd, "declare") == 0 && argc >= 5) {
        /* declare QUEUE MAX_PRIORITY [DLX DLRK]: a durable queue */
        amqp_table_entry_t a[3];
        memset(a, 0, sizeof a);
        a[0].key = amqp_cstring_bytes("x-max-priority");
        a[0].value.kind = AMQP_FIELD_KIND_I32;
        a[0].value.value.i32 = atoi(argv[4]);
        int n = 1;
        if (argc >= 7) {
            a[1].key = amqp_cstring_bytes("x-dead-letter-exchange");
            a[1].value.kind = AMQP_FIELD_KIND_UTF8;
            a[1].value.value.bytes = amqp_cstring_bytes(argv[5]);
            a[2].key = amqp_cstring_bytes("x-dead-letter-routing-key");
            a[2].value.kind = AMQP_FIELD_KIND_UTF8;
            a[2].value.value.bytes = amqp_cstring_bytes(argv[6]);
            n = 3;
        }
        amqp_table_t t = {n, a};
        amqp_queue_declare(c, 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, t);
        check(amqp_get_rpc_reply(c), "queue.declare");
    } else {
        fprintf(stderr, "amqptool: bad command\n");
        return 2;
    }
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
    return 0;
}
C
	cc -std=c11 -O1 -Wall -o "$TEST_DIR/amqptool" "$src" -lrabbitmq ||
		fail "cannot compile amqptool (needs cc and librabbitmq-dev)"
	mv -f "$TEST_DIR/amqptool" "$AMQPTOOL"
}

# amqptool CMD QUEUE ARGS...: run the raw client against the run's node.
amqptool() {
	build_amqptool
	timeout 60 "$AMQPTOOL" "$RABBIT_PORT" "$@"
}

# ready_count QUEUE: messages ready in QUEUE ("missing" when it is not there).
ready_count() {
	amqptool count "$1"
}

# -------------------------------------------------------------- messages

# emit_amqp CONFIG TASK JSON [ARGS...]: `taskmill emit`, printing the new
# message id (a UUID); fails the test otherwise.
emit_amqp() {
	local conf=$1 task=$2 body=$3
	shift 3
	tm emit -c "$conf" "$task" "$body" "$@"
	if ((TM_RC != 0)); then
		fail "taskmill emit $task '$body' $* exited $TM_RC: $(head -c 500 "$TM_ERR")"
	fi
	local id
	id=$(tr -d '[:space:]' <"$TM_OUT")
	[[ $id =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] ||
		fail "taskmill emit printed '$id', not a message id"
	echo "$id"
}

# dlq_lines CONFIG TASK: number of entries `taskmill dlq list` prints.
dlq_lines() {
	tm dlq -c "$1" list "$2"
	((TM_RC == 0)) || fail "taskmill dlq list $2 exited $TM_RC: $(head -c 300 "$TM_ERR")"
	grep -c . "$TM_OUT" || true
}

# journal_unique FILE: number of distinct message ids in a journal file.
journal_unique() {
	[[ -f $1 ]] || {
		echo 0
		return 0
	}
	cut -d' ' -f1 "$1" | sort -u | wc -l
}

# json_field JSON KEY: a top-level string or number field of a JSON object
# (via jq when installed, else a simple match good for taskmill's output).
json_field() {
	if command -v jq >/dev/null 2>&1; then
		jq -r --arg k "$2" '.[$k] // empty' <<<"$1"
	else
		tr -d '\n' <<<"$1" | sed -n "s/.*\"$2\": *\"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p"
	fi
}
