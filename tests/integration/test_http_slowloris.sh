# Slow requests are cut off: 20 slowloris connections (a request line, then
# one header byte a second, never ending the headers) and 20 idle ones
# (nothing sent). The server closes every one of them within the run, the
# trickling ones included, although each of them shows activity every
# second; meanwhile probes answer.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools curl
FLOOD=$TM_BUILD/test-tools/connflood
[[ -x $FLOOD ]] || skip "$FLOOD not built; run make test-plugins"

N=20
# 15 s: three times the server's whole-request deadline and idle timeout
# (5 s); a server that restarts its deadline on every byte keeps the
# trickling connections open for good, whatever the hold.
HOLD=15
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=1 log_level=info <<YAML
tasks:
  add: { plugin: add.so, queue: q.add }
YAML
start_daemon "$CONF"
wait_ping

"$FLOOD" -p "$HTTP_PORT" -i "$N" -s "$N" -t "$HOLD" \
	>"$TEST_DIR/flood.out" 2>"$TEST_DIR/flood.log" &
FLOOD_PID=$!
tm_on_exit "kill $FLOOD_PID 2>/dev/null || true"
expect_code 200 /healthz
deadline=$(($(now_ms) + (HOLD + 30) * 1000))
while kill -0 "$FLOOD_PID" 2>/dev/null; do
	(($(now_ms) < deadline)) || fail "connflood did not end"
	sleep 0.5
done
wait "$FLOOD_PID" || fail "connflood failed: $(tail -n 3 "$TEST_DIR/flood.log")"
note "totals: $(tr '\n' ' ' <"$TEST_DIR/flood.out")"
val() { sed -n "s/^$1=//p" "$TEST_DIR/flood.out"; }
assert_eq $((2 * N)) "$(val connected)" "connections established"
assert_eq "$N" "$(val closed_slow)" "slowloris connections closed by the server"
assert_eq "$N" "$(val closed_idle)" "idle connections closed by the server"
expect_code 200 /ping
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
