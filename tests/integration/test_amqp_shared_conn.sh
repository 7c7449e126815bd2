# Many RabbitMQ tasks share a few consuming connections, a channel each
# (src/amqp/link.c): 300 tasks and one slow one hold at most 8
# connections to the node (one each before, 303 in all), every one of
# them consumes, and a task whose queue is deleted under it (RabbitMQ
# cancels its consumer) comes back on its own channel while the rest of
# its connection goes on: the slow task's run in flight on that
# connection is acknowledged once, not delivered again, and the node
# holds the same connections as before.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

NT=300
CONF=$TEST_DIR/shared.yaml
write_amqp_config "$CONF" pool_size=4 <<YAML
tasks:
  slow: { plugin: sleep.so, queue: $AQ.slow }
$(for ((i = 0; i < NT; i++)); do
	echo "  t$i: { plugin: journal.so, queue: $AQ.t$i, config: { path: \"$TEST_DIR/journal.$i\" } }"
done)
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 120

conns() {
	rabbitctl list_connections --no-table-headers name | sort
}
# the monitoring connection opens at the first scrape: it counts too
metric taskmill_tasks_inflight 'task="slow"' >/dev/null
before=$(conns)
n=$(grep -c . <<<"$before")
note "the node holds $n connection(s) for $((NT + 1)) tasks"
assert_le 8 "$n" "connections for $((NT + 1)) tasks"
assert_eq 2 "$(grep -c ", channel 2 (" "$DAEMON_LOG")" \
	"one task on channel 2 of each of the two connections"

# every task of both connections consumes
for i in 0 149 150 299; do
	amqptool publish "$AQ.t$i" 3 '{"n":%d}' >/dev/null
done
for i in 0 149 150 299; do
	wait_until "[[ \$(journal_unique $TEST_DIR/journal.$i) == 3 ]]" 30
done

# a run in flight on a connection while another task of it loses its
# queue: the slow task is on the first connection, with t0 .. t149
amqptool publish "$AQ.slow" 1 '{"ms":6000,"n":%d}' >/dev/null
wait_metric taskmill_tasks_inflight 'task="slow"' 1 30
rabbitctl delete_queue "$AQ.t5" >/dev/null
wait_until "grep -q \"RabbitMQ cancelled the consumer of '$AQ.t5'\" \"$DAEMON_LOG\"" 30
wait_until "[[ \$(grep -c \"consuming queue '$AQ.t5' on\" \"$DAEMON_LOG\") == 2 ]]" 30
amqptool publish "$AQ.t5" 2 '{"n":%d}' >/dev/null
wait_until "[[ \$(journal_unique $TEST_DIR/journal.5) == 2 ]]" 30
# and a neighbour on the same connection never stopped
amqptool publish "$AQ.t6" 2 '{"n":%d}' >/dev/null
wait_until "[[ \$(journal_unique $TEST_DIR/journal.6) == 2 ]]" 30

wait_metric taskmill_tasks_total 'task="slow",outcome="success"' 1 30
sleep 2
assert_eq 1 "$(metric taskmill_tasks_total 'task="slow",outcome="success"')" \
	"the slow run, acknowledged once on its channel"
assert_eq 0 "$(ready_count "$AQ.slow")" "nothing of the slow task back in its queue"
assert_eq "$before" "$(conns)" "the same connections as before the deletion"
if grep -q "reconnecting (RabbitMQ" "$DAEMON_LOG"; then
	fail "a connection was dropped: $(grep "reconnecting (RabbitMQ" "$DAEMON_LOG" | head -3)"
fi
stop_daemon
