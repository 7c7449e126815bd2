# SIGTERM while the pool is full: the running tasks finish and are acked,
# the daemon exits 0 within shutdown_timeout, nothing is dead-lettered, and
# every message not run is left for redelivery: a restarted daemon with the
# same instance name runs exactly those (claim_idle 3s: longer than a task
# runs, so nothing running is reclaimed, short enough for the restart).
N=8
POOL=4
MS=1500
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_size=$POOL shutdown_timeout=10s instance=it-sigterm <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, prefetch: $N, claim_idle: 3s }
YAML
xadd_bulk q.sleep "$N" "{\"ms\":$MS,\"n\":%d}"

start_daemon "$CONF"
wait_ping

# Wait until the pool is full (every worker busy: taskmill_pool_busy; the
# task's in-flight gauge also counts prefetched deliveries), but no longer
# than half the first batch takes: then signal.
full=0
deadline=$(($(now_ms) + MS / 2))
while (($(now_ms) < deadline)); do
	if [[ $(metric taskmill_pool_busy || true) == "$POOL" ]]; then
		full=1
		break
	fi
	sleep 0.05
done
inflight=$(metric taskmill_tasks_inflight 'task="sleep"' || true)
if ((full)); then
	note "pool full ($POOL busy, $inflight in flight), sending SIGTERM"
else
	note "taskmill_pool_busy never showed $POOL ($inflight in flight); sending SIGTERM anyway"
fi

rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_le 10000 "$DAEMON_STOP_MS" "ms from SIGTERM to exit (shutdown_timeout 10s)"

read -r acked pending undelivered <<<"$(stream_state q.sleep)"
note "after stop: acked=$acked pending=$pending undelivered=$undelivered"
assert_eq 0 "$(xlen q.sleep.dlq)" "XLEN q.sleep.dlq"
assert_eq "$N" "$((acked + pending + undelivered))" "acked + pending + undelivered"
if ((full)); then
	assert_eq "$POOL" "$acked" "entries acked (the $POOL that were running)"
	# At least the first batch must have waited for the running sleeps.
	assert_ge "$((MS / 2))" "$DAEMON_STOP_MS" "ms from SIGTERM to exit while $POOL tasks sleep ${MS} ms"
else
	assert_ge 1 "$acked" "entries acked"
	assert_le "$POOL" "$acked" "entries acked (no more than the pool)"
fi
assert_eq "$pending" "$(xpending q.sleep)" "XPENDING q.sleep"

# Redelivery: the same instance picks up what it left pending, and the
# entries never delivered; each runs once.
left=$((N - acked))
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' "$left" 30
wait_until '[[ $(xpending q.sleep) == 0 ]]' 10
assert_eq "$N 0 0" "$(stream_state q.sleep)" "acked/pending/undelivered after restart"
rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "second daemon exit status"
assert_eq 0 "$(xlen q.sleep.dlq)" "XLEN q.sleep.dlq"
