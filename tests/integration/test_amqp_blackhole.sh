# A RabbitMQ broker that goes silent: the path to it is blackholed in
# both directions (a TCP proxy keeps the connections open and passes
# nothing), so no socket error ever comes. The daemon must notice it by
# the missed heartbeats (broker.amqp.heartbeat 2 s: two of them) and turn
# /ping 503 within a bound, keep /healthz 200, and once the path passes
# again reconnect and run new work. With the heartbeat off (0) /ping
# stays 200 for as long as the path is blackholed, and this test fails.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
fault_proxy_start A "$RABBIT_PORT"
Q=$AQ.noop
HB=2
DIRECT=$TEST_DIR/direct.yaml
write_amqp_config "$DIRECT" <<YAML
tasks:
  noop: { plugin: noop.so, queue: $Q }
YAML
HTTP_PORT=
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" pool_size=2 url="amqp://127.0.0.1:$FAULT_PORT_A/" \
	amqp="{ heartbeat: ${HB}s }" <<YAML
tasks:
  noop: { plugin: noop.so, queue: $Q }
YAML
# emit declares the topology on the direct path; the daemon comes in
# through the proxy
emit_amqp "$DIRECT" noop '{"n":1}' >/dev/null
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 30

fault_proxy A "blackhole both"
# two heartbeats, then the bounded reconnect attempts: generous, the
# machine may be loaded; without the check /ping stays 200 for ever
LIMIT=$((2 * HB + 20))
t0=$SECONDS
down=
while ((SECONDS - t0 <= LIMIT)); do
	assert_eq 200 "$(http_code /healthz)" "/healthz with a blackholed broker, after $((SECONDS - t0)) s"
	daemon_alive || fail "daemon died with a blackholed broker"
	if [[ $(http_code /ping) == 503 ]]; then
		down=$((SECONDS - t0))
		break
	fi
	sleep 0.5
done
[[ -n $down ]] || fail "/ping still 200 ${LIMIT} s after the broker went silent (heartbeat ${HB} s)"
note "/ping turned 503 ${down} s after the broker went silent (heartbeat ${HB} s)"

fault_proxy A pass
wait_ping "$HTTP_PORT" 60
emit_amqp "$DIRECT" noop '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 2 60
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
