# Fork pool: a task that never returns (and never looks at its deadline)
# is stopped by killing its worker process at the task's `timeout`. The
# attempt is counted `timeout`, dead-lettered (on_error reject) with the
# limit in its error, the child is replaced (restarts >= 1) and gone, and
# the pool still runs other messages.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
LIMIT_MS=1000
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  fail: { plugin: fail.so, queue: q.fail, timeout: 1s, on_error: reject }
  noop: { plugin: noop.so, queue: q.noop }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
mapfile -t before < <(daemon_children)
note "children before: ${before[*]}"

t0=$(now_ms)
hang_id=$(rcall XADD q.fail '*' body '{"mode":"hang"}')
# It is stopped at the limit, not before.
wait_metric taskmill_tasks_total 'task="fail",outcome="timeout"' 1 10
t1=$(now_ms)
note "hang message $hang_id: timeout counted $((t1 - t0)) ms after publishing"
assert_ge "$LIMIT_MS" "$((t1 - t0))" "ms from publishing to the timeout (limit ${LIMIT_MS} ms)"
assert_le 6000 "$((t1 - t0))" "ms from publishing to the timeout (limit ${LIMIT_MS} ms)"

wait_until '[[ $(xlen q.fail.dlq) == 1 ]]' 10
wait_until '[[ $(xpending q.fail) == 0 ]]' 10
for outcome in success error rejected crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"fail\",outcome=\"$outcome\"")" \
		"fail outcome $outcome"
done
assert_eq 1 "$(metric taskmill_tasks_total 'task="fail",outcome="timeout"')" "fail outcome timeout"
assert_eq 1 "$(metric taskmill_dead_letter_total 'task="fail"')" "taskmill_dead_letter_total fail"
assert_eq 0 "$(metric taskmill_retries_total 'task="fail"')" "taskmill_retries_total fail (on_error reject)"

dlq_id=$(xids q.fail.dlq)
assert_eq "$hang_id" "$(xfield q.fail.dlq "$dlq_id" origin_id)" "DLQ origin_id"
assert_eq 1 "$(xfield q.fail.dlq "$dlq_id" attempts)" "DLQ attempts"
assert_eq '{"mode":"hang"}' "$(xfield q.fail.dlq "$dlq_id" body)" "DLQ body"
error=$(xfield q.fail.dlq "$dlq_id" error)
note "DLQ error: $error"
[[ $error == *"$LIMIT_MS ms"* ]] || fail "DLQ error does not mention the ${LIMIT_MS} ms limit: '$error'"
assert_match '^timeout: ' "$error" "DLQ error starts with its outcome"

# The hung worker was killed and replaced: the daemon has POOL children
# again, exactly one of the old ones is gone (dead, not a zombie), and one
# new one took its place.
wait_metric_ge taskmill_worker_restarts_total '' 1 10
wait_children "$POOL" 10
mapfile -t after < <(daemon_children)
note "children after: ${after[*]}"
gone=$(comm -23 <(printf '%s\n' "${before[@]}") <(printf '%s\n' "${after[@]}"))
new=$(comm -13 <(printf '%s\n' "${before[@]}") <(printf '%s\n' "${after[@]}"))
assert_eq 1 "$(grep -c . <<<"$gone" || true)" "old children no longer the daemon's ($gone)"
assert_eq 1 "$(grep -c . <<<"$new" || true)" "new children ($new)"
wait_tags_gone 1000 "$gone"
note "hung child $gone gone; replacement $new"

# A run killed at its limit is over: not stuck.
metrics_body=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics")
grep -qxF 'taskmill_runs_stuck{task="fail"} 0' <<<"$metrics_body" ||
	fail "no sample taskmill_runs_stuck{task=\"fail\"} 0 in /metrics"
grep -qxF 'taskmill_runs_stuck{task="noop"} 0' <<<"$metrics_body" ||
	fail "no sample taskmill_runs_stuck{task=\"noop\"} 0 in /metrics"
stuck=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -c .pool.stuck)
assert_eq '[]' "$stuck" "/status pool.stuck"

# The pool is still usable.
for i in 1 2 3 4; do
	rcall XADD q.noop '*' body "{\"n\":$i}" >/dev/null
done
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 4 10
wait_until '[[ $(xpending q.noop) == 0 ]]' 10
assert_eq "4 0 0" "$(stream_state q.noop)" "acked/pending/undelivered of q.noop"
assert_eq 200 "$(http_code /ping)" "/ping"
restarts=$(metric taskmill_worker_restarts_total)
assert_eq 1 "$restarts" "taskmill_worker_restarts_total (one hung worker replaced)"
assert_eq "${after[*]}" "$(daemon_children | paste -sd ' ')" "children after running noop messages"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
