# Fork pool and kill -9 of the daemon: its worker processes, busy with
# tasks, die with it (PR_SET_PDEATHSIG) within a second instead of running
# on as orphans; the messages they held stay pending and a restarted daemon
# (same instance) runs them.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=3
MS=2500
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL instance=it-fork-kill9 <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, prefetch: $POOL, claim_idle: 30s }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
t0=$(now_ms)
xadd_bulk q.sleep "$POOL" "{\"ms\":$MS,\"n\":%d}"
if ! wait_busy "$POOL" $((MS * 2 / 3)); then
	fail "taskmill_pool_busy never showed $POOL within $((MS * 2 / 3)) ms" \
		"(last $(metric taskmill_pool_busy || true))"
fi
mapfile -t kids < <(daemon_children)
assert_eq "$POOL" "${#kids[@]}" "children while busy"
note "pool busy after $(($(now_ms) - t0)) ms; children: ${kids[*]}"

pid=$DAEMON_PID
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
DAEMON_PID=
wait_tags_gone 1500 "${kids[@]}"
note "all ${#kids[@]} children gone ${TAGS_GONE_MS} ms after the daemon's SIGKILL"
assert_le 1000 "$TAGS_GONE_MS" "ms until every child was gone after kill -9 of the daemon"
assert_eq 0 "$(child_count "$pid")" "children still listed under the dead daemon's pid"

# Nothing was acked or lost: the entries are pending on the dead consumer,
# and the same instance, restarted, runs them.
assert_eq "0 $POOL 0" "$(stream_state q.sleep)" "acked/pending/undelivered after kill -9"
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' "$POOL" 30
wait_until '[[ $(xpending q.sleep) == 0 ]]' 10
assert_eq "$POOL 0 0" "$(stream_state q.sleep)" "acked/pending/undelivered after restart"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
