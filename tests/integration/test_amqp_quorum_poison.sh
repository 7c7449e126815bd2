# A poison message on a quorum queue with the thread pool: fail.so aborts
# the whole daemon on {"mode":"abort"}. The daemon is started again after
# each crash; RabbitMQ counts the deliveries (x-delivery-count), so after
# max_retries + 1 deliveries that killed a daemon the next one dead-letters
# the message as crashed without running it, and the daemon stays up. A
# message published after it runs. The task, dead-letter and retry queues
# are quorum queues; retry queues expire when unused.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

MAX_RETRIES=2
Q=$AQ.fail
CONF=$TEST_DIR/taskmill.yaml
if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate abort in the daemon: no sanitizer report wanted
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_abort=0
fi
write_amqp_config "$CONF" pool_size=2 amqp='{ queue_type: quorum }' <<YAML
tasks:
  fail:
    plugin: fail.so
    queue: $Q
    on_error: requeue
    max_retries: $MAX_RETRIES
    backoff: 100ms
YAML

poison=$(emit_amqp "$CONF" fail '{"mode":"abort"}')
type=$(rabbitctl list_queues -q name type 2>/dev/null | awk -v q="$Q" '$1 == q {print $2}')
assert_eq quorum "$type" "type of $Q"
type=$(rabbitctl list_queues -q name type 2>/dev/null | awk -v q="$Q.dlq" '$1 == q {print $2}')
assert_eq quorum "$type" "type of $Q.dlq"

crashes=0
for ((i = 1; i <= MAX_RETRIES + 2; i++)); do
	start_daemon "$CONF"
	# either it dies of the message, or it dead-letters it and stays up
	wait_until "! daemon_alive || [[ \$(ready_count $Q.dlq) == 1 ]]" 60
	if daemon_alive; then
		break
	fi
	wait "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
	crashes=$((crashes + 1))
	note "daemon $i died of the poison message"
done
assert_eq "$((MAX_RETRIES + 1))" "$crashes" "daemons killed by the poison message"
daemon_alive || fail "the daemon after the crashes is not running"
wait_ping
assert_eq 1 "$(ready_count "$Q.dlq")" "dead letters"
wait_metric taskmill_tasks_total 'task="fail",outcome="crashed"' 1 10

tm dlq -c "$CONF" list fail
assert_eq 0 "$TM_RC" "dlq list exit status"
IFS=$'\t' read -r dlid origin attempts _ error <"$TM_OUT"
assert_eq "$poison" "$origin" "origin of the dead letter"
assert_eq "$((MAX_RETRIES + 2))" "$attempts" "attempts of the dead letter (the delivery that was not run)"
assert_match "exceeds max_retries $MAX_RETRIES" "$error" "error of the dead letter"
note "dead letter $dlid of $poison"

# the daemon goes on with other work: an error retried through quorum
# retry queues that expire when unused (x-expires), then a reject
emit_amqp "$CONF" fail '{"mode":"error"}' >/dev/null
wait_until "[[ \$(ready_count $Q.dlq) == 2 ]]" 30
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' "$((MAX_RETRIES + 1))" 10
rabbitctl list_queues -q name type arguments >"$TEST_DIR/queues" 2>/dev/null
retry=$(grep -F "$Q.retry." "$TEST_DIR/queues" | head -1)
note "retry queue: $retry"
assert_match 'quorum' "$retry" "type of the retry queue"
assert_match 'x-expires' "$retry" "arguments of the retry queue"
assert_match 'at-least-once' "$retry" "dead-letter strategy of the retry queue"
emit_amqp "$CONF" fail '{"mode":"reject"}' >/dev/null
wait_until "[[ \$(ready_count $Q.dlq) == 3 ]]" 20
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
