# The Lua host against hostile task code (tests/hosts/hostile.lua): error
# values of every type and metatable, return values with metatables, cycles
# and depth, a coroutine made at load, __gc finalizers during a run, after
# it and at close, backtracking and plain string patterns, C loops driven by
# __len or huge counts; each ends as an outcome by the deadline + 1 s,
# through `invoke` and in a daemon of each pool that stays up. A memory_limit
# below the minimum is a config error in check and a refused reload.
CONF=$TEST_DIR/taskmill.yaml
SCRIPT=$TEST_DIR/hostile.lua
[[ -f $TM_PLUGINS/lua.so ]] || fail "lua.so not built (liblua5.4-dev)"
cp "$TM_SRCDIR/tests/hosts/hostile.lua" "$SCRIPT"

# tasks_yaml [MEMORY_LIMIT]: the task lu with a 2 s deadline
tasks_yaml() {
	cat <<YAML
tasks:
  lu:
    plugin: lua.so
    queue: q.lu
    on_error: reject
    timeout: 2s
    config: { script: $SCRIPT, memory_limit: ${1:-64000000} }
YAML
}

# invoke_body JSON: one body through `taskmill invoke`, killed after 15 s
# (the deadline is 2 s); output in $OUT, exit status in $RC, wall time in
# $MS. A run must end by its deadline + 1 s (+ the start and the state's
# close around it, generously: 4 s in all).
invoke_body() {
	local t0
	t0=$(now_ms)
	RC=0
	timeout -k 2 15 "$TM_BIN" invoke -c "$CONF" lu "$1" >"$TM_OUT" 2>"$TM_ERR" || RC=$?
	MS=$(($(now_ms) - t0))
	OUT=$(cat "$TM_OUT")
	{
		printf '$ taskmill invoke lu %s  => %d (%d ms)\n' "$1" "$RC" "$MS"
		sed 's/^/  out: /' "$TM_OUT"
		sed 's/^/  err: /' "$TM_ERR" | head -20
	} >>"$TEST_DIR/cli.log"
	note "$1: rc $RC in $MS ms: $OUT"
	((RC != 124 && RC != 137)) || fail "$1: still running after 15 s (deadline 2 s)"
	((RC < 128)) || fail "$1: taskmill died of signal $((RC - 128))"
	assert_le 6000 "$MS" "$1: wall time (ms) of a run with a 2 s deadline"
}

write_config "$CONF" < <(tasks_yaml)

# 2. error values are read without running script code
invoke_body '{"mode":"reject_meta"}'
assert_match 'outcome: rejected' "$OUT" "reject_meta: outcome"
assert_match 'error: rejected' "$OUT" "reject_meta: reason"
invoke_body '{"mode":"reject_reason_table"}'
assert_match 'outcome: rejected' "$OUT" "reject_reason_table: outcome"
for m in error_table error_function error_thread error_bool error_nil; do
	invoke_body "{\"mode\":\"$m\"}"
	assert_match 'outcome: error' "$OUT" "$m: outcome"
	assert_match 'error: \(error object is a [a-z]+ value\)' "$OUT" "$m: reason"
done
invoke_body '{"mode":"error_number"}'
assert_match 'error: 42' "$OUT" "error_number: reason"
# return values are read raw: metatables play no part
invoke_body '{"mode":"return_meta"}'
assert_match 'result: \{"a":1\}' "$OUT" "return_meta: result"
invoke_body '{"mode":"return_array_meta"}'
assert_match 'result: \[1,2\]' "$OUT" "return_array_meta: result"
invoke_body '{"mode":"return_cycle"}'
assert_match 'error: invalid result: nested too deep' "$OUT" "return_cycle: reason"
invoke_body '{"mode":"return_deep"}'
assert_match 'error: invalid result: nested too deep' "$OUT" "return_deep: reason"
invoke_body '{"mode":"return_dag"}'
assert_match 'outcome: (error|timeout)' "$OUT" "return_dag: outcome"

# 4a. a coroutine made while the script loaded is stopped at the deadline
for m in coroutine_load coroutine_wrap_load; do
	invoke_body "{\"mode\":\"$m\"}"
	assert_match 'outcome: timeout' "$OUT" "$m: outcome"
done
# 4b, 4c. finalizers: refused, so none runs outside the deadline (during a
# collection, after the run, or when the state is closed)
for m in gc_run gc_after; do
	invoke_body "{\"mode\":\"$m\"}"
	assert_match 'outcome: error' "$OUT" "$m: outcome"
	assert_match 'error: .*__gc' "$OUT" "$m: reason"
