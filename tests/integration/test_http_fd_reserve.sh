# HTTP never takes the descriptors the rest of the daemon needs: under a
# hard descriptor limit of 200, 1,000 connections are held against the HTTP
# port (reopened as the server closes them) while a reload adds a task,
# which needs new broker connections and a plugin file. The reload goes
# through, both tasks run, and probes answer.
# Alone: at the connection cap (8 here) a new connection sheds the one that
# has waited longest for its request, so a probe whose request the server
# thread has not read before 8 more flood connections arrive is shed; a
# CPU shared with another test delays that thread enough (seen with 3 lanes).
# run.sh: alone
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools curl
FLOOD=$TM_BUILD/test-tools/connflood
[[ -x $FLOOD ]] || skip "$FLOOD not built; run make test-plugins"

LIMIT=200
CONNS=1000
HOLD=40
# the daemon runs under a wrapper that lowers its limit (the test's own
# shell keeps its limit for connflood)
REAL_BIN=$TM_BIN
printf '#!/bin/sh\nulimit -n %d || exit 1\nexec "%s" "$@"\n' "$LIMIT" "$REAL_BIN" \
	>"$TEST_DIR/taskmill-limited"
chmod +x "$TEST_DIR/taskmill-limited"

CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 log_level=info <<YAML
tasks:
  a: { plugin: add.so, queue: q.a }
YAML
TM_BIN=$TEST_DIR/taskmill-limited
start_daemon "$CONF"
TM_BIN=$REAL_BIN
wait_ping
limits=$(awk '/^Max open files/ { print $4, $5 }' "/proc/$DAEMON_PID/limits")
assert_eq "$LIMIT $LIMIT" "$limits" "the daemon's RLIMIT_NOFILE"

"$FLOOD" -p "$HTTP_PORT" -i "$CONNS" -t "$HOLD" -r 500 \
	-o "$TEST_DIR/flood.ready" >"$TEST_DIR/flood.out" 2>"$TEST_DIR/flood.log" &
FLOOD_PID=$!
tm_on_exit "kill $FLOOD_PID 2>/dev/null || true"
wait_until "[[ -f $TEST_DIR/flood.ready ]]" 30
note "flood opened: $(tr '\n' ' ' <"$TEST_DIR/flood.ready")"

# ---- a reload that adds a task, during the flood
write_http_config "$CONF" pool_size=2 log_level=info <<YAML
tasks:
  a: { plugin: add.so, queue: q.a }
  b: { plugin: add.so, queue: q.b }
YAML
kill -HUP "$DAEMON_PID"
wait_until "grep -q \"consuming stream 'q.b'\" $DAEMON_LOG" 30
emit "$CONF" a '{"a":1,"b":2}' >/dev/null
emit "$CONF" b '{"a":3,"b":4}' >/dev/null
wait_metric taskmill_tasks_total 'task="a",outcome="success"' 1 30
wait_metric taskmill_tasks_total 'task="b",outcome="success"' 1 30
for path in /healthz /ping /metrics; do
	code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' \
		"http://127.0.0.1:$HTTP_PORT$path" 2>/dev/null) || true
	assert_eq 200 "${code:-000}" "$path during the flood"
done
kill -0 "$FLOOD_PID" 2>/dev/null || fail "the flood ended before the checks did"
if grep -q 'Too many open files' "$DAEMON_LOG"; then
	grep 'Too many open files' "$DAEMON_LOG" | head -n 3 >&2
	fail "the daemon ran out of descriptors"
fi
kill "$FLOOD_PID" 2>/dev/null || true
wait "$FLOOD_PID" || true
note "flood totals: $(tr '\n' ' ' <"$TEST_DIR/flood.out")"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
