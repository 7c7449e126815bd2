# Fork pool: taskmill_pool_busy and /status pool.busy follow the worker
# processes as the thread pool's do: up soon after tasks start running, back
# to 0 soon after they end (not a poll interval later).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
MS=3000
SOON_MS=700
CONF=$TEST_DIR/taskmill.yaml

fork_sleep_daemon "$CONF" "$POOL"
assert_eq 0 "$(metric taskmill_pool_busy)" "taskmill_pool_busy while idle"
assert_eq "$POOL" "$(metric taskmill_pool_size)" "taskmill_pool_size"

t0=$(now_ms)
xadd_bulk q.sleep "$POOL" "{\"ms\":$MS,\"n\":%d}"
if ! wait_busy "$POOL" $((MS - 500)); then
	fail "taskmill_pool_busy never showed $POOL while $POOL tasks of ${MS} ms ran" \
		"(last $(metric taskmill_pool_busy || true))"
fi
t_up=$(($(now_ms) - t0))
status=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" || true)
note "taskmill_pool_busy reached $POOL ${t_up} ms after publishing; /status: ${status:0:300}"
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' "$POOL" 10
t_done=$(now_ms)
wait_busy 0 3000 || fail "taskmill_pool_busy still $(metric taskmill_pool_busy || true) 3 s after the tasks ended"
t_down=$(($(now_ms) - t_done))
note "taskmill_pool_busy back to 0 ${t_down} ms after the last success was counted"

if [[ -n $status ]]; then
	[[ $status =~ \"pool\":\{[^}]*\"kind\":\"fork\" ]] || fail "/status pool.kind is not fork: ${status:0:300}"
	[[ $status =~ \"pool\":\{[^}]*\"busy\":$POOL ]] ||
		fail "/status pool.busy is not $POOL while $POOL tasks run: ${status:0:300}"
fi
assert_le "$SOON_MS" "$t_up" "ms from publishing until taskmill_pool_busy showed the $POOL running tasks"
assert_le "$SOON_MS" "$t_down" "ms from the tasks' end until taskmill_pool_busy showed 0"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
