# Acks settled out of turn on RabbitMQ go out while an earlier delivery
# still runs: a 15 s run holds the first delivery tag; the 100 fast
# messages after it finish on the other worker, above the ack floor, in
# settlements close together (their acks are held). They may wait for a
# basic.ack with multiple=1 only as long as the ack hold lasts (a few
# ms): within 10 s, and before the slow run ends, the queue holds one
# message unacknowledged, not up to 101. The slow one is acked once it
# is done, and nothing is left unacknowledged.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

Q=$AQ.turn
JOURNAL=$TEST_DIR/runs.txt
CONF=$TEST_DIR/turn.yaml
write_amqp_config "$CONF" pool_size=2 <<YAML
tasks:
  turn:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: $Q
    prefetch: 1000
    timeout: 60s
    config: { path: $JOURNAL }
YAML

# unacked: messages of Q delivered and not acknowledged yet
unacked() {
	rabbitctl list_queues name messages_unacknowledged |
		awk -v q="$Q" '$1 == q {print $2}'
}

# emit declares the topology
emit_amqp "$CONF" turn '{"ms":15000}' >/dev/null
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_inflight 'task="turn"' 1 30
amqptool publish "$Q" 100 '{"n":%d,"ms":0}' >/dev/null
wait_until "[[ -f '$JOURNAL' && \$(wc -l <'$JOURNAL') -ge 100 ]]" 30
wait_until "[[ \$(unacked) == 1 ]]" 10
runs=$(wc -l <"$JOURNAL")
assert_eq 100 "$runs" "the fast runs done, the slow one still running"

# the slow run ends; its ack (now at the floor) goes out too
wait_until "[[ \$(wc -l <'$JOURNAL') -ge 101 ]]" 60
wait_until "[[ \$(unacked) == 0 ]]" 10
assert_eq 0 "$(ready_count "$Q")" "queue empty"
stop_daemon
