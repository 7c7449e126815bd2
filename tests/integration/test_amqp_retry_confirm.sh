# RabbitMQ: a retry or dead-letter copy the broker refuses is never lost
# and never makes its message run again. A policy on the retry queues of
# one task and on the dead-letter queue of another (max-length 0,
# overflow reject-publish) makes RabbitMQ refuse every copy with a
# basic.nack: had the original been acknowledged anyway, the message would
# be gone. N messages per task fail their first run (flaky.so). While the
# policy holds, each has run exactly once (the original stays
# unacknowledged, its copy held and sent again later, not requeued into a
# busy loop of runs), and the refusals are logged. Once the policy is
# cleared, every retry runs (attempt 2) and every dead letter is in the
# dead-letter queue: none lost, none run twice. Then the retry queue is
# deleted under the daemon, then the dead-letter queue: the copies that
# come back unroutable are held too, and go out once the queue is
# declared again.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
JR=$TEST_DIR/retry.journal
JD=$TEST_DIR/dead.journal
QR=$AQ.r
QD=$AQ.d
N=20
FLAKY=$TM_BUILD/test-plugins/flaky.so
[[ -f $FLAKY ]] || fail "$FLAKY not built (make test-plugins)"
write_amqp_config "$CONF" <<YAML
tasks:
  retry: { plugin: $FLAKY, queue: $QR, max_retries: 2, backoff: 200ms, max_backoff: 200ms, prefetch: 64, config: { path: $JR } }
  dead: { plugin: $FLAKY, queue: $QD, max_retries: 0, prefetch: 64, config: { path: $JD } }
YAML

# the retry queues of task retry and the dead-letter queue of task dead
# take nothing (regex metacharacters of AQ escaped)
re=$(sed 's/[].[^$*+?(){}|\\]/\\&/g' <<<"$AQ")
POLICY="refuse-${AQ//./-}"
rabbitctl set_policy --apply-to queues --priority 100 "$POLICY" \
	"^$re\\.(r\\.retry\\..*|d\\.dlq)\$" \
	'{"max-length":0,"overflow":"reject-publish"}' >/dev/null ||
	fail "rabbitmqctl set_policy failed"
policy_set=1
clear_policy() {
	[[ -n ${policy_set:-} ]] || return 0
	rabbitctl clear_policy "$POLICY" >/dev/null || true
	policy_set=
}
tm_on_exit clear_policy

start_daemon "$CONF"
wait_ping
amqptool publish "$QR" "$N" '{"n":%d}' >"$TEST_DIR/ids.retry"
amqptool publish "$QD" "$N" '{"n":%d}' >"$TEST_DIR/ids.dead"
sort "$TEST_DIR/ids.retry" >"$TEST_DIR/ids.retry.sorted"
sort "$TEST_DIR/ids.dead" >"$TEST_DIR/ids.dead.sorted"

# every message ran once; then a few resend rounds while the policy holds
wait_until "[[ \$(journal_unique $JR) == $N && \$(journal_unique $JD) == $N ]]" 30
sleep 4
runs_r=$(wc -l <"$JR")
runs_d=$(wc -l <"$JD")
note "while refused: $runs_r runs of $N retried messages, $runs_d runs of $N dead-lettered ones"
assert_eq "$N" "$runs_r" "runs of the retried messages while their copies are refused"
assert_eq "$N" "$runs_d" "runs of the dead-lettered messages while their copies are refused"
assert_eq 0 "$(ready_count "$QD.dlq")" "dead letters while the dead-letter queue refuses"
assert_eq 0 "$(ready_count "$QR.retry.200ms")" "retries waiting while the retry queue refuses"
assert_eq 200 "$(http_code /ping)" "/ping while copies are refused"

