# Lifecycle and logging contract: log.format json writes one JSON object
# per line and never a message body; the default consumer name is
# <hostname>-<pid>; a run past shutdown_timeout is abandoned (exit 1, the
# message stays pending for redelivery); a second signal exits at once (1).
CONF=$TEST_DIR/taskmill.yaml
HP=$(free_port)
HTTP_PORT=$HP
conf() { # SHUTDOWN_TIMEOUT
	cat >"$CONF" <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
shutdown_timeout: $1
log: { level: debug, format: json }
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, timeout: 0 }
  add: { plugin: add.so, queue: q.add, on_error: reject }
YAML
}

# 1. JSON logs, no bodies; the default instance name
conf 10s
start_daemon "$CONF"
wait_ping
rcall XADD q.add '*' body '{"a":1,"b":"SECRET-BODY-MARKER"}' >/dev/null
rcall XADD q.add '*' body '{"a":1,"b":2,"note":"SECRET-BODY-MARKER"}' >/dev/null
wait_metric taskmill_tasks_total 'task="add",outcome="rejected"' 1 10
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 10
consumer=$(rcall XINFO CONSUMERS q.add taskmill | sed -n 2p)
assert_eq "$(hostname)-$DAEMON_PID" "$consumer" "default consumer name"
stop_daemon
n=0
while IFS= read -r line; do
	n=$((n + 1))
	jq -e 'type == "object" and (.ts | test("^[0-9-]+T[0-9:.]+Z$"))
		and (.level | IN("error","warning","info","debug"))
		and (.src | type == "string") and (.msg | type == "string")' \
		<<<"$line" >/dev/null || fail "not a JSON log line: $line"
done <"$DAEMON_LOG"
assert_ge 5 "$n" "JSON log lines"
grep -q SECRET-BODY-MARKER "$DAEMON_LOG" && fail "a message body shows in the log"
jq -e -s 'map(select(.task == "add" and ((.msg_id // "") | test("^[0-9]+-[0-9]+$"))
	and (.msg | test("rejected")))) | length == 1' "$DAEMON_LOG" >/dev/null ||
	fail "the rejection is not logged with task and msg_id fields"

# 2. shutdown_timeout: a run past it is abandoned, exit status 1, and the
# message is left pending for redelivery
conf 1s
start_daemon "$CONF"
wait_ping
id=$(rcall XADD q.sleep '*' body '{"ms":6000}')
wait_until "[[ \$(metric taskmill_pool_busy '') == 1 ]]" 10
rc=0
stop_daemon 10 || rc=$?
assert_eq 1 "$rc" "exit status past shutdown_timeout"
assert_le 4000 "$DAEMON_STOP_MS" "ms to stop with a 1 s shutdown_timeout"
assert_eq 1 "$(xpending q.sleep)" "the abandoned message is still pending"

# 3. a second signal exits at once with status 1
conf 30s
rcall XADD q.sleep '*' body '{"ms":6000}' >/dev/null
# The second signal _exits from the signal thread on purpose, while the
# main thread is still stopping: threads that ended are not joined then.
# ThreadSanitizer would call them leaks; for this daemon only, it is told
# not to. Its exit also takes longer under ThreadSanitizer.
exit_ms=1500
saved_tsan=${TSAN_OPTIONS-}
if [[ $TM_BUILD == *build-tsan ]]; then
	export TSAN_OPTIONS=${TSAN_OPTIONS:+$TSAN_OPTIONS:}report_thread_leaks=0
	exit_ms=5000
fi
start_daemon "$CONF"
[[ $TM_BUILD == *build-tsan ]] && export TSAN_OPTIONS=$saved_tsan
wait_ping
wait_until "[[ \$(metric taskmill_pool_busy '') -ge 1 ]]" 10
kill -TERM "$DAEMON_PID"
wait_until "grep -q 'SIGTERM: stopping intake' $DAEMON_LOG" 5
rc=0
stop_daemon 3 || rc=$?
assert_eq 1 "$rc" "exit status after a second signal"
assert_le "$exit_ms" "$DAEMON_STOP_MS" "ms to exit after the second signal"
