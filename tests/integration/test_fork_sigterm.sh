# Fork pool and SIGTERM: with every worker process busy, SIGTERM lets the
# running tasks finish and acks them, leaves the rest for redelivery, exits
# 0, and leaves no process behind: every child the daemon ever had is gone
# when it exits. A restarted daemon (same instance) runs exactly the rest.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=3
N=6
MS=3000
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL shutdown_timeout=10s \
	instance=it-fork-sigterm <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, prefetch: $N, claim_idle: 4s }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
mapfile -t kids < <(daemon_children)
note "children: ${kids[*]}"

t0=$(now_ms)
xadd_bulk q.sleep "$N" "{\"ms\":$MS,\"n\":%d}"
# Every worker busy, well before the first batch can finish: then signal.
if ! wait_busy "$POOL" $((MS * 2 / 3)); then
	fail "taskmill_pool_busy never showed $POOL within $((MS * 2 / 3)) ms" \
		"(last $(metric taskmill_pool_busy || true))"
fi
note "pool full $(($(now_ms) - t0)) ms after publishing"
# The children that run the tasks are still the ones from the start.
mapfile -t running < <(daemon_children)
assert_eq "${kids[*]}" "${running[*]}" "children while busy"

t_sig=$(now_ms)
rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
# It waited for the running sleeps (they end MS after they started, which
# was after publishing), within shutdown_timeout.
assert_ge $((MS - (t_sig - t0) - 200)) "$DAEMON_STOP_MS" "ms from SIGTERM to exit"
assert_le 10000 "$DAEMON_STOP_MS" "ms from SIGTERM to exit (shutdown_timeout 10s)"

# No child outlives the daemon: each was reaped before it exited.
wait_tags_gone 0 "${kids[@]}"

read -r acked pending undelivered <<<"$(stream_state q.sleep)"
note "after stop: acked=$acked pending=$pending undelivered=$undelivered"
assert_eq "$POOL" "$acked" "entries acked (the $POOL that were running)"
assert_eq "$((N - POOL))" "$((pending + undelivered))" "entries left for redelivery"
assert_eq 0 "$(xlen q.sleep.dlq)" "XLEN q.sleep.dlq"

# The rest runs once after a restart, and that daemon's children go too.
start_daemon "$CONF"
wait_ping
wait_children "$POOL"
mapfile -t kids2 < <(daemon_children)
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' "$((N - POOL))" 30
wait_until '[[ $(xpending q.sleep) == 0 ]]' 10
assert_eq "$N 0 0" "$(stream_state q.sleep)" "acked/pending/undelivered after restart"
rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "second daemon exit status"
wait_tags_gone 0 "${kids2[@]}"
assert_eq 0 "$(xlen q.sleep.dlq)" "XLEN q.sleep.dlq"