clear_policy
# every retried message runs again and succeeds, every dead letter arrives
wait_until "(( \$(grep -c ' 2\$' $JR) >= $N ))" 60
wait_until "[[ \$(ready_count $QD.dlq) == $N ]]" 60
# each refused copy was logged, once at error level
assert_eq "$N" "$(grep -c 'error .*RabbitMQ refused the retry copy' "$DAEMON_LOG")" "refused retry copies logged as errors"
assert_eq "$N" "$(grep -c 'error .*RabbitMQ refused the dead-letter copy' "$DAEMON_LOG")" "refused dead-letter copies logged as errors"
assert_ge "$N" "$(grep -c 'copy for .* was confirmed after [0-9]* refusal' "$DAEMON_LOG")" "copies confirmed after refusals, logged"
grep ' 2$' "$JR" | cut -d' ' -f1 | sort >"$TEST_DIR/retried"
diff -q "$TEST_DIR/ids.retry.sorted" "$TEST_DIR/retried" >/dev/null ||
	fail "retried ids differ from the published ids"
assert_eq "$((2 * N))" "$(wc -l <"$JR")" "runs of the retried messages (one failure, one success each)"
assert_eq "$N" "$(wc -l <"$JD")" "runs of the dead-lettered messages"
assert_eq "$N" "$(dlq_lines "$CONF" dead)" "dlq list lines"
tm dlq -c "$CONF" list dead
cut -f2 "$TM_OUT" | sort >"$TEST_DIR/dead.origins"
diff -q "$TEST_DIR/ids.dead.sorted" "$TEST_DIR/dead.origins" >/dev/null ||
	fail "dead-letter origins differ from the published ids"
wait_metric taskmill_tasks_total 'task="retry",outcome="success"' "$N" 30

# the retry queue deleted under the daemon: its next copies come back
# unroutable (basic.return); they are held, the queue is declared again,
# and they go out: each new message runs once, then its retry once
rabbitctl delete_queue "$QR.retry.200ms" >/dev/null || fail "rabbitmqctl delete_queue failed"
amqptool publish "$QR" "$N" '{"m":%d}' >"$TEST_DIR/ids.gone"
wait_until "(( \$(grep -c ' 2\$' $JR) >= $((2 * N)) ))" 60
grep -Ff "$TEST_DIR/ids.gone" "$JR" | grep ' 2$' | cut -d' ' -f1 | sort >"$TEST_DIR/retried.gone"
sort "$TEST_DIR/ids.gone" | diff -q - "$TEST_DIR/retried.gone" >/dev/null ||
	fail "ids retried after the retry queue was deleted differ from the published ids"
assert_eq "$((4 * N))" "$(wc -l <"$JR")" "runs of the retried messages after the retry queue was deleted"
assert_ge 1 "$(grep -c 'could not route the retry copy' "$DAEMON_LOG")" "unroutable retry copies logged"
wait_metric taskmill_tasks_total 'task="retry",outcome="success"' "$((2 * N))" 30

# the dead-letter queue deleted under the daemon (with the dead letters
# above): the dead-letter copies come back unroutable, are held, the
# task's topology is declared again, and they arrive
rabbitctl delete_queue "$QD.dlq" >/dev/null || fail "rabbitmqctl delete_queue failed"
amqptool publish "$QD" "$N" '{"m":%d}' >"$TEST_DIR/ids.dlq.gone"
wait_until "[[ \$(ready_count $QD.dlq) == $N ]]" 60
assert_eq "$((2 * N))" "$(wc -l <"$JD")" "runs of the dead-lettered messages after the dead-letter queue was deleted"
tm dlq -c "$CONF" list dead
cut -f2 "$TM_OUT" | sort >"$TEST_DIR/dead.origins.gone"
sort "$TEST_DIR/ids.dlq.gone" | diff -q - "$TEST_DIR/dead.origins.gone" >/dev/null ||
	fail "dead-letter origins after the deletion differ from the published ids"
assert_ge 1 "$(grep -c "dead-letter queue '$QD.dlq' was gone: declared again" "$DAEMON_LOG")" "dead-letter queue declared again, logged"

assert_eq 0 "$(ready_count "$QR")" "ready in $QR"
assert_eq 0 "$(ready_count "$QD")" "ready in $QD"
assert_eq 0 "$(ready_count "$QR.retry.200ms")" "left in the retry queue"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$QR")" "ready in $QR after the stop"
assert_eq 0 "$(ready_count "$QD")" "ready in $QD after the stop"
