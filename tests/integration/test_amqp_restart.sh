# RabbitMQ goes away mid-run (rabbitmqctl stop_app) and comes back
# (start_app): /ping turns 503 and taskmill_broker_up 0 while it is away,
# the daemon reconnects by itself (counted in
# taskmill_broker_reconnects_total), and every message published before the
# outage is journaled at least once: nothing is lost.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
N=40000
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.journal
write_amqp_config "$CONF" pool_size=1 <<YAML
tasks:
  journal: { plugin: journal.so, queue: $Q, prefetch: 1, config: { path: $JOURNAL } }
YAML
emit_amqp "$CONF" journal '{"n":0}' >"$TEST_DIR/ids"
amqptool publish "$Q" "$N" '{"n":%d}' >>"$TEST_DIR/ids"

start_daemon "$CONF"
wait_until "[[ -f $JOURNAL && \$(wc -l <$JOURNAL) -ge 300 ]]" 30
rabbitctl stop_app >/dev/null
at_stop=$(wc -l <"$JOURNAL")
note "RabbitMQ stopped with $at_stop of $((N + 1)) messages journaled"
assert_le "$N" "$at_stop" "messages journaled when RabbitMQ stopped (the outage must come mid-run)"
wait_until '[[ $(http_code /ping) == 503 ]]' 20
assert_eq 0 "$(metric taskmill_broker_up)" "taskmill_broker_up while RabbitMQ is stopped"
daemon_alive || fail "the daemon exited when RabbitMQ stopped"

rabbitctl start_app >/dev/null
wait_ping "$HTTP_PORT" 60
assert_eq 1 "$(metric taskmill_broker_up)" "taskmill_broker_up after the restart"
assert_ge 1 "$(metric taskmill_broker_reconnects_total)" "taskmill_broker_reconnects_total"
wait_until "[[ \$(journal_unique $JOURNAL) == $((N + 1)) ]]" 60
wait_until "[[ \$(ready_count $Q) == 0 ]]" 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ids.journal"
sort -u "$TEST_DIR/ids" >"$TEST_DIR/ids.sorted"
diff -q "$TEST_DIR/ids.sorted" "$TEST_DIR/ids.journal" >/dev/null ||
	fail "journaled ids differ from published ids"
total=$(wc -l <"$JOURNAL")
note "$total runs for $((N + 1)) messages: $((total - N - 1)) delivered again after the outage"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
assert_eq 0 "$(ready_count "$Q.dlq")" "dead letters"
