# A Python run that catches taskmill.Stopped with a bare `except:` (around
# a sleep, around a busy loop, nested, with `continue` and `finally`) is
# stopped again and again until it returns: with timeout 1s each ends as
# a timeout (dead-lettered: on_error reject) and the worker runs the next
# message, in both pools and through `taskmill invoke`. Before the fix the
# first Stopped was the only one and every such run went on for ever.
CONF=$TEST_DIR/taskmill.yaml
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
MODDIR=$TEST_DIR/pymod
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
mkdir -p "$MODDIR"
cp "$TM_SRCDIR/tests/hosts/pystubborn.py" "$MODDIR/"

tasks_yaml() {
	cat <<YAML
tasks:
  py:
    plugin: python.so
    queue: q.py
    on_error: reject
    timeout: 1s
    config: { module: pystubborn, path: [$MODDIR] }
YAML
}

write_config "$CONF" < <(tasks_yaml)
for mode in sleepy busy nested; do
	t0=$(now_ms)
	tm invoke -c "$CONF" py "{\"mode\":\"$mode\"}"
	took=$(($(now_ms) - t0))
	note "invoke $mode: rc $TM_RC after $took ms: $(tr '\n' ' ' <"$TM_OUT")"
	assert_match 'outcome: timeout' "$(cat "$TM_OUT")" "invoke $mode: outcome"
	# the deadline plus generous slack for a loaded machine (the bug is
	# "never": invoke's own 60 s limit)
	assert_le 20000 "$took" "invoke $mode: run time (ms)"
done

for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	# one worker: the next message waits for the stubborn runs to end
	write_config "$CONF" pool_kind=$kind pool_size=1 < <(tasks_yaml)
	for mode in sleepy busy nested ok; do
		rcall XADD q.py '*' body "{\"mode\":\"$mode\"}" >/dev/null
	done
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="py",outcome="timeout"' 3 40
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 1 20
	assert_eq 3 "$(xlen q.py.dlq)" "$kind pool: the timed-out runs dead-lettered"
	# no Stopped leaks into the next run
	rcall XADD q.py '*' body '{"mode":"ok"}' >/dev/null
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 2 20
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
done
