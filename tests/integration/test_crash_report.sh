# Thread pool: task code that crashes takes the daemon down (no process
# boundary), but first the crash handler writes which signal, which task
# and which message, and a backtrace, in the log's format; then the signal
# is re-raised so the daemon dies by it (systemd sees the crash, a core
# can be dumped). Text and JSON log formats.
#
# ASan build: the handler is installed after the sanitizer runtime's own
# and replaces it (allow_user_segv_handler, on by default), so the same
# report and the same death by SIGSEGV are expected; no ASAN_OPTIONS.
CONF=$TEST_DIR/taskmill.yaml

# crash_once FORMAT: start a thread-pool daemon logging in FORMAT, make it
# run {"mode":"crash"}, wait for it to die; sets ID and RC.
crash_once() {
	write_config "$CONF" pool_size=2 <<YAML
tasks:
  boom: { plugin: fail.so, queue: q.boom }
  noop: { plugin: noop.so, queue: q.noop }
YAML
	sed -i "s/^log: { level: debug, format: text }$/log: { level: info, format: $1 }/" "$CONF"
	grep -q "format: $1" "$CONF" || fail "could not set log.format $1"
	rcli FLUSHALL >/dev/null
	start_daemon "$CONF"
	wait_ping
	ID=$(rcall XADD q.boom '*' body '{"mode":"crash"}')
	wait_until '! daemon_alive' 30
	RC=0
	wait "$DAEMON_PID" 2>/dev/null || RC=$?
	DAEMON_PID=
	note "daemon exit status $RC; log:"
	sed 's/^/#   /' "$DAEMON_LOG" | tail -n 30 >&2
}

crash_once text
assert_eq $((128 + 11)) "$RC" "exit status (killed by SIGSEGV)"
line=$(grep -E '^[0-9T:.-]+Z error \[crash:boom\] ' "$DAEMON_LOG" | head -n 1) ||
	fail "no error line from [crash:boom] in the log"
assert_match "id=$ID " "$line" "crash line names the message id"
assert_match 'SIGSEGV' "$line" "crash line names the signal"
frames=$(grep -cE '^[0-9T:.-]+Z error \[crash:boom\] id=[^ ]+ #[0-9]+ ' "$DAEMON_LOG" || true)
assert_ge 3 "$frames" "backtrace frames in the log"
grep -qE '\[crash:boom\] .*#[0-9]+ .*fail\.so' "$DAEMON_LOG" ||
	fail "the backtrace does not show the plugin fail.so"
grep -qE '\[crash:boom\] .*#[0-9]+ .*taskmill' "$DAEMON_LOG" ||
	fail "the backtrace does not show the daemon's frames"

crash_once json
assert_eq $((128 + 11)) "$RC" "exit status with log.format json"
line=$(grep -F '"src":"crash"' "$DAEMON_LOG" | head -n 1) ||
	fail "no crash line in the JSON log"
assert_match '^\{"ts":"[^"]+","level":"error","src":"crash","task":"boom","msg_id":"'"$ID"'","msg":"[^"]*SIGSEGV' \
	"$line" "JSON crash line"
if command -v python3 >/dev/null 2>&1; then
	grep -F '"src":"crash"' "$DAEMON_LOG" |
		python3 -c 'import json, sys; [json.loads(l) for l in sys.stdin]' ||
		fail "a crash line is not one JSON object"
fi