done
# 4d. string patterns and C loops stop at the deadline
invoke_body '{"mode":"pattern"}'
assert_match 'outcome: timeout' "$OUT" "pattern: outcome"
invoke_body '{"mode":"pattern","n":20,"p":"a-a-a-a-a-a-a-a-a-a-a-a-a-a-a-a-a-a-a-b"}'
assert_match 'outcome: timeout' "$OUT" "pattern a-...-b: outcome"
invoke_body '{"mode":"pattern","n":10,"p":"a-b"}'
assert_match 'result: \{"found":false\}' "$OUT" "a short pattern still matches"
invoke_body '{"mode":"pattern_plain"}'
assert_match 'outcome: (timeout|success)' "$OUT" "pattern_plain: outcome"
invoke_body '{"mode":"rep_empty"}'
assert_match 'result: \{"n":0\}' "$OUT" "rep_empty: result"
for m in table_move table_insert table_remove; do
	invoke_body "{\"mode\":\"$m\"}"
	assert_match 'outcome: timeout' "$OUT" "$m: outcome"
done

# 3. a memory_limit below the minimum is a config error, not an abort
for lim in 5000 8000 16000; do
	write_config "$CONF" < <(tasks_yaml $lim)
	tm check -c "$CONF"
	assert_eq 2 "$TM_RC" "check with memory_limit $lim: exit status"
	grep -q "memory_limit.*minimum" "$TM_ERR" || fail "check with memory_limit $lim: no word of the minimum: $(cat "$TM_ERR")"
	grep -qE "taskmill.yaml:[0-9]+:[0-9]+: " "$TM_ERR" || fail "check with memory_limit $lim: no FILE:LINE:COL"
done
tm run -c "$CONF"
assert_eq 2 "$TM_RC" "run with memory_limit 16000: exit status"
grep -q "memory_limit.*minimum" "$TM_ERR" || fail "run with memory_limit 16000: no word of the minimum"
# at the minimum, a script that needs more fails to load: exit 2, no abort
cp "$SCRIPT" "$TEST_DIR/hostile.lua.orig"
printf 'BIG = string.rep("x", 1 << 20)\n' >>"$SCRIPT"
write_config "$CONF" < <(tasks_yaml 262144)
tm check -c "$CONF"
assert_eq 2 "$TM_RC" "check of a script larger than memory_limit: exit status"
grep -q "not enough memory" "$TM_ERR" || fail "check of a script larger than memory_limit: $(cat "$TM_ERR")"
cp "$TEST_DIR/hostile.lua.orig" "$SCRIPT"

# A daemon in each pool: every hostile mode ends as an outcome and the
# daemon stays up. The thread-pool one goes on below: a reload with a tiny
# memory_limit is refused.
daemon_modes() {
	rcli FLUSHALL >/dev/null
	write_config "$CONF" pool_kind=$1 pool_size=2 < <(tasks_yaml)
	local m modes=(reject_meta reject_reason_table error_table error_nil
		return_meta return_cycle coroutine_load gc_run gc_after pattern
		table_move ok)
	for m in "${modes[@]}"; do
		rcall XADD q.lu '*' body "{\"mode\":\"$m\"}" >/dev/null
	done
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="lu",outcome="rejected"' 2 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="timeout"' 3 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="success"' 2 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="error"' 5 30
	daemon_alive "$DAEMON_PID" || fail "$1 pool: the daemon died on hostile Lua code"
}
daemon_modes fork
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "fork pool: daemon exit status"
daemon_modes thread

write_config "$CONF" pool_kind=thread pool_size=2 http_port=$HTTP_PORT < <(tasks_yaml 8000)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reload refused' $DAEMON_LOG" 10
daemon_alive "$DAEMON_PID" || fail "the daemon died on a reload with memory_limit 8000"
grep -q "memory_limit.*minimum" "$DAEMON_LOG" || fail "reload: no word of the minimum"
wait_ping
rcall XADD q.lu '*' body '{"mode":"ok"}' >/dev/null
wait_metric taskmill_tasks_total 'task="lu",outcome="success"' 3 30

# 4c. a reload closes the old states: a finalizer could not be set, so
# the reload finishes and the new generation runs
write_config "$CONF" pool_kind=thread pool_size=2 http_port=$HTTP_PORT < <(tasks_yaml 32000000)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
rcall XADD q.lu '*' body '{"mode":"ok"}' >/dev/null
wait_metric taskmill_tasks_total 'task="lu",outcome="success"' 4 30
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
# the old configuration's workers closed their states and finished
if grep -q 'reached with tasks still running' "$DAEMON_LOG"; then
	fail "a worker of the old configuration never finished (its state's close ran on): $(grep 'reached with tasks still running' "$DAEMON_LOG" | head -1)"
fi
