# Payloads stay behind http.token, and the Host header is checked against
# DNS rebinding. Without http.token the admin API serves aggregate figures
# only: every request that would return a message body (the dead-letter
# list, one dead letter) answers 403 naming http.token, and no answer
# carries a body. The console, /api/, /status and /asyncapi.json answer 421
# to a Host that is neither an IP literal, localhost nor a name of
# http.allowed_hosts (names compared without case, with or without a port;
# a request without Host, HTTP/1.0, is served); /ping, /healthz and
# /metrics answer any Host. A reload changes http.allowed_hosts; a bad
# list is refused at load with FILE:LINE:COL, exit 2. The Kubernetes
# example ships no sample Secret and does not start without its token.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl nc

Q=q.host.rej
SECRET='{"card":"4111-SECRET-BODY"}'
TASKS=$(
	cat <<YAML
tasks:
  rej: { plugin: fail.so, queue: $Q, on_error: reject }
YAML
)

# a dead letter whose body no tokenless answer may show
rcli XADD "$Q.dlq" '*' body "$SECRET" task rej error "test" attempts 1 >/dev/null
DLQ_ID=$(rcall XREVRANGE "$Q.dlq" + - COUNT 1 | awk 'NR == 1')
[[ $DLQ_ID =~ ^[0-9]+-[0-9]+$ ]] || fail "no dead-letter id ($DLQ_ID)"

# no_secret WHAT: the last answer does not carry the dead letter's body.
no_secret() {
	if grep -qF 4111-SECRET "$RESP_BODY"; then
		fail "$1: a message body answered without http.token"
	fi
}

# ---- 1: without http.token, aggregates only
CONF=$TEST_DIR/open.yaml
write_http_config "$CONF" <<<"$TASKS"
sed -i 's|^http: { listen: \(.*\) }$|http: { listen: \1, allowed_hosts: [taskmill.example.com, Ops.Example.Org] }|' "$CONF"
grep -q allowed_hosts "$CONF" || fail "no allowed_hosts line"
start_daemon "$CONF"
wait_ping

set -f # the paths below hold a "?"
for p in /api/v1/tasks/rej/dead-letters \
	"/api/v1/tasks/rej/dead-letters?limit=1000" \
	"/api/v1/tasks/rej/dead-letters?after=$DLQ_ID" \
	"/api/v1/tasks/rej/dead-letters/$DLQ_ID"; do
	expect_code 403 "$p"
	expect_json '.error | test("http.token")' "GET $p refused naming http.token"
	no_secret "GET $p"
	expect_code 403 -I "$p"
done
set +f
for p in /api/v1/tasks /api/v1/schedules /status /asyncapi.json; do
	expect_code 200 "$p"
	no_secret "GET $p"
done
expect_code 200 /api/v1/tasks
expect_json '.writable == false and .tasks[0].name == "rej"' "aggregates without a token"
# writes stay refused
expect_code 403 -X POST /api/v1/tasks/rej/dead-letters/replay
expect_json '.error | test("http.token")' "replay refused naming http.token"
assert_eq 1 "$(xlen "$Q.dlq")" "the dead letter is still there"

# ---- the Host header
for h in "127.0.0.1:$HTTP_PORT" 127.0.0.1 "localhost:$HTTP_PORT" LOCALHOST \
	localhost. "[::1]:$HTTP_PORT" "[::1]" "taskmill.example.com:$HTTP_PORT" \
	TaskMill.Example.COM ops.example.org "10.1.2.3:80"; do
	for p in / /console.js /api/v1/tasks /status /asyncapi.json; do
		expect_code 200 -H "Host: $h" "$p"
	done
done
for h in evil.example "evil.example:$HTTP_PORT" localhost.evil.example \
	127.0.0.1.nip.io "taskmill.example.com.evil.example" \
	"127.0.0.1:abc" "127.0.0.1:" "[::1" "[evil.example]:80" "::1" \
	"taskmill.example.com:80:80" 127.1; do
	for p in / /console.css /api/v1/tasks /api/v1/tasks/rej/dead-letters /status /asyncapi.json /api/v1/nothing; do
		expect_code 421 -H "Host: $h" "$p"
		expect_json '.error | test("Host") and test("http.allowed_hosts")' "Host $h on $p: 421 names allowed_hosts"
	done
	expect_code 421 -H "Host: $h" -X POST -d '{"a":1}' /api/v1/tasks/rej/messages
	# probes and the scraper answer any Host
	expect_code 200 -H "Host: $h" /ping
	expect_code 200 -H "Host: $h" /healthz
	expect_code 200 -H "Host: $h" /metrics
done
assert_eq 0 "$(xlen "$Q")" "nothing published through a foreign Host"

