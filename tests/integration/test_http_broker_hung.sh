# /healthz is liveness: the daemon's own loops, never the broker. A broker
# that accepts connections and never answers (a hung Redis, a half-open
# network path; here a redis-server stopped with SIGSTOP, whose listening
# socket the kernel still completes connections on) keeps /ping at 503,
# while /healthz stays 200: restarting the daemon would cure nothing.
# 1. hung from the start, for 30 s; then it answers: the daemon subscribes
#    and works.
# 2. it hangs mid-run, for 25 s: /healthz 200, /ping 503; when it answers
#    again, work resumes.
PRIV_REDIS_PORT=$(free_port)
priv_redis_start
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML
sed -i "s|^broker: .*|broker: { url: \"redis://127.0.0.1:$PRIV_REDIS_PORT/0\" }|" "$CONF"
grep -q "$PRIV_REDIS_PORT" "$CONF" || fail "broker line not rewritten"

# hung_for SECONDS WHAT: sample both probes once a second
hung_for() {
	local i code
	for ((i = 0; i < $1; i++)); do
		code=$(http_code /healthz)
		assert_eq 200 "$code" "/healthz after ${i}s of a hung broker ($2)"
		daemon_alive || fail "daemon died with a hung broker ($2)"
		sleep 1
	done
}

# ---- 1. hung from the start
kill -STOP "$PRIV_REDIS_PID"
start_daemon "$CONF"
wait_until '[[ $(http_code /healthz) == 200 ]]' 10
hung_for 30 "from the start"
assert_eq 503 "$(http_code /ping)" "/ping with a hung broker"
kill -CONT "$PRIV_REDIS_PID"
wait_ping "$HTTP_PORT" 40
priv_rcli XADD q.noop '*' body '{"n":1}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 20

# ---- 2. hung mid-run
kill -STOP "$PRIV_REDIS_PID"
hung_for 25 "mid-run"
assert_eq 503 "$(http_code /ping)" "/ping with the broker hung mid-run"
kill -CONT "$PRIV_REDIS_PID"
wait_ping "$HTTP_PORT" 40
priv_rcli XADD q.noop '*' body '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 2 20
assert_eq 200 "$(http_code /healthz)" "/healthz after the broker came back"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
