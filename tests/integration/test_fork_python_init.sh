# A Python task whose module does not import never takes a fork pool
# down and never fails another task's messages:
#  1. at start, in both pools, the daemon refuses it: exit 2 at the task's
#     config: key (before: the fork pool started, /ping said 200 and every
#     worker crash-looped; the thread pool exited 1 with no position);
#  2. a reload with the module broken is refused and the old generation
#     keeps serving, in both pools;
#  3. in the fork pool, a worker whose worker init of the task fails when
#     it starts later (the module broke after start) refuses that task:
#     its messages are rejected with a reason, a healthy C task's messages
#     succeed, and the pool does not crash-loop (worker restarts stay at
#     the kills).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"
CONF=$TEST_DIR/taskmill.yaml
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
MODDIR=$TEST_DIR/pymod
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
mkdir -p "$MODDIR"
good_module() {
	printf 'def run(body, ctx):\n    return {"ok": True}\n' >"$MODDIR/pyinit.py"
	touch -d "+${1:-0} seconds" "$MODDIR/pyinit.py"
}
break_module() { # a later mtime, so that a running interpreter re-imports
	printf 'def run(body, ctx):\n    return {"ok": True\n' >"$MODDIR/pyinit.py"
	touch -d "+${1:-2} seconds" "$MODDIR/pyinit.py"
}
tasks_yaml() {
	cat <<YAML
tasks:
  add:
    plugin: add.so
    queue: q.add
  py:
    plugin: python.so
    queue: q.py
    on_error: reject
    config: { module: pyinit, path: [$MODDIR] }
YAML
}

# 1. refused at start, at the config: key, exit 2
break_module 0
for kind in thread fork; do
	write_config "$CONF" pool_kind=$kind pool_size=2 < <(tasks_yaml)
	start_daemon "$CONF"
	wait_until "! daemon_alive" 20 || true
	if daemon_alive; then
		code=$(http_code /ping)
		kill -KILL "$DAEMON_PID"
		fail "$kind pool: the daemon runs with a module that does not import (/ping $code)"
	fi
	rc=0
	wait "$DAEMON_PID" || rc=$?
	DAEMON_PID=
	assert_eq 2 "$rc" "$kind pool: exit status with a broken module"
	grep -Eq "^$CONF:15:5: tasks\.py\.config: " "$DAEMON_LOG" ||
		fail "$kind pool: no refusal at the config: key"
done

# 2. a reload with the module broken is refused; the old one serves
for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	good_module
	write_config "$CONF" pool_kind=$kind pool_size=2 < <(tasks_yaml)
	start_daemon "$CONF"
	wait_ping
	rcall XADD q.py '*' body '{}' >/dev/null
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 1 30
	break_module 2
	kill -HUP "$DAEMON_PID"
	wait_until "grep -q 'reload refused.*tasks\.py\.config' '$DAEMON_LOG'" 30
	rcall XADD q.py '*' body '{}' >/dev/null
	rcall XADD q.add '*' body '{"a":1,"b":2}' >/dev/null
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 2 30
	wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 30
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool after the refused reload: exit status"
done

# 3. fork pool: the module breaks after start; new workers refuse the task
rcli FLUSHALL >/dev/null
good_module
write_config "$CONF" pool_kind=fork pool_size=2 < <(tasks_yaml)
start_daemon "$CONF"
wait_ping
wait_children 2 20
break_module 2
for tag in $(live_children); do
	kill -KILL "${tag%%:*}"
done
wait_metric_ge taskmill_worker_restarts_total '' 2 20
wait_children 2 20
for i in 1 2 3 4 5 6; do
	rcall XADD q.add '*' body "{\"a\":$i,\"b\":1}" >/dev/null
done
rcall XADD q.py '*' body '{}' >/dev/null
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 6 30
wait_metric taskmill_tasks_total 'task="py",outcome="rejected"' 1 30
assert_eq 0 "$(metric taskmill_tasks_total 'task="add",outcome="crashed"')" "the C task's messages crashed"
assert_match "worker init failed" "$(rcall XRANGE q.py.dlq - + | tr '\n' ' ')" "the rejected message's reason"
restarts=$(metric taskmill_worker_restarts_total)
sleep 2 # a crash loop would restart workers all the while
assert_eq "$restarts" "$(metric taskmill_worker_restarts_total)" "worker restarts after the broken init (a crash loop?)"
assert_le 3 "$restarts" "worker restarts (2 kills)"
grep -q "task 'py' refused its worker init: its messages are rejected" "$DAEMON_LOG" ||
	fail "no refusal logged by the worker"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "fork pool: exit status"
