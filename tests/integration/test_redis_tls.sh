# Redis over TLS (rediss://, broker.tls): a redis-server with a TLS port
# only and a CA and certificates made here. A config with ca_file
# processes messages, a large body too; a wrong CA or a wrong name is refused with a clear
# error (emit exits 1, the daemon answers /ping 503 and keeps retrying);
# a server that requires client certificates accepts cert_file/key_file
# and refuses a client without one; verify: false connects with a
# warning.
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"

T=$TEST_DIR/certs
topo_certs "$T"
P=$(free_port)
tls_cli() {
	redis-cli -h 127.0.0.1 -p "$P" --tls --cacert "$T/ca.pem" \
		--cert "$T/client.pem" --key "$T/client.key" "$@"
}
# tls_redis AUTH_CLIENTS: (re)start the server, requiring client
# certificates when AUTH_CLIENTS is yes.
tls_redis() {
	[[ -n ${TLS_PID:-} ]] && topo_redis_stop "$TLS_PID"
	topo_redis_start tls-redis "tls_cli ping" --port 0 --tls-port "$P" \
		--tls-cert-file "$T/server.pem" --tls-key-file "$T/server.key" \
		--tls-ca-cert-file "$T/ca.pem" --tls-auth-clients "$1"
	TLS_PID=$TOPO_PID
}
tls_redis no
openssl s_client -connect "127.0.0.1:$P" </dev/null >/dev/null 2>&1 ||
	note "(a plain s_client handshake failed; the server may require more)"

HP=$(free_port)
HTTP_PORT=$HP
# conf NAME URL TLS: a config for the TLS server, broker.tls being TLS
conf() {
	cat >"$TEST_DIR/$1.yaml" <<YAML
broker:
  url: $2
  tls: $3
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
log: { level: debug }
tasks:
  add: { plugin: add.so, queue: q.tls }
YAML
}
conf ca "rediss://localhost:$P/0" "{ ca_file: $T/ca.pem }"
conf by-ip "rediss://127.0.0.1:$P/0" "{ ca_file: $T/ca.pem }"
conf wrong-ca "rediss://localhost:$P/0" "{ ca_file: $T/other.pem }"
conf wrong-name "rediss://localhost:$P/0" \
	"{ ca_file: $T/ca.pem, server_name: redis.example }"
conf mtls "rediss://localhost:$P/0" \
	"{ ca_file: $T/ca.pem, cert_file: $T/client.pem, key_file: $T/client.key }"
conf noverify "rediss://localhost:$P/0" "{ ca_file: $T/other.pem, verify: false }"

# 1. ca_file: messages are processed, through the CLI and the daemon
emit "$TEST_DIR/ca.yaml" add '{"a":1,"b":2}' >/dev/null
emit "$TEST_DIR/by-ip.yaml" add '{"a":2,"b":3}' >/dev/null
# a body of 70 kB, whose payload the daemon reads from the TLS session
# into its place in the reply rather than through the reader's buffer
pad=$(head -c 70000 /dev/zero | tr '\0' x)
emit "$TEST_DIR/ca.yaml" add "{\"a\":3,\"b\":4,\"pad\":\"$pad\"}" >/dev/null
assert_eq 3 "$(tls_cli XLEN q.tls)" "entries written over TLS"
start_daemon "$TEST_DIR/ca.yaml"
wait_ping
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 3 20
stop_daemon

# 2. a wrong CA, a wrong name: a clear error, /ping 503, retried
for c in wrong-ca wrong-name; do
	tm emit -c "$TEST_DIR/$c.yaml" add '{"a":1,"b":1}'
	assert_eq 1 "$TM_RC" "emit exit status ($c)"
	assert_match 'certificate verification failed' "$(cat "$TM_ERR")" \
		"emit error ($c)"
	start_daemon "$TEST_DIR/$c.yaml"
	wait_until "[[ \$(http_code /healthz) == 200 ]]" 20
	wait_until "(( \$(grep -c 'certificate verification failed' \"\$DAEMON_LOG\") >= 2 ))" 30
	assert_eq 503 "$(http_code /ping)" "/ping ($c)"
	stop_daemon
done
assert_match 'hostname mismatch' "$(cat "$TM_ERR")" "the wrong name is named"

# 3. client certificates required: refused without one, accepted with
tls_redis yes
tm emit -c "$TEST_DIR/ca.yaml" add '{"a":1,"b":1}'
assert_eq 1 "$TM_RC" "emit without a client certificate"
assert_match "certificate required" "$(cat "$TM_ERR")" "emit error without a client certificate"
before=$(tls_cli XLEN q.tls)
emit "$TEST_DIR/mtls.yaml" add '{"a":5,"b":5}' >/dev/null
start_daemon "$TEST_DIR/mtls.yaml"
wait_ping
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 20
stop_daemon
assert_eq $((before + 1)) "$(tls_cli XLEN q.tls)" "entry written with a client certificate"

# 4. verify: false connects through the wrong CA, with a warning
tls_redis no
start_daemon "$TEST_DIR/noverify.yaml"
wait_ping
grep -q 'verify is false' "$DAEMON_LOG" || fail "no warning for verify: false"
emit "$TEST_DIR/noverify.yaml" add '{"a":7,"b":7}' >/dev/null
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 20
stop_daemon
true
