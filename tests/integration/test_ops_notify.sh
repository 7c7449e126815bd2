# sd_notify: READY=1 once every task is subscribed, STATUS= lines,
# WATCHDOG=1 from the main loop when WATCHDOG_USEC is set, STOPPING=1 on
# SIGTERM; all sent to the NOTIFY_SOCKET a service manager provides.
# grep reads all of ldd's output: with grep -q, ldd could die of SIGPIPE
# after the match and pipefail would call the build one without libsystemd
if ! ldd "$TM_BIN" | grep libsystemd >/dev/null; then
	skip "built without libsystemd (USE_SYSTEMD=no)"
fi
SOCK=$TEST_DIR/notify.sock
OUT=$TEST_DIR/notify.out
nc -lkuU "$SOCK" >"$OUT" 2>"$TEST_DIR/nc.log" &
NC_PID=$!
tm_on_exit 'kill $NC_PID 2>/dev/null'
wait_until "[[ -S $SOCK ]]" 5

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML

NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=400000 start_daemon "$CONF"
wait_ping
wait_until "grep -q 'READY=1' $OUT" 10
wait_until "grep -q 'STATUS=running; 1 tasks' $OUT" 10
# the watchdog interval is half of WATCHDOG_USEC: several pings a second
wait_until "[[ \$(grep -o 'WATCHDOG=1' $OUT | wc -l) -ge 4 ]]" 5
grep -q 'STOPPING=1' "$OUT" && fail "STOPPING=1 before any stop"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status"
wait_until "grep -q 'STOPPING=1' $OUT" 5
note "$(tr '\0' ' ' <"$OUT" | head -c 400)"

# Without WATCHDOG_USEC there are no watchdog pings.
: >"$OUT"
NOTIFY_SOCKET=$SOCK start_daemon "$CONF"
wait_until "grep -q 'READY=1' $OUT" 10
sleep 1.2 # let a few main-loop rounds pass: none may ping the watchdog
grep -q 'WATCHDOG=1' "$OUT" && fail "WATCHDOG=1 sent although WATCHDOG_USEC is unset"
stop_daemon
