# broker.url as a list of nodes, the first ones down at start. Three
# closed loopback ports come first, the run's RabbitMQ last. The daemon
# starts on a random node of the list (so that daemons spread) and moves to
# the next one each time a connection cannot be made: every start ends on
# the live node, /ping 200, with /status and taskmill_broker_node_up naming
# it. Six starts: each lands on a dead node first with probability 3/4, so
# at least one of them moves on (all six starting on the live node has a
# chance of 1 in 4096). `taskmill emit` tries the nodes in turn too.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

DEAD=()
for i in 1 2 3; do
	DEAD+=("$(free_port)")
done
LIVE="amqp://127.0.0.1:$RABBIT_PORT/%2F"
Q=$AQ.add
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" pool_size=2 \
	url="[amqp://127.0.0.1:${DEAD[0]}/, amqp://127.0.0.1:${DEAD[1]}/, amqp://127.0.0.1:${DEAD[2]}/, amqp://127.0.0.1:$RABBIT_PORT/]" <<YAML
tasks:
  add: { plugin: add.so, queue: $Q }
YAML

for i in 1 2 3; do
	emit_amqp "$CONF" add "{\"a\":$i,\"b\":1}" >/dev/null
done

moved=0
for run in 1 2 3 4 5 6; do
	start_daemon "$CONF"
	wait_ping "$HTTP_PORT" 30
	node=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .broker.node)
	assert_eq "$LIVE" "$node" "/status broker.node, start $run"
	assert_eq 1 "$(metric taskmill_broker_node_up "node=\"$LIVE\"")" "node_up of the live node, start $run"
	for p in "${DEAD[@]}"; do
		assert_eq 0 "$(metric taskmill_broker_node_up "node=\"amqp://127.0.0.1:$p/%2F\"")" \
			"node_up of the dead node $p, start $run"
	done
	if grep -q "moving to node" "$DAEMON_LOG"; then
		moved=$((moved + 1))
	fi
	emit_amqp "$CONF" add "{\"a\":$run,\"b\":0}" >/dev/null
	wait_until "[[ \$(ready_count $Q) == 0 ]]" 20
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status after SIGTERM, start $run"
done
note "$moved of 6 starts began on a dead node and moved on"
assert_ge 1 "$moved" "starts that moved on from a dead node"
assert_eq 0 "$(ready_count "$Q.dlq")" "dead letters"
