# RabbitMQ: a reload that changes broker.amqp.heartbeat or
# broker.amqp.queue_type (read only when the daemon connects and
# declares its queues) is refused and names the key; the daemon goes on
# with generation 1 and runs messages. A task's timeout still reloads.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
EMIT_CONF=$TEST_DIR/emit.yaml
HTTP_PORT=$(free_port)
# conf AMQP TIMEOUT: the config with this broker.amqp and task timeout
conf() {
	write_amqp_config "$CONF" http_port="$HTTP_PORT" amqp="$1" <<YAML
tasks:
  add: { plugin: add.so, queue: $AQ.add, timeout: $2 }
YAML
}
conf "{ heartbeat: 30s }" 30s
cp "$CONF" "$EMIT_CONF"
refusals() { grep -c 'reload refused' "$DAEMON_LOG" || true; }
successes=0
processes() {
	successes=$((successes + 1))
	tm emit -c "$EMIT_CONF" add '{"a":1,"b":2}'
	assert_eq 0 "$TM_RC" "emit exit status"
	wait_metric taskmill_tasks_total 'task="add",outcome="success"' \
		"$successes" 30
}
refused() { # N KEY_RE
	kill -HUP "$DAEMON_PID"
	wait_until "[[ \$(refusals) == $1 ]]" 10
	assert_match "$2 changed, which needs a restart" \
		"$(grep 'reload refused' "$DAEMON_LOG" | tail -n 1)" "refusal $1"
	wait_until "[[ \$(metric taskmill_config_last_reload_successful) == 0 ]]" 5
	assert_eq 1 "$(metric taskmill_config_generation)" "generation after refusal $1"
	assert_match "$2" "$(curl -s "http://127.0.0.1:$HTTP_PORT/status" |
		jq -r .config.last_reload_error)" "/status after refusal $1"
	processes
}

start_daemon "$CONF"
wait_ping
processes
conf "{ heartbeat: 10s }" 30s
refused 1 'broker\.amqp\.heartbeat'
conf "{ heartbeat: 30s, queue_type: quorum }" 30s
refused 2 'broker\.amqp\.queue_type'
conf "{ heartbeat: 30s }" 20s
kill -HUP "$DAEMON_PID"
wait_metric taskmill_config_generation '' 2 30
assert_eq 1 "$(metric taskmill_config_last_reload_successful)" "a reload that applies"
processes
stop_daemon
