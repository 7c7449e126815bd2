# Thread pool: a run that never returns and never looks at should_stop()
# (wedge.so {"ms":-1}, a C plugin stuck in its own loop) is settled at its
# deadline as `timeout` (dead-lettered: on_error reject) while its code
# still runs, and its worker is replaced, so the pool keeps its size: with
# three such runs in a pool of two, later messages still all succeed.
# /metrics (taskmill_runs_stuck) and /status (pool.stuck) show the runs
# that never returned, and SIGTERM still stops the daemon within its
# drain bound (exit status 1: task code is still running).
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq

POOL=2
LIMIT_MS=1000
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=$POOL shutdown_timeout=5s <<YAML
tasks:
  w:
    plugin: $TM_BUILD/test-plugins/wedge.so
    queue: q.w
    timeout: 1s
    on_error: reject
    concurrency: $POOL
YAML
start_daemon "$CONF"
wait_ping

# two stuck runs take both workers; the third runs on a replacement
t0=$(now_ms)
hang1=$(rcall XADD q.w '*' body '{"ms":-1}')
hang2=$(rcall XADD q.w '*' body '{"ms":-1}')
wait_metric taskmill_tasks_total 'task="w",outcome="timeout"' 2 15
t1=$(now_ms)
note "two runs settled as timeout $((t1 - t0)) ms after publishing"
assert_ge "$LIMIT_MS" "$((t1 - t0))" "ms from publishing to the timeouts (limit $LIMIT_MS ms)"
# deadline + generous slack: nowhere near the drain bound or forever
assert_le 6000 "$((t1 - t0))" "ms from publishing to the timeouts (limit $LIMIT_MS ms)"
hang3=$(rcall XADD q.w '*' body '{"ms":-1}')
wait_metric taskmill_tasks_total 'task="w",outcome="timeout"' 3 15

wait_until '[[ $(xlen q.w.dlq) == 3 ]]' 10
wait_until '[[ $(xpending q.w) == 0 ]]' 10
for id in $(xids q.w.dlq); do
	error=$(xfield q.w.dlq "$id" error)
	assert_eq "timeout: ran past the limit of $LIMIT_MS ms; still running" \
		"$error" "dead letter error of $(xfield q.w.dlq "$id" origin_id)"
	assert_eq 1 "$(xfield q.w.dlq "$id" attempts)" "dead letter attempts"
done
assert_eq "$(printf '%s\n' "$hang1" "$hang2" "$hang3" | sort)" \
	"$(for id in $(xids q.w.dlq); do xfield q.w.dlq "$id" origin_id; done | sort)" \
	"dead-lettered messages"
assert_eq 3 "$(metric taskmill_dead_letter_total 'task="w"')" "taskmill_dead_letter_total"

# the stuck runs are shown, and the pool was refilled
wait_metric taskmill_runs_stuck 'task="w"' 3 10
wait_metric taskmill_worker_restarts_total '' 3 10
assert_eq "$POOL" "$(metric taskmill_pool_size)" "taskmill_pool_size"
assert_eq 3 "$(metric taskmill_pool_busy)" "taskmill_pool_busy (stuck runs hold their threads)"
req /status
assert_eq 200 "$RESP_CODE" "GET /status"
assert_eq 3 "$(jqr '.pool.stuck | length')" "/status pool.stuck entries"
assert_eq "$(printf '%s\n' "$hang1" "$hang2" "$hang3" | sort)" \
	"$(jqr '.pool.stuck[].id' | sort)" "/status pool.stuck ids"
assert_eq w "$(jqr '[.pool.stuck[].task] | unique | join(",")')" "/status pool.stuck tasks"
past=$(jqr '[.pool.stuck[].past_deadline_ms] | min')
note "least time past its deadline: $past ms"
assert_ge 0 "$past" "pool.stuck past_deadline_ms"

# the pool keeps its size: these need the two replacement workers
for i in 1 2 3 4 5; do
	rcall XADD q.w '*' body '{"ms":100}' >/dev/null
done
wait_metric taskmill_tasks_total 'task="w",outcome="success"' 5 15
wait_until '[[ $(xpending q.w) == 0 ]]' 10
assert_eq "8 0 0" "$(stream_state q.w)" "acked/pending/undelivered of q.w"
assert_eq 3 "$(xlen q.w.dlq)" "XLEN q.w.dlq"
assert_eq 3 "$(metric taskmill_runs_stuck 'task="w"')" "taskmill_runs_stuck after the successes"
grep -q "ran past the limit of $LIMIT_MS ms and is still running: settled as timeout; worker [0-9] replaced" \
	"$DAEMON_LOG" || fail "no log line for the stuck run"

# SIGTERM: the stuck runs are not waited for (settled already); they are
# still in task code, so the exit status says work was left running
rc=0
stop_daemon 15 || rc=$?
assert_le 8000 "$DAEMON_STOP_MS" "ms from SIGTERM to exit (shutdown_timeout 5 s)"
assert_eq 1 "$rc" "exit status with runs still in task code"
grep -q "configuration 1: 3 run(s) settled as timeouts at their deadline are still in task code" \
	"$DAEMON_LOG" || fail "the stop did not say what it left running"
if grep "shutdown_timeout of .* reached" "$DAEMON_LOG" >&2; then
	fail "the stop says runs were abandoned to be delivered again (above)"
fi
