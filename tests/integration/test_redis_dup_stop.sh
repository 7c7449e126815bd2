# Nothing pending does not mean nothing running. When a daemon cannot keep
# an entry it holds from being reclaimed (its broker unreachable past
# claim_idle), another daemon reclaims, runs and acknowledges it; the first
# one still runs it afterwards (at-least-once: both do). A stop that waits
# only for the group's pending list to empty can then find that duplicate
# run in flight, and a run longer than shutdown_timeout makes the daemon
# exit 1: what test_soak.sh saw once under ASan at its final SIGTERM (it
# waited for nothing pending only; it now also waits for no message in
# flight in either daemon, as this test does).
#
# Daemon A (one worker, behind a proxy) runs H (HOLD_MS, another task) and
# holds L (L_MS) queued behind it; A's broker is blackholed, so A cannot
# refresh L, and daemon B reclaims L after claim_idle (3 s), runs and
# acknowledges it. A is let through again and acknowledges H: nothing is
# pending, yet A holds L and then runs it. The stop waits for A's messages
# in flight to drop to 0 as well, and both daemons exit 0.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

HOLD_MS=10000
L_MS=4000
FLOWLOG=$TM_BUILD/test-plugins/flowlog.so
JA=$TEST_DIR/runs.a.txt
JB=$TEST_DIR/runs.b.txt

fault_proxy_start PA "$REDIS_PORT"
REDIS_PORT=$FAULT_PORT_PA write_config "$TEST_DIR/a.yaml" pool_size=1 \
	shutdown_timeout=1s instance=a <<YAML
tasks:
  hold: { plugin: $FLOWLOG, queue: q.hold, prefetch: 1, config: { path: $JA } }
  dup: { plugin: $FLOWLOG, queue: q.dup, prefetch: 4, claim_idle: 3s, config: { path: $JA } }
YAML
HA=$HTTP_PORT
HTTP_PORT=
write_config "$TEST_DIR/b.yaml" pool_size=2 shutdown_timeout=1s instance=b <<YAML
tasks:
  dup: { plugin: $FLOWLOG, queue: q.dup, prefetch: 4, claim_idle: 3s, config: { path: $JB } }
YAML
HB=$HTTP_PORT

HTTP_PORT=$HA
start_daemon "$TEST_DIR/a.yaml"
PID_A=$DAEMON_PID
wait_ping "$HA"
rcall XADD q.hold '*' body "{\"ms\":$HOLD_MS}" >/dev/null
wait_metric taskmill_pool_busy '' 1 30
L=$(rcall XADD q.dup '*' body "{\"ms\":$L_MS}")
# A read L: it waits in A's queue behind H
wait_metric taskmill_tasks_inflight 'task="dup"' 1 30
fault_proxy PA "blackhole both"
note "A's broker blackholed; A holds $L"

HTTP_PORT=$HB
start_daemon "$TEST_DIR/b.yaml"
PID_B=$DAEMON_PID
wait_ping "$HB"
# B reclaims L once it has been idle on A for claim_idle, and runs it
wait_metric taskmill_tasks_total 'task="dup",outcome="success"' 1 60
fault_proxy PA pass
note "B ran and acknowledged $L; A's broker let through again"

# the old stop condition of the soak: nothing pending in either stream
deadline=$(($(now_ms) + 60000))
while (($(xpending q.hold) != 0 || $(xpending q.dup) != 0)); do
	(($(now_ms) < deadline)) || fail "entries still pending after 60 s"
	daemon_alive "$PID_A" || fail "daemon A exited"
	sleep 0.1
done
held=$(metric_at "$HA" taskmill_tasks_inflight)
note "nothing pending; A has $held message(s) in flight"
assert_eq 1 "$held" "A's messages in flight with nothing pending (its copy of L)"

# the stop condition now: nothing in flight either
deadline=$(($(now_ms) + 60000))
while (($(metric_at "$HA" taskmill_tasks_inflight) != 0 ||
	$(metric_at "$HB" taskmill_tasks_inflight) != 0)); do
	(($(now_ms) < deadline)) || fail "messages still in flight after 60 s"
	sleep 0.1
done
assert_eq 0 "$(xpending q.dup)" "entries of q.dup pending before the stop"
DAEMON_PID=$PID_A
rc=0
stop_daemon 20 || rc=$?
assert_eq 0 "$rc" "A's exit status after SIGTERM"
DAEMON_PID=$PID_B
rc=0
stop_daemon 20 || rc=$?
assert_eq 0 "$rc" "B's exit status after SIGTERM"
# L ran in both daemons
assert_eq 1 "$(grep -c "^$L " "$JA")" "runs of L in A"
assert_eq 1 "$(grep -c "^$L " "$JB")" "runs of L in B"
