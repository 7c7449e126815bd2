# The autoscaling gauges on RabbitMQ equal what KEDA's RabbitMQ scaler
# (QueueLength) reads: taskmill_queue_lag is the queue's ready count, the
# message_count of a passive queue.declare, issued here by amqptool on
# the same queue. With the task paused nothing is consumed, so the count
# holds still. A delayed message is published to the task's queue (with
# x-not-before) and parked in a delay queue by the daemon that receives
# it: while the task is paused nobody does, and it counts as ready, in
# the scaler's figure and in taskmill's alike. RabbitMQ cannot tell the age of the oldest ready message without
# taking it, nor which delayed messages are due: those gauges are absent
# (null in /status and /api/v1/tasks), as docs/kubernetes.md says.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
command -v jq >/dev/null || skip "jq not installed"

CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" pool_size=2 log_level=info <<YAML
tasks:
  sc: { plugin: noop.so, queue: $AQ.sc }
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 30
tm pause -c "$CONF" sc
((TM_RC == 0)) || fail "taskmill pause sc exited $TM_RC: $(cat "$TM_ERR")"
wait_metric taskmill_task_paused 'task="sc"' 1 20

amqptool publish "$AQ.sc" 5 '{"n":%d}' >/dev/null
emit_amqp "$CONF" sc '{"n":99}' --delay 10m >/dev/null
wait_until "[[ \$(ready_count $AQ.sc) == 6 ]]" 10
# the gauges are read every 5 s at most: wait for a read that saw them
wait_metric taskmill_queue_lag "task=\"sc\"" 6 15
count=$(ready_count "$AQ.sc")
note "queue.declare passive message_count: $count"
assert_eq 6 "$count" "message_count of the paused task's queue: 5 and the delayed one"
assert_eq "$count" "$(metric taskmill_queue_lag 'task="sc"')" "taskmill_queue_lag == message_count"
assert_eq "$count" "$(metric taskmill_queue_depth 'task="sc"')" "taskmill_queue_depth == message_count"

body=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics") || fail "no /metrics"
for g in taskmill_queue_oldest_age_seconds taskmill_delayed_due; do
	if grep -q "^$g{" <<<"$body"; then
		fail "$g has a sample on RabbitMQ: $(grep "^$g{" <<<"$body")"
	fi
	grep -q "^# TYPE $g gauge" <<<"$body" || fail "$g is not declared"
done
for url in /status /api/v1/tasks; do
	j=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT$url") || fail "no $url"
	t=$(jq -c '(.tasks | if type == "array" then map(select(.name == "sc"))[0] else .sc end)' <<<"$j")
	assert_eq "$count" "$(jq -r .queue_lag <<<"$t")" "$url queue_lag"
	assert_eq null "$(jq -r .oldest_age_seconds <<<"$t")" "$url oldest_age_seconds"
	assert_eq null "$(jq -r .delayed_due <<<"$t")" "$url delayed_due"
done

# resumed: the 5 run, the delayed one is parked in a delay queue, out of
# both counts
tm resume -c "$CONF" sc
((TM_RC == 0)) || fail "taskmill resume sc exited $TM_RC: $(cat "$TM_ERR")"
wait_metric taskmill_tasks_total 'task="sc",outcome="success"' 5 20
wait_until "[[ \$(ready_count $AQ.sc) == 0 ]]" 10
wait_metric taskmill_queue_lag "task=\"sc\"" 0 15
stop_daemon
true
