# /ping is readiness, /healthz liveness: with the broker unreachable at
# start /healthz answers 200 and /ping 503 with a reason; once the broker
# comes up /ping turns 200; when it goes away /ping turns 503 again, and
# 200 after it returns. /status and /metrics keep answering throughout,
# and the broker URL never shows its password.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq promtool

PRIV_REDIS_PASS='pw-Secret-42'
PRIV_REDIS_PORT=$(free_port)
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML
sed -i "s|^broker: .*|broker: { url: \"redis://:$PRIV_REDIS_PASS@127.0.0.1:$PRIV_REDIS_PORT/0\" }|" "$CONF"
grep -q "$PRIV_REDIS_PORT" "$CONF" || fail "broker line not rewritten"

# ping_is CODE: /ping answers CODE now.
ping_is() {
	[[ $(http_code /ping) == "$1" ]]
}

start_daemon "$CONF"
wait_until '[[ $(http_code /healthz) == 200 ]]' 10

# ---- no broker yet
expect_code 503 /ping
expect_json '.status == "unavailable" and (.reason | type == "string" and length > 0)' "/ping 503 body"
# once the first attempt failed, the reason says why (not just "starting")
wait_until '[[ $(curl -s "http://127.0.0.1:$HTTP_PORT/ping" | jq -r .reason) == "broker unreachable: "* ]]' 10
note "ping reason before the first connection: $(curl -s "http://127.0.0.1:$HTTP_PORT/ping" | jq -r .reason)"
expect_code 200 /healthz
expect_code 200 /status
expect_json '.broker.connected == false' "broker not connected"
expect_json ".broker.url == \"redis://127.0.0.1:$PRIV_REDIS_PORT/0\"" "redacted broker URL"
if grep -qF "$PRIV_REDIS_PASS" "$RESP_BODY"; then
	fail "/status shows the broker password"
fi
expect_code 200 /metrics
assert_eq "" "$(promtool check metrics <"$RESP_BODY" 2>&1)" "promtool on /metrics with the broker down"
assert_eq 0 "$(metric taskmill_broker_up)" "taskmill_broker_up before the broker starts"
grep -q '^taskmill_queue_depth{' "$RESP_BODY" && fail "queue depth shown before it was ever read"
if grep -qF "$PRIV_REDIS_PASS" "$RESP_BODY"; then
	fail "/metrics shows the broker password"
fi
expect_code 200 /asyncapi.json
if grep -qF "$PRIV_REDIS_PASS" "$RESP_BODY"; then
	fail "/asyncapi.json shows the broker password"
fi

# ---- the broker comes up
priv_redis_start
wait_ping "$HTTP_PORT" 20
expect_code 200 /status
expect_json '.broker.connected == true' "broker connected"
priv_rcli XADD q.noop '*' body '{"n":1}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 15
wait_until 'has_sample "taskmill_queue_depth{task=\"noop\"} 0"' 10
wait_until 'has_sample "taskmill_queue_pending{task=\"noop\"} 0"' 10
wait_until 'has_sample "taskmill_dead_letter_depth{task=\"noop\"} 0"' 10

# ---- the broker goes away
priv_redis_stop
wait_until 'ping_is 503' 15
req /ping
expect_json '.status == "unavailable" and (.reason | length > 0)' "/ping 503 body after the loss"
note "ping reason while down: $(jqr .reason)"
expect_code 200 /healthz
expect_code 200 /status
expect_json '.broker.connected == false' "broker not connected after the loss"
expect_code 200 /metrics
assert_eq "" "$(promtool check metrics <"$RESP_BODY" 2>&1)" "promtool on /metrics after the loss"
# the last depths read are kept
grep -q '^taskmill_queue_depth{task="noop"} 0$' "$RESP_BODY" || fail "last queue depth not kept"

# ---- and comes back
priv_redis_start
wait_ping "$HTTP_PORT" 30
priv_rcli XADD q.noop '*' body '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 2 20
assert_ge 1 "$(metric taskmill_broker_reconnects_total)" "taskmill_broker_reconnects_total"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
if grep -qF "$PRIV_REDIS_PASS" "$DAEMON_LOG"; then
	fail "the broker password shows in the daemon log"
fi
