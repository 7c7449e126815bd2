# sd_notify: READY=1 once every task is subscribed, STATUS= lines,
# WATCHDOG=1 from the main loop when WATCHDOG_USEC is set, STOPPING=1 on
# SIGTERM; all sent to the NOTIFY_SOCKET a service manager provides.
# The protocol is the daemon's own (src/util/notify.c): no libsystemd is mapped.
# grep reads all of ldd's output (with grep -q, ldd could die of SIGPIPE
# after the match and pipefail would fail the check).
if ldd "$TM_BIN" | grep libsystemd >/dev/null; then
	fail "the daemon links libsystemd"
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

# A watchdog meant for another process (WATCHDOG_PID) is not this one's.
: >"$OUT"
NOTIFY_SOCKET=$SOCK WATCHDOG_USEC=400000 WATCHDOG_PID=1 start_daemon "$CONF"
wait_until "grep -q 'READY=1' $OUT" 10
sleep 1.2
grep -q 'WATCHDOG=1' "$OUT" && fail "WATCHDOG=1 sent although WATCHDOG_PID names another process"
stop_daemon

# An abstract socket name (@...), as service managers in containers give.
ABS=taskmill-notify-$$-$RANDOM
AOUT=$TEST_DIR/abstract.out
python3 - "$ABS" "$AOUT" <<'PYEOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + sys.argv[1])
with open(sys.argv[2], "ab", buffering=0) as f:
    while True:
        f.write(s.recv(4096) + b"\n")
PYEOF
PY_PID=$!
tm_on_exit 'kill $PY_PID 2>/dev/null'
wait_until "grep -q '@$ABS' /proc/net/unix" 5
NOTIFY_SOCKET=@$ABS start_daemon "$CONF"
wait_until "grep -q 'READY=1' $AOUT" 10
stop_daemon
wait_until "grep -q 'STOPPING=1' $AOUT" 5
