# RabbitMQ: /metrics counts the batches read with the consuming socket's
# low-water mark on (taskmill_broker_lowat_batches_total). A drain with a
# prefetch under 256 never engages it (0); a drain of the same messages
# with a prefetch of 1024 does (the count moves).
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
N=20000
Q=$AQ.lowat

for prefetch in 32 1024; do
	note "---- prefetch $prefetch"
	CONF=$TEST_DIR/p$prefetch.yaml
	HTTP_PORT=
	write_amqp_config "$CONF" pool_kind=thread pool_size=4 <<YAML
tasks:
  noop: { plugin: noop.so, queue: $Q, prefetch: $prefetch }
YAML
	# emit declares the topology; its message is drained with the rest
	emit_amqp "$CONF" noop '{}' >/dev/null
	amqptool publish "$Q" "$N" '{"n":%d}' >/dev/null
	assert_eq $((N + 1)) "$(ready_count "$Q")" "messages ready in $Q before the start"

	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="noop",outcome="success"' $((N + 1)) 120
	batches=$(metric taskmill_broker_lowat_batches_total)
	note "prefetch $prefetch: $batches batches read with the low-water mark on"
	if ((prefetch < 256)); then
		assert_eq 0 "$batches" "batches with the low-water mark on, prefetch $prefetch"
	else
		assert_ge 1 "$batches" "batches with the low-water mark on, prefetch $prefetch"
	fi
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status after SIGTERM (prefetch $prefetch)"
	assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
done
