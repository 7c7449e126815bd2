# The Python host (plugins/python): result, error ("Type: message" with
# the traceback in the log), reject, invalid result, a loop stopped at the
# deadline, a segfaulting extension isolated in the fork pool, a Debian
# module (yaml), the JSON round trip and ctx; through `invoke` and the
# daemon in both pools, and a module reload when its file changes.
CONF=$TEST_DIR/taskmill.yaml
# an ASan build: the interpreter's own memory is not the plugin's leak
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
MODDIR=$TEST_DIR/pymod
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
python3 -c 'import yaml' 2>/dev/null || fail "python3-yaml is not installed"
mkdir -p "$MODDIR"
cp "$TM_SRCDIR/tests/hosts/pytask.py" "$MODDIR/pytask.py"

tasks_yaml() {
	cat <<YAML
tasks:
  py:
    plugin: python.so
    queue: q.py
    on_error: reject
    timeout: ${1:-30s}
    config: { module: pytask, path: [$MODDIR] }
YAML
}

# invoke_body JSON: run one body through `taskmill invoke`; output in $OUT.
invoke_body() {
	tm invoke -c "$CONF" py "$1"
	OUT=$(cat "$TM_OUT")
	note "$1: rc $TM_RC: $OUT"
}

write_config "$CONF" < <(tasks_yaml 2s)

invoke_body '{"mode":"ok"}'
assert_eq 0 "$TM_RC" "ok: exit status"
for k in '"id":"invoke-1"' '"attempt":1' '"has_deadline":true' '"stop":false'; do
	[[ $OUT == *"$k"* ]] || fail "ok: $k missing in $OUT"
done
invoke_body '{"mode":"none"}'
assert_match 'outcome: success' "$OUT" "none: outcome"
invoke_body '{"mode":"error"}'
assert_match 'outcome: error' "$OUT" "error: outcome"
assert_match 'error: ValueError: something broke' "$OUT" "error: reason"
grep -q 'Traceback (most recent call last)' "$TM_ERR" || fail "error: no traceback in the log"
invoke_body '{"mode":"reject"}'
assert_match 'outcome: rejected' "$OUT" "reject: outcome"
assert_match 'error: bad input' "$OUT" "reject: reason"
invoke_body '{"mode":"invalid"}'
assert_match 'outcome: error' "$OUT" "invalid: outcome"
assert_match 'error: invalid result: TypeError' "$OUT" "invalid: reason"
invoke_body '{"mode":"loop"}'
assert_match 'outcome: timeout' "$OUT" "loop: outcome"
invoke_body '{"mode":"catching"}'
assert_match 'outcome: timeout' "$OUT" "catching loop: outcome"
invoke_body '{"mode":"yaml","text":"a: 1\nb: [x, y]\n"}'
assert_match 'result: \{"a":1,"b":\["x","y"\]\}' "$OUT" "yaml: result"
invoke_body '{"mode":"log"}'
grep -q 'warning \[task:py\] id=invoke-1 hello from python' "$TM_ERR" || fail "ctx.log line missing"

# The JSON round trip ("IN => OUT" when it comes back written otherwise).
while IFS= read -r line; do
	[[ -n $line && $line != \#* ]] || continue
	v=${line%% => *}
	want=${line#* => }
	invoke_body "{\"mode\":\"echo\",\"value\":$v}"
	assert_eq "result: $want" "$(grep '^result:' "$TM_OUT")" "round trip of $v"
done <<'EOF_VALUES'
"äöü € 😀" => "äöü € 😀"
"\u4e2d\ud83d\ude00\n\"" => "中😀\n\""
18446744073709551616123 => 18446744073709551616123
{"a":[1,2,{"b":null}],"c":{}}
[]
{}
[[],{},[{}]]
9223372036854775807
-9223372036854775808
1.5
-0.25
1e+300 => 1e+300
[true,false,null]
EOF_VALUES

for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	cp "$TM_SRCDIR/tests/hosts/pytask.py" "$MODDIR/pytask.py"
	write_config "$CONF" pool_kind=$kind pool_size=2 < <(tasks_yaml 2s)
	modes="ok error reject invalid loop"
	[[ $kind == fork ]] && modes+=" crash"
	for mode in $modes; do
		rcall XADD q.py '*' body "{\"mode\":\"$mode\"}" >/dev/null
	done
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 1 30
	wait_metric taskmill_tasks_total 'task="py",outcome="rejected"' 1 30
	wait_metric taskmill_tasks_total 'task="py",outcome="error"' 2 30
	wait_metric taskmill_tasks_total 'task="py",outcome="timeout"' 1 30
	if [[ $kind == fork ]]; then
		wait_metric taskmill_tasks_total 'task="py",outcome="crashed"' 1 30
	fi
	# still serving after all that
	rcall XADD q.py '*' body '{"mode":"ok"}' >/dev/null
	wait_metric taskmill_tasks_total 'task="py",outcome="success"' 2 30
	# a changed module is imported again on reload (SIGHUP)
	sed -i 's/^VERSION = 1$/VERSION = 2/' "$MODDIR/pytask.py"
	touch -d '+2 seconds' "$MODDIR/pytask.py"
	kill -HUP "$DAEMON_PID"
	wait_until "grep -q 'as configuration 2' '$DAEMON_LOG'" 20
	wait_ping
	rcall XADD q.py '*' body '{"mode":"version"}' >/dev/null
	wait_until "grep -q 'module version 2' '$DAEMON_LOG'" 30
	! grep -q 'module version 1' "$DAEMON_LOG" || fail "$kind pool: old module ran"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
done
