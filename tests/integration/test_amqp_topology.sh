# A task queue that exists with other arguments is never changed or deleted:
# emit and the daemon report the broker's refusal naming the argument
# (x-dead-letter-exchange for a queue declared without dead-lettering,
# x-max-priority for one declared with max-priority 3 instead of 5); the
# daemon keeps retrying, /ping stays 503, and the queues and their messages
# are still there.
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
wait_until "grep -q \"inequivalent arg 'x-max-priority'\" '$DAEMON_LOG'" 10
daemon_alive || fail "the daemon exited"
assert_eq 503 "$(http_code /ping)" "/ping while the queue cannot be declared"
assert_eq 0 "$(metric taskmill_broker_up)" "taskmill_broker_up"
rc=0
stop_daemon || rc=$?
note "daemon exit status $rc"
assert_eq 1 "$(ready_count "$Q")" "messages still in $Q"
assert_eq 1 "$(ready_count "$P")" "messages still in $P"
