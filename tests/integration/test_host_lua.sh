# The Lua host (plugins/lua): result, error, reject, invalid result, a loop
# stopped at the deadline (also one that catches the stop), the memory cap,
# the sandbox, the JSON round trip, ctx, reload when the script changes;
# through `invoke` and the daemon in both pools.
CONF=$TEST_DIR/taskmill.yaml
SCRIPT=$TEST_DIR/task.lua
[[ -f $TM_PLUGINS/lua.so ]] || fail "lua.so not built (liblua5.4-dev)"
cp "$TM_SRCDIR/tests/hosts/task.lua" "$SCRIPT"

tasks_yaml() {
	cat <<YAML
tasks:
  lu:
    plugin: lua.so
    queue: q.lu
    on_error: reject
    timeout: ${1:-30s}
    config: { script: $SCRIPT, memory_limit: 8000000 }
YAML
}

# invoke_body JSON: run one body through `taskmill invoke`; output in $OUT.
invoke_body() {
	tm invoke -c "$CONF" lu "$1"
	OUT=$(cat "$TM_OUT")
	note "$1: rc $TM_RC: $OUT"
}

write_config "$CONF" < <(tasks_yaml 2s)

invoke_body '{"mode":"ok"}'
assert_eq 0 "$TM_RC" "ok: exit status"
assert_match 'result: \{"ok":true,"id":"invoke-1","attempt":1,"has_deadline":true,"stop":false\}|result: \{.*"ok":true.*\}' "$OUT" "ok: result"
for k in '"id":"invoke-1"' '"attempt":1' '"has_deadline":true' '"stop":false'; do
	[[ $OUT == *"$k"* ]] || fail "ok: $k missing in $OUT"
done
invoke_body '{"mode":"error"}'
assert_match 'outcome: error' "$OUT" "error: outcome"
assert_match 'error: .*task.lua:[0-9]+: something broke' "$OUT" "error: reason"
grep -q 'stack traceback' "$TM_ERR" || fail "error: no traceback in the log"
invoke_body '{"mode":"reject"}'
assert_match 'outcome: rejected' "$OUT" "reject: outcome"
assert_match 'error: bad input' "$OUT" "reject: reason"
invoke_body '{"mode":"invalid"}'
assert_match 'outcome: error' "$OUT" "invalid: outcome"
assert_match 'error: invalid result: a function cannot be written as JSON' "$OUT" "invalid: reason"
invoke_body '{"mode":"loop"}'
assert_match 'outcome: timeout' "$OUT" "loop: outcome"
invoke_body '{"mode":"catching"}'
assert_match 'outcome: timeout' "$OUT" "catching loop: outcome"
invoke_body '{"mode":"memory"}'
assert_match 'outcome: error' "$OUT" "memory: outcome"
assert_match 'error: not enough memory' "$OUT" "memory: reason"
invoke_body '{"mode":"sandbox"}'
assert_match 'result: ' "$OUT" "sandbox: result"
for k in '"io":false' '"execute":false' '"load":false' '"require":false' '"time":"number"' '"utf8":"ä"'; do
	[[ $OUT == *"$k"* ]] || fail "sandbox: $k missing in $OUT"
done
invoke_body '{"mode":"log"}'
assert_match 'outcome: success' "$OUT" "log: outcome"
grep -q 'warning \[task:lu\] id=invoke-1 hello from lua' "$TM_ERR" || fail "ctx.log line missing"

# The JSON round trip: each value comes back as it went ("IN => OUT" when
# it comes back written otherwise).
while IFS= read -r line; do
	[[ -n $line && $line != \#* ]] || continue
	v=${line%% => *}
	want=${line#* => }
	invoke_body "{\"mode\":\"echo\",\"value\":$v}"
	got=$(sed -n 's/^result: //p' "$TM_OUT")
	# a Lua table keeps no key order: compare with sorted keys
	assert_eq "$(jq -cS . <<<"$want")" "$(jq -cS . <<<"$got")" "round trip of $v"
	assert_eq "${#want}" "${#got}" "length of the round trip of $v"
done <<'EOF_VALUES'
# unicode: kept as UTF-8; escapes decoded, control characters escaped
"äöü € 😀" => "äöü € 😀"
"\u4e2d\ud83d\ude00\n\"" => "中😀\n\""
# a number beyond 64 bits becomes a float
18446744073709551616 => 1.8446744073709552e+19
# the rest verbatim
{"a":[1,2,{"b":null}],"c":{}}
[]
{}
[[],{},[{}]]
9223372036854775807
-9223372036854775808
1.5
-0.25
1e+300
[true,false,null]
EOF_VALUES

# The memory cap, unsafe, and a depth past the cap are refused in config.
# Through the daemon, in each pool; then a reload when the script changes.
for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	cp "$TM_SRCDIR/tests/hosts/task.lua" "$SCRIPT"
	write_config "$CONF" pool_kind=$kind pool_size=2 < <(tasks_yaml 2s)
	for mode in ok error reject invalid loop memory; do
		rcall XADD q.lu '*' body "{\"mode\":\"$mode\"}" >/dev/null
	done
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="lu",outcome="success"' 1 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="rejected"' 1 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="error"' 3 30
	wait_metric taskmill_tasks_total 'task="lu",outcome="timeout"' 1 30
	# the script changes: the workers load it before their next run
	sed -i 's/^VERSION = 1$/VERSION = 2/' "$SCRIPT"
	touch -d '+2 seconds' "$SCRIPT"
	want='{"version":2}'
	got=
	for ((i = 0; i < 100; i++)); do
		id=$(rcall XADD q.lu '*' body '{"mode":"version"}')
		tm invoke -c "$CONF" lu '{"mode":"version"}' >/dev/null
		wait_metric taskmill_tasks_total 'task="lu",outcome="success"' $((i + 2)) 30
		got=$(grep -c "reloading" "$DAEMON_LOG" || true)
		((got >= 1)) && break
		sleep 0.2
	done
	((got >= 1)) || fail "$kind pool: the changed script was not reloaded"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
done
