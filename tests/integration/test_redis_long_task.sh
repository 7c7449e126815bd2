# A task running far longer than claim_idle (3.5 s against 1 s, no timeout)
# is not stolen by a second daemon of the same group: the daemon running it
# keeps resetting the entry's idle time, so the other daemon's XAUTOCLAIM
# (every 250 ms) never finds it idle. The message runs exactly once.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

MS=3500
CONF_A=$TEST_DIR/a.yaml
CONF_B=$TEST_DIR/b.yaml
TASKS="tasks:
  sleep: { plugin: sleep.so, queue: q.long, claim_idle: 1s, timeout: 0 }"

PORT_A=$(free_port)
write_config "$CONF_A" instance=a http_port="$PORT_A" <<<"$TASKS"
PORT_B=$(free_port)
while [[ $PORT_B == "$PORT_A" ]]; do PORT_B=$(free_port); done
write_config "$CONF_B" instance=b http_port="$PORT_B" <<<"$TASKS"

start_daemon "$CONF_A"
PID_A=$DAEMON_PID
wait_ping "$PORT_A"

# t0 before the publish: the run cannot end before t0 + MS, however late
# this shell gets the CPU back after XADD
t0=$(now_ms)
id=$(rcall XADD q.long '*' body "{\"ms\":$MS}")
note "published $id"
HTTP_PORT=$PORT_A wait_metric taskmill_pool_busy '' 1 10
note "daemon a runs it after $(($(now_ms) - t0)) ms"

start_daemon "$CONF_B"
PID_B=$DAEMON_PID
LOG_B=$DAEMON_LOG
wait_ping "$PORT_B"
note "daemon b ready $(($(now_ms) - t0)) ms after publishing"
# b must be up (and reclaiming) well before the task ends
assert_le $((MS - 1500)) $(($(now_ms) - t0)) "ms until daemon b was up"

DAEMON_PID=$PID_A
HTTP_PORT=$PORT_A wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' 1 $((MS / 1000 + 10))
elapsed=$(($(now_ms) - t0))
note "daemon a finished it $elapsed ms after publishing"
assert_ge "$MS" "$elapsed" "ms until the sleep finished"

# At that moment daemon b never touched it: nothing claimed, run or running.
if grep -a 'reclaimed' "$LOG_B" >&2; then
	fail "daemon b reclaimed the live task of daemon a (log lines above)"
fi
assert_eq 0 "$(metric_at "$PORT_B" taskmill_tasks_total 'task="sleep"')" "runs on daemon b"
assert_eq 0 "$(metric_at "$PORT_B" taskmill_tasks_inflight 'task="sleep"')" "in flight on daemon b"
assert_eq 0 "$(metric_at "$PORT_B" taskmill_pool_busy)" "busy workers on daemon b"
assert_eq 1 "$(metric_at "$PORT_A" taskmill_tasks_total 'task="sleep"')" "runs on daemon a"

wait_until '[[ $(xpending q.long) == 0 ]]' 5
assert_eq "1 0 0" "$(stream_state q.long)" "acked/pending/undelivered of q.long"
assert_eq 0 "$(xlen q.long.dlq)" "XLEN q.long.dlq"

for pid in "$PID_B" "$PID_A"; do
	DAEMON_PID=$pid
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "exit status of daemon pid $pid after SIGTERM"
done
if grep -a 'reclaimed' "$LOG_B" >&2; then
	fail "daemon b reclaimed entries (log lines above)"
fi
