# The exec host (plugins/exec): one process per run, body on stdin, result
# from stdout, exit 0 / 65 / other, stderr to the log, TASKMILL_* in the
# environment, only fds 0-2 inherited, the process group killed at the
# deadline and reaped, in `invoke` and in both pools.
CONF=$TEST_DIR/taskmill.yaml
TASK=$TM_SRCDIR/tests/hosts/task.sh
[[ -f $TM_PLUGINS/exec.so ]] || fail "exec.so not built"
PIDFILE=$TEST_DIR/sleep.pid

tasks_yaml() {
	cat <<YAML
tasks:
  ex:
    plugin: exec.so
    queue: q.ex
    on_error: reject
    timeout: ${1:-30s}
    config:
      command: [$TASK]
      env: { GREETING: "hello there", PIDFILE: "$PIDFILE" }
      cwd: $TEST_DIR
      max_output: 100000
YAML
}

# descendants PID: every process below PID, one a line.
descendants() {
	local c
	for c in $(pgrep -P "$1" || true); do
		echo "$c"
		descendants "$c"
	done
}

# invoke_mode MODE: run one body through `taskmill invoke`; output in $OUT.
invoke_mode() {
	tm invoke -c "$CONF" ex "{\"mode\":\"$1\"}"
	OUT=$(cat "$TM_OUT")
	note "$1: rc $TM_RC: $OUT"
}

write_config "$CONF" < <(tasks_yaml)

invoke_mode ok
assert_eq 0 "$TM_RC" "ok: exit status"
assert_match 'result: \{"ok":true,"task":"ex","attempt":1,"id":"invoke-1","deadline":[1-9][0-9]+\}' "$OUT" "ok: result and environment"
invoke_mode env
assert_match "result: \\{\"greeting\":\"hello there\",\"cwd\":\"$TEST_DIR\"\\}" "$OUT" "env: config env and cwd"
invoke_mode empty
assert_match 'outcome: success' "$OUT" "empty stdout: success"
! grep -q '^result:' "$TM_OUT" || fail "empty stdout gave a result"
invoke_mode error
assert_match 'outcome: error' "$OUT" "error: outcome"
assert_match 'error: command exited with status 3: something broke' "$OUT" "error: reason"
grep -q 'stderr: something broke' "$TM_ERR" || fail "stderr line not logged"
invoke_mode reject
assert_match 'outcome: rejected' "$OUT" "reject: outcome"
assert_match 'error: rejected \(exit 65\): bad input' "$OUT" "reject: reason"
invoke_mode invalid
assert_match 'outcome: error' "$OUT" "invalid: outcome"
assert_match 'error: invalid result' "$OUT" "invalid: reason"
invoke_mode signal
assert_match 'error: command killed by signal 11 \(SIGSEGV\)' "$OUT" "signal: reason"
invoke_mode big
assert_match 'error: output larger than 100000 bytes' "$OUT" "big: reason"
invoke_mode spam
assert_eq 20 "$(grep -c 'stderr: line' "$TM_ERR")" "stderr lines logged per run"
grep -q 'stderr: 80 more lines not logged' "$TM_ERR" || fail "dropped lines not counted"
# the fds of the command's shell: 0, 1, 2 and nothing else
invoke_mode fds
grep -q 'stderr: 0 1 2 *$' "$TM_ERR" || fail "descriptors inherited: $(grep stderr: "$TM_ERR")"

# a body far larger than the socket buffer, read by the command in full
big=$TEST_DIR/big.json
awk 'BEGIN { printf "{\"pad\":\""; for (i = 0; i < 600000; i++) printf "x"; printf "\"}" }' >"$big"
cat >"$TEST_DIR/count.yaml" <<YAML
tasks:
  cnt:
    plugin: exec.so
    queue: q.cnt
    max_payload: 1MiB
    config: { command: [$TASK, count] }
YAML
write_config "$TEST_DIR/count.conf.yaml" <"$TEST_DIR/count.yaml"
tm invoke -c "$TEST_DIR/count.conf.yaml" cnt - <"$big"
assert_match "result: \\{\"bytes\":$(wc -c <"$big")\\}" "$(cat "$TM_OUT")" "large body: bytes read"

# the deadline: the group gets SIGTERM (the sleeps die of it) and is reaped
write_config "$CONF" < <(tasks_yaml 1s )
rm -f "$PIDFILE" "$PIDFILE.bg"
invoke_mode sleep
assert_match 'outcome: timeout' "$OUT" "sleep: outcome"
for f in "$PIDFILE" "$PIDFILE.bg"; do
	pid=$(cat "$f")
	wait_until "[[ ! -e /proc/$pid ]]" 10
done

# Through the daemon, in each pool.
for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	rm -f "$PIDFILE" "$PIDFILE.bg"
	write_config "$CONF" pool_kind=$kind pool_size=2 < <(tasks_yaml 2s )
	for mode in ok error reject invalid sleep; do
		rcall XADD q.ex '*' body "{\"mode\":\"$mode\"}" >/dev/null
	done
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="ex",outcome="success"' 1 30
	wait_metric taskmill_tasks_total 'task="ex",outcome="rejected"' 1 30
	wait_metric taskmill_tasks_total 'task="ex",outcome="error"' 2 30
	wait_metric taskmill_tasks_total 'task="ex",outcome="timeout"' 1 30
	wait_until '[[ $(xlen q.ex.dlq) == 4 ]]' 10
	wait_until "[[ -s $PIDFILE && -s $PIDFILE.bg ]]" 10
	for f in "$PIDFILE" "$PIDFILE.bg"; do
		pid=$(cat "$f")
		# gone: neither running nor a zombie
		wait_until "[[ ! -e /proc/$pid ]]" 10
	done
	# below the daemon: taskmill processes only, none a zombie
	for p in $(descendants "$DAEMON_PID"); do
		st=$(ps -o stat=,comm= -p "$p" || true)
		[[ -z $st || $st =~ ^[^Z][^\ ]*\ +(taskmill|tm-.*)$ ]] ||
			fail "$kind pool: left below the daemon: $p $st"
	done
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
done
