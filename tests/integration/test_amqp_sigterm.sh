# Graceful stop on RabbitMQ: on SIGTERM the running tasks finish and are
# acknowledged (through the settle path after intake stopped), the
# deliveries not yet started go back to the queue at once, the exit status
# is 0, and the next daemon runs exactly the rest.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.sleep
write_amqp_config "$CONF" pool_size=2 <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: $Q, prefetch: 4 }
YAML
for i in 1 2 3 4 5 6; do
	emit_amqp "$CONF" sleep '{"ms":1500}' >/dev/null
done

start_daemon "$CONF"
wait_metric taskmill_pool_busy '' 2 20
rc=0
stop_daemon 20 || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
grep -q "stopped cleanly" "$DAEMON_LOG" || fail "no clean stop in the log"
# two ran and were acknowledged; the two prefetched ones and the two never
# delivered are ready again
assert_eq 4 "$(ready_count "$Q")" "messages ready after the stop"

start_daemon "$CONF"
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' 4 30
wait_until "[[ \$(ready_count $Q) == 0 ]]" 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "second daemon's exit status"
assert_eq 0 "$(ready_count "$Q")" "messages ready at the end"
assert_eq 0 "$(ready_count "$Q.dlq")" "dead letters"
