# RabbitMQ, thread pool: a run that returns late (wedge.so sleeps 3 s, not
# looking at should_stop(), under a 1 s timeout) is settled once, as
# `timeout`, at its deadline: exactly one dead letter, published while the
# run still sleeps. The settlement of a dead letter takes the delivery
# (id, body, headers) the run's code still reads; that delivery stays
# until the code returned, reread its body and logged its id (under ASan a
# freed delivery would be reported), and then goes with the batch.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

LIMIT_MS=1000
SLEEP_MS=3000
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.late
write_amqp_config "$CONF" pool_size=2 <<YAML
tasks:
  late:
    plugin: $TM_BUILD/test-plugins/wedge.so
    queue: $Q
    timeout: 1s
    on_error: reject
YAML
start_daemon "$CONF"
wait_ping

t0=$(now_ms)
id=$(emit_amqp "$CONF" late "{\"ms\":$SLEEP_MS}")
wait_metric taskmill_tasks_total 'task="late",outcome="timeout"' 1 15
t1=$(now_ms)
note "settled as timeout $((t1 - t0)) ms after publishing"
assert_le $((LIMIT_MS + 1500)) "$((t1 - t0))" "ms to the timeout (limit $LIMIT_MS ms, a run of $SLEEP_MS ms)"
wait_until "[[ \$(ready_count $Q.dlq) == 1 ]]" 10
assert_eq 1 "$(metric taskmill_runs_stuck 'task="late"')" "taskmill_runs_stuck while the run sleeps"

# the code returns: it read its body and logged its id, long after the
# dead letter was confirmed and the original acknowledged
wait_metric taskmill_runs_stuck 'task="late"' 0 15
wait_until "grep -q 'id=$id slept $SLEEP_MS ms on message $id' $DAEMON_LOG" 5
sleep 1
assert_eq 1 "$(ready_count "$Q.dlq")" "dead letters"
assert_eq 0 "$(ready_count "$Q")" "messages left in $Q"
assert_eq 1 "$(metric taskmill_tasks_total 'task="late"')" "attempts counted"
assert_eq 1 "$(dlq_lines "$CONF" late)" "dlq list lines"
grep -q "ran past the limit of $LIMIT_MS ms; still running" "$TM_OUT" ||
	fail "dlq list does not show the timeout: $(cat "$TM_OUT")"

# the pool kept its size
emit_amqp "$CONF" late '{"ms":50}' >/dev/null
emit_amqp "$CONF" late '{"ms":50}' >/dev/null
wait_metric taskmill_tasks_total 'task="late",outcome="success"' 2 10

rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "exit status"
