# Pause and resume with broker.amqp.queue_type: quorum: the control queue
# "<queue>.paused" is a quorum queue too (replicated like the task queue),
# holding one message while paused; a daemon stops and starts consuming.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" amqp='{queue_type: quorum}' <<YAML
tasks:
  work: { plugin: noop.so, queue: $AQ.work }
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 90
tm pause -c "$CONF" work
assert_eq 0 "$TM_RC" "taskmill pause: $(cat "$TM_ERR")"
assert_eq 1 "$(ready_count "$AQ.work.paused")" "one message in the control queue"
# the whole listing first: grep -q would stop reading early, and under
# pipefail the listing's SIGPIPE would fail the check
queues=$(rabbitctl list_queues name type)
grep -q "^$AQ.work.paused[[:space:]]*quorum" <<<"$queues" ||
	fail "the control queue is not a quorum queue: $(grep "$AQ" <<<"$queues")"
wait_metric taskmill_task_paused 'task="work"' 1 30
amqptool publish "$AQ.work" 5 '{"n":%d}' >/dev/null
sleep 2
assert_eq 0 "$(metric taskmill_tasks_total 'task="work",outcome="success"')" "runs while paused"
assert_eq 5 "$(ready_count "$AQ.work")" "messages ready while paused"
# a second pause keeps one message (x-max-length 1, drop-head)
tm pause -c "$CONF" work
assert_eq 1 "$(ready_count "$AQ.work.paused")" "one message after a second pause"
tm resume -c "$CONF" work
assert_eq 0 "$TM_RC" "taskmill resume: $(cat "$TM_ERR")"
assert_eq 0 "$(ready_count "$AQ.work.paused")" "the control queue is empty"
wait_metric taskmill_tasks_total 'task="work",outcome="success"' 5 30
assert_eq 0 "$(metric taskmill_task_paused 'task="work"')" "gauge after the resume"
stop_daemon
true
