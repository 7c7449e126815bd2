# RabbitMQ request/reply. `taskmill emit --wait` publishes a request with a
# reply queue and a correlation id and prints the task's JSON result; a raw
# AMQP RPC client using direct reply-to gets the same answer. A task failure
# answers an error object (exit 1), and no answer in time is exit 1 with a
# clear message.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.add
write_amqp_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: $Q }
YAML

# no daemon yet: nobody answers
tm emit -c "$CONF" add '{"a":1,"b":1}' --wait 1
assert_eq 1 "$TM_RC" "emit --wait exit status without a daemon"
grep -q "no reply from task 'add' within 1 s" "$TM_ERR" ||
	fail "emit --wait timeout message: $(cat "$TM_ERR")"
tm emit -c "$CONF" add '{"a":1,"b":1}' --wait 0
assert_eq 2 "$TM_RC" "emit --wait 0 exit status"

start_daemon "$CONF"
wait_ping
tm emit -c "$CONF" add '{"a":2,"b":3}' --wait 10
assert_eq 0 "$TM_RC" "emit --wait exit status: $(cat "$TM_ERR")"
assert_eq '{"sum":5}' "$(cat "$TM_OUT")" "emit --wait output"

raw=$(amqptool rpc "$Q" '{"a":2,"b":3}' 10)
assert_eq '{"sum":5}' "$raw" "raw AMQP RPC client (direct reply-to) answer"

tm emit -c "$CONF" add '{"a":2}' --wait 10
assert_eq 1 "$TM_RC" "emit --wait exit status of a rejected request"
out=$(cat "$TM_OUT")
assert_eq rejected "$(jq -r .outcome <<<"$out")" "outcome in the error answer"
assert_eq 1 "$(jq -r .attempts <<<"$out")" "attempts in the error answer"
[[ $(jq -r .error <<<"$out") == *b* ]] || fail "error answer does not say what is wrong: $out"
grep -q "task 'add' failed" "$TM_ERR" || fail "emit --wait: no failure line: $(cat "$TM_ERR")"

# the request that timed out still ran once the daemon started
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 3 10
assert_eq 1 "$(metric taskmill_tasks_total 'task="add",outcome="rejected"')" "rejected outcomes"
assert_eq 1 "$(dlq_lines "$CONF" add)" "dead letters"
assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
