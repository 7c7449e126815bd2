# Thread pool and reload: a run settled at its deadline while its code
# goes on (wedge.so sleeps 4 s under a 1 s timeout) keeps the replaced
# configuration alive until it returns, without holding up the new one:
# the new configuration takes over at once and runs its messages, the
# stuck run's message is settled once (one dead letter), and when the old
# code returns the old configuration is freed (worker fini, the batch it
# held for the run, the pool), with the daemon still running.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 shutdown_timeout=10s <<YAML
tasks:
  w: { plugin: $TM_BUILD/test-plugins/wedge.so, queue: q.w, timeout: 1s, on_error: reject }
YAML
start_daemon "$CONF"
wait_ping

t0=$(now_ms)
id=$(rcall XADD q.w '*' body '{"ms":4000}')
wait_metric taskmill_runs_stuck 'task="w"' 1 10
note "stuck $(($(now_ms) - t0)) ms after publishing"

# a changed task (backoff): a new configuration, a new pool
write_config "$CONF" pool_size=2 shutdown_timeout=10s http_port="$HTTP_PORT" <<YAML
tasks:
  w: { plugin: $TM_BUILD/test-plugins/wedge.so, queue: q.w, timeout: 1s, on_error: reject, backoff: 2s }
YAML
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
wait_until "grep -q 'configuration 1 retired' $DAEMON_LOG" 10
# the new configuration runs while the old one's call is still in its code
rcall XADD q.w '*' body '{"ms":100}' >/dev/null
wait_metric taskmill_tasks_total 'task="w",outcome="success"' 1 10
grep -q "configuration 1: 1 run(s) settled as timeouts at their deadline are still in task code" \
	"$DAEMON_LOG" || fail "the reload did not say what it left running"
grep -q "configuration 1 retired (runs settled at their deadline are still in task code" \
	"$DAEMON_LOG" || fail "the retired configuration is said to leave work to be redelivered, though its stuck run's message is settled"
grep -q "its last call returned" "$DAEMON_LOG" &&
	fail "the old configuration's call returned before the new one ran (the 4 s run is stuck)"

# the old code returns at 4 s: the old configuration goes
wait_until "grep -q 'configuration 1: its last call returned' $DAEMON_LOG" 15
note "old configuration released $(($(now_ms) - t0)) ms after publishing"
daemon_alive || fail "daemon died when the stuck run returned"
assert_eq 1 "$(xlen q.w.dlq)" "dead letters"
assert_eq "$id" "$(xfield q.w.dlq "$(xids q.w.dlq)" origin_id)" "dead letter origin_id"
assert_eq 0 "$(xpending q.w)" "pending of q.w"
assert_eq 1 "$(metric taskmill_tasks_total 'task="w",outcome="timeout"')" "timeouts"
rcall XADD q.w '*' body '{"ms":100}' >/dev/null
wait_metric taskmill_tasks_total 'task="w",outcome="success"' 2 10

rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "exit status"
