# Liveness through a half-open network path: the broker sits behind a TCP
# proxy that, mid-run, blackholes both directions (connections stay open,
# nothing passes, new ones are accepted and stay silent). /healthz stays
# 200 all along (the daemon's own loops wait in bounded broker calls),
# /ping turns 503; when the path passes again, /ping turns 200 and work
# resumes.
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
fault_proxy_start R "$REDIS_PORT"
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML
sed -i "s|^broker: .*|broker: { url: \"redis://127.0.0.1:$FAULT_PORT_R/0\" }|" "$CONF"
grep -q "$FAULT_PORT_R" "$CONF" || fail "broker line not rewritten"
start_daemon "$CONF"
wait_ping
rcall XADD q.noop '*' body '{"n":1}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 20

fault_proxy R "blackhole both"
ping_503=0
for ((i = 0; i < 25; i++)); do
	assert_eq 200 "$(http_code /healthz)" "/healthz after ${i}s of a blackholed path"
	[[ $(http_code /ping) == 503 ]] && ping_503=1
	daemon_alive || fail "daemon died with a blackholed path"
	sleep 1
done
assert_eq 1 "$ping_503" "/ping turned 503 while the path was blackholed"

fault_proxy R pass
wait_ping "$HTTP_PORT" 40
rcall XADD q.noop '*' body '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 2 30
assert_eq 200 "$(http_code /healthz)" "/healthz after the path passed again"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
