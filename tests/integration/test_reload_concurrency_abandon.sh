# A run a reload gave up on (the old configuration's drain reached
# shutdown_timeout, the call ignores should_stop()) no longer takes the
# task's concurrency: with concurrency 1, the new configuration runs a
# message while the abandoned call is still in the plugin. The abandoned
# message is left to be delivered again.
PLUG=$TEST_DIR/plugins
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
conf() { # TIMEOUT
	cat >"$CONF" <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: thread, size: 2 }
plugin_dir: $TM_BUILD/test-plugins
http: { listen: 127.0.0.1:$HTTP_PORT }
shutdown_timeout: 1s
log: { level: debug }
tasks:
  s: { plugin: stubborn.so, queue: q.s, concurrency: 1, timeout: $1, config: { path: $JOURNAL } }
YAML
}
conf 60s
start_daemon "$CONF"
wait_ping
long=$(rcall XADD q.s '*' body '{"ms":15000}')
wait_metric taskmill_tasks_inflight 'task="s"' 1 10
conf 50s
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 15
wait_until "grep -q 'configuration 1 retired' $DAEMON_LOG" 15
grep -q 'shutdown_timeout of 1000 ms reached' "$DAEMON_LOG" ||
	fail "the old configuration's drain did not time out"
short=$(rcall XADD q.s '*' body '{"ms":50}')
wait_metric taskmill_tasks_total 'task="s",outcome="success"' 1 12
grep -q " $short\$" "$JOURNAL" || fail "the short run is not in the journal"
grep -q " $long\$" "$JOURNAL" &&
	fail "the abandoned call returned before the short run: nothing shown"
# let the abandoned call return before the stop
wait_until "grep -q ' $long\$' $JOURNAL" 30
daemon_alive || fail "daemon died"
stop_daemon || true
