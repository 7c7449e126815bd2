# A reload that changes a key only a restart applies is refused and names
# the key, nested broker keys included (broker.tls.*, broker.redis.*):
# the log line, /status config.last_reload_error and
# taskmill_config_last_reload_successful 0 say so, the generation keeps
# its number and the daemon goes on with the configuration it runs. A
# reloadable change (a task's timeout, http.allowed_hosts) still applies.
# The daemon talks to a redis-server over TLS, so that broker.tls is a
# valid part of the file.
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"

T=$TEST_DIR/certs
topo_certs "$T"
# the same CA under another name: applying it would change nothing but
# the file the daemon reads at its next connect
cp "$T/ca.pem" "$T/ca-copy.pem"
P=$(free_port)
tls_cli() {
	redis-cli -h 127.0.0.1 -p "$P" --tls --cacert "$T/ca.pem" "$@"
}
topo_redis_start tls-redis "tls_cli ping" --port 0 --tls-port "$P" \
	--tls-cert-file "$T/server.pem" --tls-key-file "$T/server.key" \
	--tls-ca-cert-file "$T/ca.pem" --tls-auth-clients no

HTTP_PORT=$(free_port)
CONF=$TEST_DIR/taskmill.yaml
# conf TLS REDIS TIMEOUT HOSTS: the config with these broker.tls and
# broker.redis mappings, the task's timeout and http.allowed_hosts (the
# queue's keys share a hash slot, so that mode: cluster is a valid file)
conf() {
	cat >"$CONF" <<YAML
broker:
  url: rediss://localhost:$P/0
  tls: $1
  redis: $2
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HTTP_PORT, allowed_hosts: $4 }
log: { level: debug }
tasks:
  add: { plugin: add.so, queue: '{q.keys}', timeout: $3 }
YAML
}
TLS0="{ ca_file: $T/ca.pem }"
REDIS0="{ mode: standalone }"
conf "$TLS0" "$REDIS0" 30s "[a.example]"
# what the daemon runs, for emit (a refused file may not even connect)
EMIT_CONF=$TEST_DIR/emit.yaml
cp "$CONF" "$EMIT_CONF"

refusals() { grep -c 'reload refused' "$DAEMON_LOG" || true; }
successes=0
# processes N: one more message is run, on the running configuration
processes() {
	successes=$((successes + 1))
	emit "$EMIT_CONF" add '{"a":1,"b":2}' >/dev/null
	wait_metric taskmill_tasks_total 'task="add",outcome="success"' \
		"$successes" 20
}
# refused N KEYS_RE: the Nth refusal, naming KEYS_RE, the daemon still on
# generation 1 and running messages
refused() {
	kill -HUP "$DAEMON_PID"
	wait_until "[[ \$(refusals) == $1 ]]" 10
	local line
	line=$(grep 'reload refused' "$DAEMON_LOG" | tail -n 1)
	assert_match "$2 changed, which needs? a restart" "$line" \
		"refusal $1 names the key"
	wait_until "[[ \$(metric taskmill_config_last_reload_successful) == 0 ]]" 5
	assert_eq 1 "$(metric taskmill_config_generation)" \
		"generation after refusal $1"
	local st
	st=$(curl -s "http://127.0.0.1:$HTTP_PORT/status")
	assert_match "$2" "$(jq -r .config.last_reload_error <<<"$st")" \
		"/status config.last_reload_error after refusal $1"
	daemon_alive || fail "the daemon exited after refusal $1"
	processes
}

start_daemon "$CONF"
wait_ping
processes

# 1. broker.tls.ca_file
conf "{ ca_file: $T/ca-copy.pem }" "$REDIS0" 30s "[a.example]"
refused 1 'broker\.tls\.ca_file'
# 2. broker.tls.verify
conf "{ ca_file: $T/ca.pem, verify: false }" "$REDIS0" 30s "[a.example]"
refused 2 'broker\.tls\.verify'
# 3. broker.tls.server_name
conf "{ ca_file: $T/ca.pem, server_name: localhost }" "$REDIS0" 30s "[a.example]"
refused 3 'broker\.tls\.server_name'
# 4. broker.redis.mode
conf "$TLS0" "{ mode: cluster }" 30s "[a.example]"
refused 4 'broker\.redis\.mode'
# 5. two at once, with a reloadable change beside them: nothing applies
conf "{ ca_file: $T/ca-copy.pem }" "{ mode: cluster }" 20s "[a.example]"
refused 5 'broker\.tls\.ca_file, broker\.redis\.mode'
assert_eq 0 "$(grep -c 'as configuration 2' "$DAEMON_LOG" || true)" \
	"no new configuration after the refusals"

# 6. reloadable changes only: they apply
conf "$TLS0" "$REDIS0" 20s "[a.example, b.example]"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
wait_until "[[ \$(metric taskmill_config_last_reload_successful) == 1 ]]" 5
assert_eq 2 "$(metric taskmill_config_generation)" "generation after a reload"
st=$(curl -s "http://127.0.0.1:$HTTP_PORT/status")
assert_eq null "$(jq -r .config.last_reload_error <<<"$st")" \
	"/status: no error after a reload that took effect"
processes
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status"
topo_redis_stop "$TOPO_PID"
true