# an empty Host, and none at all (HTTP/1.0)
printf 'GET /api/v1/tasks HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n' | raw_send empty
assert_match '^HTTP/1.1 421' "$(head -1 "$TEST_DIR/raw.empty.out")" "an empty Host"
printf 'GET /api/v1/tasks HTTP/1.0\r\n\r\n' | raw_send none
assert_match '^HTTP/1.[01] 200' "$(head -1 "$TEST_DIR/raw.none.out")" "no Host (HTTP/1.0) is served"
printf 'GET /ping HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n' | raw_send probe
assert_match '^HTTP/1.1 200' "$(head -1 "$TEST_DIR/raw.probe.out")" "/ping with a foreign Host"

# ---- a reload changes http.allowed_hosts
sed -i 's|allowed_hosts: \[[^]]*\]|allowed_hosts: [other.example]|' "$CONF"
grep -q 'allowed_hosts: \[other.example\]' "$CONF" || fail "allowed_hosts not rewritten"
kill -HUP "$DAEMON_PID"
wait_until "[[ \$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Host: other.example' http://127.0.0.1:$HTTP_PORT/api/v1/tasks) == 200 ]]" 20
expect_code 421 -H "Host: taskmill.example.com" /api/v1/tasks
expect_code 200 -H "Host: other.example:$HTTP_PORT" /
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

# ---- 2: with http.token the bodies are served, the Host still checked
TOKEN=host-token
CONF=$TEST_DIR/token.yaml
write_http_config "$CONF" token="$TOKEN" <<<"$TASKS"
start_daemon "$CONF"
wait_ping
expect_code 200 -H "Authorization: Bearer $TOKEN" /api/v1/tasks/rej/dead-letters
expect_json '.[0].body | fromjson | .card == "4111-SECRET-BODY"' "the body with the token"
expect_code 200 -H "Authorization: Bearer $TOKEN" "/api/v1/tasks/rej/dead-letters/$DLQ_ID"
expect_json '.id == "'"$DLQ_ID"'" and .truncated == false' "one dead letter with the token"
expect_code 421 -H "Authorization: Bearer $TOKEN" -H "Host: evil.example" /api/v1/tasks/rej/dead-letters
no_secret "a foreign Host with the token"
expect_code 401 /api/v1/tasks/rej/dead-letters
stop_daemon

# ---- 3: a bad http.allowed_hosts is refused at load
bad_hosts() {
	local what=$1 value=$2 want=$3
	CONF=$TEST_DIR/bad.yaml
	write_http_config "$CONF" <<<"$TASKS"
	sed -i "s|^http: { listen: \\(.*\\) }\$|http:\\n  listen: \\1\\n  allowed_hosts: $value|" "$CONF"
	tm check -c "$CONF"
	assert_eq 2 "$TM_RC" "check with $what"
	assert_match "$CONF:6:[0-9]+: http.allowed_hosts.*$want" "$(cat "$TM_ERR")" "$what: FILE:LINE:COL and why"
}
bad_hosts "a scalar" "taskmill.example.com" "a list of host names"
bad_hosts "a port" "[ok.example, 'host.example:9999']" "not a host name"
bad_hosts "a scheme" "['https://host.example']" "not a host name"
bad_hosts "an empty name" "['']" "must not be empty"
bad_hosts "a wildcard" "['*.example.com']" "not a host name"
bad_hosts "a label over 63" "[$(printf 'a%.0s' {1..64}).example]" "not a host name"

# ---- 4: the Kubernetes example ships no sample secret, and its pods do
# not start without the token
K8S=$TM_SRCDIR/conf/kubernetes/taskmill.yaml
if grep -qE '^kind: Secret' "$K8S" || grep -qiE 'change-me' "$K8S"; then
	fail "conf/kubernetes/taskmill.yaml ships a sample Secret"
fi
awk '/taskmill\.yaml: \|/ { on = 1; next } on && /^[^ ]/ { on = 0 }
	on { sub(/^    /, ""); print }' "$K8S" >"$TEST_DIR/k8s.yaml"
echo pw >"$TEST_DIR/k8s.pw"
sed -i -e "s|^plugin_dir: [^ ]*|plugin_dir: $TM_PLUGINS|" \
	-e "s|password_file: .*|password_file: $TEST_DIR/k8s.pw|" "$TEST_DIR/k8s.yaml"
grep -q 'token: ${TASKMILL_HTTP_TOKEN} ' "$TEST_DIR/k8s.yaml" || fail "the example's http.token is not \${TASKMILL_HTTP_TOKEN} without a default"
unset TASKMILL_HTTP_TOKEN
POD_NAME=p tm check -c "$TEST_DIR/k8s.yaml"
assert_eq 2 "$TM_RC" "the Kubernetes example without TASKMILL_HTTP_TOKEN"
assert_match "k8s.yaml:[0-9]+:[0-9]+: http.token: environment variable 'TASKMILL_HTTP_TOKEN' is not set" "$(cat "$TM_ERR")" "why it does not start"
POD_NAME=p TASKMILL_HTTP_TOKEN=x tm check -c "$TEST_DIR/k8s.yaml"
assert_eq 0 "$TM_RC" "the Kubernetes example with the token (stderr: $(head -c 300 "$TM_ERR"))"
