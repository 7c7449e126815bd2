# amqps:// with CA verification. A socat TLS front end (certificate for
# "localhost", signed by a test CA) forwards to the run's RabbitMQ. The
# system CA bundle does not trust the test CA: refused. TASKMILL_AMQP_CACERT
# naming the test CA: accepted; the host name is verified too (127.0.0.1 is
# not in the certificate: refused). TASKMILL_AMQP_TLS_VERIFY=0 skips the
# checks. A daemon serves a request/reply over TLS.
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

TLS_PORT=$(free_port)
socat "OPENSSL-LISTEN:$TLS_PORT,bind=127.0.0.1,reuseaddr,fork,cert=$T/server.pem,key=$T/server.key,verify=0" \
	"TCP:127.0.0.1:$RABBIT_PORT" 2>"$TEST_DIR/socat.err" &
SOCAT_PID=$!
tm_on_exit 'kill $SOCAT_PID 2>/dev/null; wait $SOCAT_PID 2>/dev/null'
wait_until "! port_is_free $TLS_PORT" 10

Q=$AQ.add
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" url="amqps://localhost:$TLS_PORT/" <<YAML
tasks:
  add: { plugin: add.so, queue: $Q }
YAML
sed "s|amqps://localhost:|amqps://127.0.0.1:|" "$CONF" >"$TEST_DIR/by-ip.yaml"

unset TASKMILL_AMQP_CACERT TASKMILL_AMQP_TLS_VERIFY
tm emit -c "$CONF" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit with the system CA bundle (test CA not trusted)"
grep -q "verification failed" "$TM_ERR" || fail "no verification failure: $(cat "$TM_ERR")"

export TASKMILL_AMQP_CACERT=$T/ca.pem
emit_amqp "$CONF" add '{"a":1,"b":1}' >/dev/null
tm emit -c "$TEST_DIR/by-ip.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit to a host name not in the certificate"
grep -q "hostname verification failed" "$TM_ERR" ||
	fail "no host name verification failure: $(cat "$TM_ERR")"

unset TASKMILL_AMQP_CACERT
export TASKMILL_AMQP_TLS_VERIFY=0
emit_amqp "$TEST_DIR/by-ip.yaml" add '{"a":1,"b":1}' >/dev/null
unset TASKMILL_AMQP_TLS_VERIFY

export TASKMILL_AMQP_CACERT=$T/ca.pem
start_daemon "$CONF"
wait_ping
tm emit -c "$CONF" add '{"a":2,"b":3}' --wait 10
assert_eq 0 "$TM_RC" "emit --wait over TLS: $(cat "$TM_ERR")"
assert_eq '{"sum":5}' "$(cat "$TM_OUT")" "emit --wait over TLS"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 3 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
