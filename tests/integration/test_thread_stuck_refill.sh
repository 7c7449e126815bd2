# Thread pool: the replacement of a stuck worker runs the task's worker
# init in its own thread; when that init is refused (wedge.so with
# worker_inits: 3 refuses the fourth and later), the slot stays empty and
# is tried again a second later, the watchdog goes on, the daemon stays
# up, and the workers left run the messages. SIGTERM still exits within
# its bound.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 shutdown_timeout=5s <<YAML
tasks:
  w:
    plugin: $TM_BUILD/test-plugins/wedge.so
    queue: q.w
    timeout: 1s
    on_error: reject
    config: { worker_inits: 3 }
YAML
start_daemon "$CONF"
wait_ping

# the first stuck worker is replaced (the third init), the second not
rcall XADD q.w '*' body '{"ms":-1}' >/dev/null
wait_metric taskmill_worker_restarts_total '' 1 10
rcall XADD q.w '*' body '{"ms":-1}' >/dev/null
wait_metric taskmill_runs_stuck 'task="w"' 2 10
wait_until "[[ \$(grep -c \"task 'w' refused its worker init\" $DAEMON_LOG) -ge 2 ]]" 10
note "refused inits so far: $(grep -c "task 'w' refused its worker init" "$DAEMON_LOG")"
assert_eq 1 "$(metric taskmill_worker_restarts_total)" "taskmill_worker_restarts_total (refused inits are no replacement)"
assert_eq 2 "$(xlen q.w.dlq)" "dead letters"

# the worker left runs the messages
for i in 1 2 3; do
	rcall XADD q.w '*' body '{"ms":50}' >/dev/null
done
wait_metric taskmill_tasks_total 'task="w",outcome="success"' 3 10
daemon_alive || fail "daemon died"

rc=0
stop_daemon 15 || rc=$?
assert_le 8000 "$DAEMON_STOP_MS" "ms from SIGTERM to exit (shutdown_timeout 5 s)"
assert_eq 1 "$rc" "exit status with runs still in task code"
