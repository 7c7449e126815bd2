# Task code reads the run's trace context in every language: C
# (tm_traceparent, the test plugin traceparent.so), Lua and Python
# (ctx.traceparent), exec (TRACEPARENT), in the thread pool and the fork
# pool (the context crosses to the child with the request). With tracing
# on it names the run's own span (the parent of the task's spans): the
# message's trace, the exported span's id. Without telemetry it is the
# message's context as it came, and a message without one has none.
. "$TM_SRCDIR/tests/integration/lib_otel.sh"
# the interpreter's own allocations at exit, as in test_host_python
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
[[ -f $TM_PLUGINS/lua.so ]] || fail "lua.so not built (liblua5.4-dev)"
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
printf 'function run(body, ctx) return { tp = ctx.traceparent } end\n' >"$TEST_DIR/tp.lua"
printf 'def run(body, ctx):\n    return {"tp": ctx.traceparent}\n' >"$TEST_DIR/tptask.py"
cat >"$TEST_DIR/tp.sh" <<'SH'
#!/bin/sh
cat >/dev/null
if [ -n "${TRACEPARENT:-}" ]; then printf '{"tp":"%s"}\n' "$TRACEPARENT"; else echo '{"tp":null}'; fi
SH
chmod +x "$TEST_DIR/tp.sh"
otlp_start
TASKS="tasks:
  c: { plugin: $TM_BUILD/test-plugins/traceparent.so, queue: q.c }
  lu: { plugin: lua.so, queue: q.lu, config: { script: $TEST_DIR/tp.lua } }
  py: { plugin: python.so, queue: q.py, config: { module: tptask, path: [$TEST_DIR] } }
  ex: { plugin: exec.so, queue: q.ex, config: { command: [$TEST_DIR/tp.sh] } }"

# request Q TRACEPARENT: send a request (with that traceparent, none when
# empty) and print the answer's body
request() {
	local q=$1 tp=$2 corr reply
	corr=req-$RANDOM$RANDOM
	reply=$q.reply.$corr
	if [[ -n $tp ]]; then
		rcall XADD "$q" '*' body '{}' reply_to "$reply" correlation_id "$corr" traceparent "$tp" >/dev/null
	else
		rcall XADD "$q" '*' body '{}' reply_to "$reply" correlation_id "$corr" >/dev/null
	fi
	wait_until "[[ \$(xlen $reply) == 1 ]]" 30
	xfield "$reply" "$(xids "$reply")" body
}

TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
for pool in thread fork; do
	CONF=$TEST_DIR/$pool.yaml
	write_config "$CONF" pool_kind=$pool pool_size=2 http_port="$(free_port)" <<YAML
telemetry: { otlp_endpoint: http://127.0.0.1:$OTLP_PORT }
$TASKS
YAML
	start_daemon "$CONF"
	wait_ping "$HTTP_PORT" 60
	for t in c lu py ex; do
		tp=$(request "q.$t" "$TP" | jq -r .tp)
		assert_match '^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$' "$tp" \
			"$pool/$t: traceparent in the message's trace"
		span=${tp:36:16}
		assert_ne 00f067aa0ba902b7 "$span" "$pool/$t: the run's own span, not the producer's"
		wait_spans ".span_id == \"$span\"" 1
		assert_eq 00f067aa0ba902b7 "$(spans_where ".span_id == \"$span\"" | jq -r .parent_span_id)" \
			"$pool/$t: the exported span is the one the task code saw"
		# no context in the message: a new root, still one the code sees
		tp=$(request "q.$t" "" | jq -r .tp)
		assert_match '^00-[0-9a-f]{32}-[0-9a-f]{16}-01$' "$tp" "$pool/$t: a new root's traceparent"
	done
	stop_daemon
done

# without telemetry: the message's own context, none without one
CONF=$TEST_DIR/plain.yaml
write_config "$CONF" http_port="$(free_port)" <<YAML
$TASKS
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60
for t in c lu py ex; do
	assert_eq "$TP" "$(request "q.$t" "$TP" | jq -r .tp)" "no telemetry, $t: the message's traceparent"
	assert_eq null "$(request "q.$t" "" | jq -r .tp)" "no telemetry, $t: none"
	assert_eq null "$(request "q.$t" "00-zz" | jq -r .tp)" "no telemetry, $t: a malformed one is none"
done
stop_daemon
