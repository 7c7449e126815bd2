# Probes under a connection flood: 10,000 idle and 1,000 slowloris
# connections are held open against the HTTP port (each one the server
# closes is opened again a second later) while /healthz, /ping and /metrics
# are probed, several rounds in a row, and tasks are published. The flood
# ends once the checks are done (HOLD seconds at most). Every probe answers
# 200 within curl's 5 s, every task runs, and the daemon raised its soft
# descriptor limit to the hard one. Generous bounds: this checks that HTTP
# keeps answering, not how fast.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools curl
FLOOD=$TM_BUILD/test-tools/connflood
[[ -x $FLOOD ]] || skip "$FLOOD not built; run make test-plugins"

IDLE=10000
SLOW=1000
HOLD=45
ROUNDS=5
TASKS=5
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && ((hard < IDLE + SLOW + 64)); then
	skip "the hard RLIMIT_NOFILE ($hard) leaves no room for $((IDLE + SLOW)) connections"
fi

CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 log_level=info <<YAML
tasks:
  add: { plugin: add.so, queue: q.add }
YAML
# a low soft limit, as many init systems set: the daemon raises it
ulimit -Sn 1024
start_daemon "$CONF"
ulimit -Sn "$hard"
wait_ping

"$FLOOD" -p "$HTTP_PORT" -i "$IDLE" -s "$SLOW" -t "$HOLD" -r 1000 \
	-o "$TEST_DIR/flood.ready" >"$TEST_DIR/flood.out" 2>"$TEST_DIR/flood.log" &
FLOOD_PID=$!
tm_on_exit "kill $FLOOD_PID 2>/dev/null || true"
wait_until "[[ -f $TEST_DIR/flood.ready ]]" 30
note "flood opened: $(tr '\n' ' ' <"$TEST_DIR/flood.ready")"

# ---- probes, while the flood holds its connections
for ((r = 1; r <= ROUNDS; r++)); do
	for path in /healthz /ping /metrics; do
		t0=$(now_ms)
		code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' \
			"http://127.0.0.1:$HTTP_PORT$path" 2>/dev/null) || true
		note "round $r: $path answered ${code:-000} in $(($(now_ms) - t0)) ms"
		assert_eq 200 "${code:-000}" "$path during the flood (round $r)"
	done
	sleep 1
done

# ---- tasks keep running
for ((i = 1; i <= TASKS; i++)); do
	emit "$CONF" add "{\"a\":$i,\"b\":1}" >/dev/null
done
wait_metric taskmill_tasks_total 'task="add",outcome="success"' "$TASKS" 30
kill -0 "$FLOOD_PID" 2>/dev/null || fail "the flood ended before the probes did"

# ---- the flood was real: every connection was established, and the
# server closed connections (shed or past their request deadline)
kill -TERM "$FLOOD_PID"
wait "$FLOOD_PID" || fail "connflood failed: $(tail -n 3 "$TEST_DIR/flood.log")"
note "flood totals: $(tr '\n' ' ' <"$TEST_DIR/flood.out")"
val() { sed -n "s/^$1=//p" "$TEST_DIR/flood.out"; }
assert_ge $((IDLE + SLOW)) "$(val connected)" "connections established"
assert_ge 1 "$(val closed_idle)" "idle connections closed by the server"
assert_ge 1 "$(val closed_slow)" "slowloris connections closed by the server"

daemon_alive || fail "the daemon died"
limits=$(awk '/^Max open files/ { print $4, $5 }' "/proc/$DAEMON_PID/limits")
assert_eq "$hard $hard" "$limits" "the daemon's soft and hard RLIMIT_NOFILE"
expect_code 200 /ping
expect_code 200 /healthz
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
