# amqps:// with broker.tls. A socat TLS front end (certificate for
# "localhost", signed by a test CA) forwards to the run's RabbitMQ. The
# system CA bundle does not trust the test CA: refused. broker.tls.ca_file
# naming the test CA: accepted; the host name is verified too (127.0.0.1 is
# not in the certificate: refused, unless broker.tls.server_name says
# localhost). verify: false skips the checks, with a warning. A second
# front end requires a client certificate: refused without one, accepted
# with cert_file and key_file. The TASKMILL_AMQP_* variables broker.tls
# replaced are refused, naming the key. A daemon serves a request/reply
# over TLS with a client certificate.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
command -v socat >/dev/null 2>&1 || skip "socat is not installed"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"

T=$TEST_DIR/tls
mkdir -p "$T"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/ca.key" -out "$T/ca.pem" \
	-days 2 -subj "/CN=taskmill test CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$T/server.key" -out "$T/server.csr" \
	-subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost\n' >"$T/ext.cnf"
openssl x509 -req -in "$T/server.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" \
	-CAcreateserial -out "$T/server.pem" -days 2 -extfile "$T/ext.cnf" 2>/dev/null

# a client certificate, signed by the same CA
openssl req -newkey rsa:2048 -nodes -keyout "$T/client.key" -out "$T/client.csr" \
	-subj "/CN=taskmill client" 2>/dev/null
openssl x509 -req -in "$T/client.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" \
	-CAcreateserial -out "$T/client.pem" -days 2 2>/dev/null

TLS_PORT=$(free_port)
socat "OPENSSL-LISTEN:$TLS_PORT,bind=127.0.0.1,reuseaddr,fork,cert=$T/server.pem,key=$T/server.key,verify=0" \
	"TCP:127.0.0.1:$RABBIT_PORT" 2>"$TEST_DIR/socat.err" &
SOCAT_PID=$!
MTLS_PORT=$(free_port)
socat "OPENSSL-LISTEN:$MTLS_PORT,bind=127.0.0.1,reuseaddr,fork,cert=$T/server.pem,key=$T/server.key,cafile=$T/ca.pem,verify=1" \
	"TCP:127.0.0.1:$RABBIT_PORT" 2>"$TEST_DIR/socat-mtls.err" &
MSOCAT_PID=$!
tm_on_exit 'kill $SOCAT_PID $MSOCAT_PID 2>/dev/null; wait $SOCAT_PID $MSOCAT_PID 2>/dev/null'
wait_until "! port_is_free $TLS_PORT && ! port_is_free $MTLS_PORT" 10

Q=$AQ.add
TASKS="tasks:
  add: { plugin: add.so, queue: $Q }"
# conf NAME URL [TLS]: a config file for the front end at URL
conf() {
	write_amqp_config "$TEST_DIR/$1.yaml" url="$2" ${3:+tls="$3"} <<<"$TASKS"
}
conf system "amqps://localhost:$TLS_PORT/"
conf ca "amqps://localhost:$TLS_PORT/" "{ ca_file: $T/ca.pem }"
conf by-ip "amqps://127.0.0.1:$TLS_PORT/" "{ ca_file: $T/ca.pem }"
conf by-ip-named "amqps://127.0.0.1:$TLS_PORT/" \
	"{ ca_file: $T/ca.pem, server_name: localhost }"
conf by-ip-wrong-name "amqps://localhost:$TLS_PORT/" \
	"{ ca_file: $T/ca.pem, server_name: rabbit.example }"
conf noverify "amqps://127.0.0.1:$TLS_PORT/" "{ verify: false }"
conf mtls-none "amqps://localhost:$MTLS_PORT/" "{ ca_file: $T/ca.pem }"
conf mtls "amqps://localhost:$MTLS_PORT/" \
	"{ ca_file: $T/ca.pem, cert_file: $T/client.pem, key_file: $T/client.key }"
conf mtls-nokey "amqps://localhost:$MTLS_PORT/" \
	"{ ca_file: $T/ca.pem, cert_file: $T/client.pem, key_file: $T/nope.key }"

unset TASKMILL_AMQP_CACERT TASKMILL_AMQP_CERT TASKMILL_AMQP_KEY TASKMILL_AMQP_TLS_VERIFY
tm emit -c "$TEST_DIR/system.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit with the system CA bundle (test CA not trusted)"
grep -q "verification failed" "$TM_ERR" || fail "no verification failure: $(cat "$TM_ERR")"

emit_amqp "$TEST_DIR/ca.yaml" add '{"a":1,"b":1}' >/dev/null
tm emit -c "$TEST_DIR/by-ip.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit to a host name not in the certificate"
grep -q "hostname verification failed" "$TM_ERR" ||
	fail "no host name verification failure: $(cat "$TM_ERR")"
emit_amqp "$TEST_DIR/by-ip-named.yaml" add '{"a":1,"b":1}' >/dev/null
tm emit -c "$TEST_DIR/by-ip-wrong-name.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit with a server_name not in the certificate"
grep -q "verification failed" "$TM_ERR" ||
	fail "no verification failure for server_name: $(cat "$TM_ERR")"

emit_amqp "$TEST_DIR/noverify.yaml" add '{"a":1,"b":1}' >/dev/null
tm emit -c "$TEST_DIR/noverify.yaml" add '{"a":1,"b":1}'
grep -q "broker.tls.verify is false" "$TM_ERR" ||
	fail "no warning for verify: false: $(cat "$TM_ERR")"

# mutual TLS
tm emit -c "$TEST_DIR/mtls-none.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit without a client certificate where one is required"
tm emit -c "$TEST_DIR/mtls-nokey.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit with a missing key file"
grep -q "cannot load the client certificate" "$TM_ERR" ||
	fail "no client certificate error: $(cat "$TM_ERR")"
emit_amqp "$TEST_DIR/mtls.yaml" add '{"a":1,"b":1}' >/dev/null

# the replaced environment variables are refused, naming the key
TASKMILL_AMQP_CACERT=$T/ca.pem tm emit -c "$TEST_DIR/ca.yaml" add '{"a":1,"b":1}'
assert_eq 2 "$TM_RC" "emit with TASKMILL_AMQP_CACERT set"
grep -q "TASKMILL_AMQP_CACERT is set, but no longer read: set broker.tls.ca_file" "$TM_ERR" ||
	fail "no refusal of TASKMILL_AMQP_CACERT: $(cat "$TM_ERR")"

start_daemon "$TEST_DIR/mtls.yaml"
wait_ping
tm emit -c "$TEST_DIR/mtls.yaml" add '{"a":2,"b":3}' --wait 10
assert_eq 0 "$TM_RC" "emit --wait over TLS: $(cat "$TM_ERR")"
assert_eq '{"sum":5}' "$(cat "$TM_OUT")" "emit --wait over TLS"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 6 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
