# http.token: /status and /asyncapi.json need "Authorization: Bearer
# <token>" (401 with WWW-Authenticate otherwise); /ping, /healthz and
# /metrics stay open for probes and scrapers. The token comes from the
# environment (${VAR} in the config) and never shows in the log.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq

TOKEN='s3cr3t-T0ken.with/odd=chars'
export TM_TEST_HTTP_TOKEN=$TOKEN
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" token='${TM_TEST_HTTP_TOKEN}' <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML
start_daemon "$CONF"
wait_ping

for p in /status /asyncapi.json; do
	expect_code 401 "$p"
	assert_match '^Bearer realm="taskmill"$' "$(resp_header WWW-Authenticate)" "$p WWW-Authenticate without a token"
	expect_json '.error == "unauthorized"' "$p 401 body"
	expect_code 401 -H "Authorization: Bearer wrong" "$p"
	assert_match 'error="invalid_token"' "$(resp_header WWW-Authenticate)" "$p WWW-Authenticate with a wrong token"
	expect_code 401 -H "Authorization: Bearer ${TOKEN}x" "$p"
	expect_code 401 -H "Authorization: Bearer ${TOKEN%?}" "$p"
	expect_code 401 -H "Authorization: Bearer " "$p"
	expect_code 401 -H "Authorization: Basic $(printf 'u:%s' "$TOKEN" | base64 -w0)" "$p"
	expect_code 401 -H "Authorization: $TOKEN" "$p"
	expect_code 401 -I "$p"
	expect_code 200 -H "Authorization: Bearer $TOKEN" "$p"
	expect_json 'type == "object"' "$p with the token"
	expect_code 200 -H "authorization: bearer $TOKEN" "$p"
	expect_code 200 -I -H "Authorization: Bearer $TOKEN" "$p"
done
req -H "Authorization: Bearer $TOKEN" /status
expect_json '.tasks.noop.queue == "q.noop"' "/status with the token"

# probes and the scraper need no token
expect_code 200 /ping
expect_code 200 /healthz
expect_code 200 /metrics
# nor does an unknown path turn into 401
expect_code 404 /secret
expect_code 405 -X POST /status

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
if grep -qF "$TOKEN" "$DAEMON_LOG"; then
	fail "the token shows in the daemon log"
fi
