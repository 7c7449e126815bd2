# A task queue that exists with other arguments is never changed or deleted:
# emit and the daemon report the broker's refusal naming the argument
# (x-dead-letter-exchange for a queue declared without dead-lettering,
# x-max-priority for one declared with max-priority 3 instead of 5); the
# daemon stops at start with exit status 2 (a configuration error that no
# retry can fix), and the queues and their messages are still there.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.topo
P=$AQ.plain
amqptool declare "$Q" 3 taskmill.dlx "$Q.dlq"
amqptool publish "$Q" 1 '{"n":%d}' >/dev/null
amqptool declare "$P" 3
amqptool publish "$P" 1 '{"n":%d}' >/dev/null
write_amqp_config "$CONF" <<YAML
tasks:
  noop: { plugin: noop.so, queue: $Q, max_priority: 5 }
  plain: { plugin: noop.so, queue: $P, max_priority: 3 }
YAML

tm emit -c "$CONF" noop '{"n":2}'
assert_eq 1 "$TM_RC" "emit exit status"
grep -q "inequivalent arg 'x-max-priority'" "$TM_ERR" ||
	fail "emit does not name the argument: $(cat "$TM_ERR")"
grep -q "PRECONDITION_FAILED" "$TM_ERR" || fail "emit does not say why: $(cat "$TM_ERR")"
tm emit -c "$CONF" plain '{"n":2}'
assert_eq 1 "$TM_RC" "emit exit status"
grep -q "inequivalent arg 'x-dead-letter-exchange'" "$TM_ERR" ||
	fail "emit does not name the argument: $(cat "$TM_ERR")"

start_daemon "$CONF"
wait_until "! daemon_alive" 15
rc=0
wait "$DAEMON_PID" || rc=$?
DAEMON_PID=
assert_eq 2 "$rc" "daemon exit status for a queue with other arguments"
grep -q "inequivalent arg 'x-max-priority'" "$DAEMON_LOG" ||
	fail "the daemon does not name the argument: $(tail -3 "$DAEMON_LOG")"
assert_eq 1 "$(ready_count "$Q")" "messages still in $Q"
assert_eq 1 "$(ready_count "$P")" "messages still in $P"
