# rediss:// where the TLS session cannot start, each refused by `taskmill
# emit` (exit 1) with the reason named: a server that accepts and never
# answers the handshake (the 5 s connect limit), one that answers in
# plain text rather than TLS, a key_file that does not match the
# cert_file, and a ca_file that holds no certificate (the configuration
# only names the files; they are read at connect). test_redis_tls.sh covers the sessions that start, a wrong
# CA and a wrong name.
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"
command -v socat >/dev/null 2>&1 || skip "socat is not installed"

T=$TEST_DIR/certs
topo_certs "$T"
fault_proxy_start r "$REDIS_PORT"
TEXT_PORT=$(free_port)
# a server that writes a Redis error line to every client, then reads
# until the client closes (a script: socat's address syntax takes no
# quotes)
cat >"$TEST_DIR/not_tls.sh" <<'SH'
#!/bin/sh
printf '%s\r\n' '-ERR not TLS'
exec cat >/dev/null
SH
chmod +x "$TEST_DIR/not_tls.sh"
socat "TCP-LISTEN:$TEXT_PORT,bind=127.0.0.1,reuseaddr,fork" \
	"EXEC:$TEST_DIR/not_tls.sh" 2>"$TEST_DIR/socat.err" &
SOCAT_PID=$!
tm_on_exit "kill $SOCAT_PID 2>/dev/null; wait $SOCAT_PID 2>/dev/null"
wait_until "! port_is_free $TEXT_PORT" 10

# conf NAME PORT TLS: a rediss:// config for 127.0.0.1:PORT
conf() {
	cat >"$TEST_DIR/$1.yaml" <<YAML
broker:
  url: rediss://127.0.0.1:$2/0
  tls: $3
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$(free_port) }
tasks:
  add: { plugin: add.so, queue: q.tls.errors }
YAML
}
# shellcheck disable=SC2154 # FAULT_PORT_r: set by fault_proxy_start
conf hung "$FAULT_PORT_r" "{ ca_file: $T/ca.pem }"
conf text "$TEXT_PORT" "{ ca_file: $T/ca.pem }"
conf key "$REDIS_PORT" \
	"{ ca_file: $T/ca.pem, cert_file: $T/client.pem, key_file: $T/server.key }"
echo "not a certificate" >"$T/junk.pem"
conf ca "$REDIS_PORT" "{ ca_file: $T/junk.pem }"

# refused CONFIG WHAT PATTERN: emit through CONFIG exits 1 with an error
# matching PATTERN
refused() {
	tm emit -c "$TEST_DIR/$1.yaml" add '{"a":1,"b":1}'
	assert_eq 1 "$TM_RC" "emit exit status ($2)"
	assert_match "$3" "$(cat "$TM_ERR")" "emit error ($2)"
}

# 1. the server accepts and holds every byte: the handshake's wait for
# the server's hello ends at the connect limit
fault_proxy r "blackhole both"
refused hung "a hung server" 'cannot connect to rediss://.*: TLS handshake: timed out'
fault_proxy r pass

# 2. the server answers in plain text: not a TLS record
refused text "a plain-text server" 'TLS handshake: .*wrong version number'

# 3. the key does not match the certificate: refused before the handshake
refused key "a key of another certificate" \
	"TLS: cannot use key_file $T/server.key: .*key values mismatch"

# 4. the CA file holds no certificate: refused before the handshake
refused ca "a CA file without a certificate" \
	"TLS: cannot load the CA file $T/junk.pem: "
true
