# taskmill_queue_pending on RabbitMQ: the task's deliveries this daemon
# holds unacknowledged. sleep.so runs 20 messages of 1.5 s with a pool of 2
# and prefetch 5: while they run, 5 are delivered and unsettled (2 running,
# 3 waiting in the daemon), the rest ready in the queue; when all are done,
# 0. Before this the gauge had no RabbitMQ series.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
Q=$AQ.sleep
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" pool_size=2 <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: $Q, prefetch: 5 }
YAML
emit_amqp "$CONF" sleep '{"ms":1500,"n":0}' >/dev/null
amqptool publish "$Q" 19 '{"ms":1500,"n":%d}' >/dev/null
start_daemon "$CONF"
wait_ping
wait_metric taskmill_queue_pending 'task="sleep"' 5 20
wait_metric taskmill_queue_depth 'task="sleep"' 15 20
wait_until "[[ \$(ready_count $Q) == 0 ]]" 60
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' 20 60
wait_metric taskmill_queue_pending 'task="sleep"' 0 20
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
