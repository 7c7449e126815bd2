# Thread pool: a run that returns late (wedge.so sleeps 5 s, not looking
# at should_stop(), under a 1 s timeout) is settled once, as `timeout`, at
# its deadline, and never again when its code returns: exactly one dead
# letter (on_error reject), exactly one retry (on_error requeue), no
# success or error counted. Once the code returned, its thread leaves
# (taskmill_runs_stuck back to 0, nothing busy), and the replacement
# workers keep the pool's size.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq

LIMIT_MS=1000
SLEEP_MS=5000
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 shutdown_timeout=5s <<YAML
tasks:
  dl:
    plugin: $TM_BUILD/test-plugins/wedge.so
    queue: q.dl
    timeout: 1s
    on_error: reject
  rt:
    plugin: $TM_BUILD/test-plugins/wedge.so
    queue: q.rt
    timeout: 1s
    on_error: requeue
    max_retries: 1
    backoff: 1m
YAML
start_daemon "$CONF"
wait_ping

t0=$(now_ms)
id_dl=$(rcall XADD q.dl '*' body "{\"ms\":$SLEEP_MS}")
id_rt=$(rcall XADD q.rt '*' body "{\"ms\":$SLEEP_MS}")
wait_metric taskmill_tasks_total 'outcome="timeout"' 2 15
t1=$(now_ms)
note "both settled as timeout $((t1 - t0)) ms after publishing"
assert_ge "$LIMIT_MS" "$((t1 - t0))" "ms to the timeouts (limit $LIMIT_MS ms)"
# at the deadline (+ 2 s of slack), while the runs still sleep
assert_le $((LIMIT_MS + 2000)) "$((t1 - t0))" "ms to the timeouts (limit $LIMIT_MS ms, runs of $SLEEP_MS ms)"
wait_metric taskmill_runs_stuck '' 2 10

# the code returns after 5 s: its thread leaves, nothing is settled again
wait_metric taskmill_runs_stuck '' 0 15
wait_metric taskmill_pool_busy '' 0 10
note "stuck runs returned $(($(now_ms) - t0)) ms after publishing"
# let a second settlement, if there were one, reach the broker
sleep 1
assert_eq 1 "$(xlen q.dl.dlq)" "dead letters of q.dl"
dlq_id=$(xids q.dl.dlq)
assert_eq "$id_dl" "$(xfield q.dl.dlq "$dlq_id" origin_id)" "dead letter origin_id"
assert_eq "timeout: ran past the limit of $LIMIT_MS ms; still running" \
	"$(xfield q.dl.dlq "$dlq_id" error)" "dead letter error"
assert_eq 0 "$(xlen q.rt.dlq)" "dead letters of q.rt (retried, backoff 1m)"
assert_eq 1 "$(metric taskmill_retries_total 'task="rt"')" "taskmill_retries_total rt"
assert_eq 0 "$(metric taskmill_retries_total 'task="dl"')" "taskmill_retries_total dl"
for t in dl rt; do
	assert_eq 1 "$(metric taskmill_tasks_total "task=\"$t\",outcome=\"timeout\"")" "$t timeouts"
	for outcome in success error rejected crashed invalid; do
		assert_eq 0 "$(metric taskmill_tasks_total "task=\"$t\",outcome=\"$outcome\"")" \
			"$t outcome $outcome"
	done
	assert_eq 0 "$(metric taskmill_tasks_inflight "task=\"$t\"")" "$t in flight"
done
assert_eq 0 "$(xpending q.dl)" "pending of q.dl"
# a Redis retry keeps the entry pending, scheduled once in the retry set
assert_eq 1 "$(xpending q.rt)" "pending of q.rt (waiting for its retry)"
assert_eq 1 "$(rcall ZCARD q.rt.retry.taskmill)" "retries scheduled for q.rt"
req /status
assert_eq 0 "$(jqr '.pool.stuck | length')" "/status pool.stuck once the runs returned"
assert_eq 2 "$(metric taskmill_worker_restarts_total)" "taskmill_worker_restarts_total"

# the pool has its two workers: two runs at once still succeed
rcall XADD q.dl '*' body '{"ms":200}' >/dev/null
rcall XADD q.dl '*' body '{"ms":200}' >/dev/null
wait_metric taskmill_tasks_total 'task="dl",outcome="success"' 2 10
assert_eq 1 "$(xlen q.dl.dlq)" "dead letters of q.dl at the end"

rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "exit status (no run left in task code)"
