# The fail task with on_error: reject dead-letters both "error" and
# "reject" results at once, with the original body and the failure fields;
# the original entries are acknowledged and the outcomes counted.
N_ERROR=3
N_REJECT=2
N=$((N_ERROR + N_REJECT))
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" <<YAML
tasks:
  fail: { plugin: fail.so, queue: q.fail, on_error: reject }
YAML

t0=$(now_ms)
declare -A BODY_OF=()
for ((i = 1; i <= N_ERROR; i++)); do
	body="{\"mode\":\"error\",\"n\":$i}"
	id=$(rcall XADD q.fail '*' body "$body")
	BODY_OF[$id]=$body
done
for ((i = 1; i <= N_REJECT; i++)); do
	body="{\"mode\":\"reject\",\"n\":$i}"
	id=$(rcall XADD q.fail '*' body "$body")
	BODY_OF[$id]=$body
done

start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' "$N_ERROR" 30
wait_metric taskmill_tasks_total 'task="fail",outcome="rejected"' "$N_REJECT" 30
wait_until "[[ \$(xlen q.fail.dlq) == $N ]]" 10
wait_until '[[ $(xpending q.fail) == 0 ]]' 10
t1=$(now_ms)

assert_eq 0 "$(metric taskmill_tasks_total 'task="fail",outcome="success"')" "success count"
assert_eq "$N" "$(metric taskmill_dead_letter_total 'task="fail"')" "taskmill_dead_letter_total"
assert_eq 0 "$(metric taskmill_retries_total 'task="fail"')" "taskmill_retries_total"

assert_eq 0 "$(xpending q.fail)" "XPENDING q.fail"
assert_eq "$N 0 0" "$(stream_state q.fail)" "acked/pending/undelivered of q.fail"
assert_eq "$N" "$(xlen q.fail.dlq)" "XLEN q.fail.dlq"

declare -A SEEN=()
for dlq_id in $(xids q.fail.dlq); do
	fields=$(xfields q.fail.dlq "$dlq_id" | sort | paste -sd ' ')
	for f in body task error attempts failed_at origin_id; do
		[[ " $fields " == *" $f "* ]] || fail "DLQ entry $dlq_id lacks field $f (has: $fields)"
	done
	origin=$(xfield q.fail.dlq "$dlq_id" origin_id)
	[[ -n ${BODY_OF[$origin]:-} ]] || fail "DLQ entry $dlq_id: origin_id '$origin' is no published id"
	[[ -z ${SEEN[$origin]:-} ]] || fail "origin $origin dead-lettered twice"
	SEEN[$origin]=$dlq_id
	assert_eq "${BODY_OF[$origin]}" "$(xfield q.fail.dlq "$dlq_id" body)" "DLQ $dlq_id body"
	assert_eq fail "$(xfield q.fail.dlq "$dlq_id" task)" "DLQ $dlq_id task"
	error=$(xfield q.fail.dlq "$dlq_id" error)
	assert_ne "" "$error" "DLQ $dlq_id error"
	assert_match '^(error|rejected): ' "$error" "DLQ $dlq_id error starts with its outcome"
	assert_eq 1 "$(xfield q.fail.dlq "$dlq_id" attempts)" "DLQ $dlq_id attempts"
	failed_at=$(xfield q.fail.dlq "$dlq_id" failed_at)
	assert_match '^[0-9]+$' "$failed_at" "DLQ $dlq_id failed_at"
	assert_ge "$((t0 - 1000))" "$failed_at" "DLQ $dlq_id failed_at (epoch ms, after publishing)"
	assert_le "$((t1 + 1000))" "$failed_at" "DLQ $dlq_id failed_at (epoch ms, before now)"
	note "DLQ $dlq_id <- $origin: error '$error'"
done
assert_eq "$N" "${#SEEN[@]}" "distinct origins in the DLQ"

# The daemon is still serving and stops cleanly.
assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
