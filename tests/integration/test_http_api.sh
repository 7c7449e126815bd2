# The admin API under /api/v1/ on Redis: every route, every error status,
# the token rules (401 without, 403 with a wrong one; without a token
# configured read-only and no message bodies), dead letters listed newest
# first with their bodies, replayed and purged one and all, messages
# published and validated,
# delayed messages (?delay=, ?at=) kept in the scheduled set until due and
# a bad or too long delay refused; and a hung broker (its path
# blackholed) keeps an API call waiting while /ping and /metrics still
# answer at once, until the call is answered 504.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
need_tools jq curl

TOKEN='api-T0ken/with=odd.chars'
export TM_TEST_HTTP_TOKEN=$TOKEN
AUTH=(-H "Authorization: Bearer $TOKEN")
TASKS=$(
	cat <<YAML
tasks:
  add: { plugin: add.so, queue: q.api.add, on_error: reject, max_payload: 64 }
  rej: { plugin: fail.so, queue: q.api.rej, on_error: reject }
YAML
)

# expect_headers WHAT: the last answer carries the security headers.
expect_headers() {
	assert_match "default-src 'none'" "$(resp_header Content-Security-Policy)" "$1: Content-Security-Policy"
	assert_match "frame-ancestors 'none'" "$(resp_header Content-Security-Policy)" "$1: Content-Security-Policy"
	assert_eq nosniff "$(resp_header X-Content-Type-Options)" "$1: X-Content-Type-Options"
	assert_eq DENY "$(resp_header X-Frame-Options)" "$1: X-Frame-Options"
	assert_match '^application/json' "$(resp_header Content-Type)" "$1: Content-Type"
}

# ---- 1: without http.token the API reads, and refuses every write
CONF=$TEST_DIR/open.yaml
write_http_config "$CONF" <<<"$TASKS"
start_daemon "$CONF"
wait_ping

expect_code 200 /api/v1/tasks
expect_headers "GET /api/v1/tasks"
expect_json '.tasks | length == 2' "two tasks"
expect_json '[.tasks[].name] == ["add", "rej"]' "task names in config order"
expect_json '.tasks[0].queue == "q.api.add" and .tasks[0].limits.max_payload == 64 and .tasks[0].limits.prefetch == 16' "add's queue and limits"
expect_json '.tasks[0] | has("rate_1s") and has("rate_60s") and has("p50_ms") and has("p99_ms") and has("inflight") and has("circuit") and has("outcomes") and has("queue_depth") and has("pending") and has("dead_letters")' "per task figures"
expect_json '.broker.kind == "redis" and .broker.connected == true and .pool.kind == "thread" and .writable == false' "broker, pool, read-only"
# no message bodies without a token
expect_code 403 /api/v1/tasks/rej/dead-letters
expect_json '.error | test("http.token")' "dead letters refused naming http.token"

set -f # the paths below hold a "?"
for w in "-X POST /api/v1/tasks/add/messages" \
	"-X POST /api/v1/tasks/add/messages?delay=5s" \
	"-X POST /api/v1/tasks/rej/dead-letters/replay" \
	"-X POST /api/v1/tasks/rej/dead-letters/1-1/replay" \
	"-X DELETE /api/v1/tasks/rej/dead-letters" \
	"-X DELETE /api/v1/tasks/rej/dead-letters/1-1"; do
	# shellcheck disable=SC2086 # method and path, split on purpose
	expect_code 403 -d '{"a":1,"b":2}' $w
	expect_headers "$w"
	expect_json '.error | test("http.token")' "$w refused naming http.token"
done
set +f
assert_eq 0 "$(xlen q.api.add)" "nothing published by a refused write"

# routes and arguments
expect_code 404 /api/v1/nothing
expect_json '.error == "not found"' "unknown path"
expect_code 404 /api/v1/tasks/nope/dead-letters
expect_json '.error | test("nope")' "unknown task named"
expect_code 404 /api/v1/tasks/add/other
expect_code 404 /api/v2/tasks
expect_code 405 -X POST /api/v1/tasks
assert_match GET "$(resp_header Allow)" "Allow of /api/v1/tasks"
expect_code 405 -X PUT /api/v1/tasks/add/dead-letters
expect_code 405 /api/v1/tasks/add/messages
expect_code 405 -X GET /api/v1/tasks/add/dead-letters/replay
for id in abc 1 1-x -1 123456789012345678901-1; do
	expect_code 400 -X DELETE "/api/v1/tasks/add/dead-letters/$id"
	expect_json '.error | test("id")' "id '$id' refused"
done
stop_daemon

# ---- 2: with http.token
CONF=$TEST_DIR/token.yaml
write_http_config "$CONF" token='${TM_TEST_HTTP_TOKEN}' <<<"$TASKS"
start_daemon "$CONF"
wait_ping

expect_code 401 /api/v1/tasks
assert_match '^Bearer realm="taskmill"$' "$(resp_header WWW-Authenticate)" "WWW-Authenticate"
expect_json '.error == "unauthorized"' "401 body"
expect_code 403 -H "Authorization: Bearer wrong" /api/v1/tasks
expect_json '.error == "wrong token"' "403 body"
expect_code 403 -H "Authorization: Bearer ${TOKEN}x" -X POST -d '{"a":1,"b":2}' /api/v1/tasks/add/messages
expect_code 401 -X DELETE /api/v1/tasks/rej/dead-letters
expect_code 401 /api/v1/tasks/nope/dead-letters
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json '. == []' "no dead letters yet"
for l in 0 1001 abc -1 '5%20'; do
	expect_code 400 "${AUTH[@]}" "/api/v1/tasks/add/dead-letters?limit=$l"
	expect_json '.error | test("limit")' "limit=$l refused"
done
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/add/dead-letters?limit=1000"
expect_code 200 "${AUTH[@]}" /api/v1/tasks
expect_json '.writable == true' "writable with a token"

# publish
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":2,"b":3}' /api/v1/tasks/add/messages
expect_headers "POST messages"
id=$(jqr .id)
assert_match '^[0-9]+-[0-9]+$' "$id" "id of the published message"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 30
assert_eq '{"a":2,"b":3}' "$(xfield q.api.add "$id" body)" "body published as sent"
for bad in '' '{"a":' '[1,2]' '"text"' $'{"a":"\xff"}'; do
	expect_code 400 "${AUTH[@]}" -X POST --data-binary "$bad" /api/v1/tasks/add/messages
	expect_json '.error | test("body")' "body '$bad' refused"
done
big=$(printf '{"a":1,"b":2,"pad":"%070d"}' 0)
expect_code 413 "${AUTH[@]}" -X POST -d "$big" /api/v1/tasks/add/messages
expect_json '.error | test("max_payload")' "over max_payload"
expect_code 404 "${AUTH[@]}" -X POST -d '{}' /api/v1/tasks/nope/messages
assert_eq 1 "$(xlen q.api.add)" "only the valid message was published"

# delayed: ?delay= and ?at= wait in the scheduled set and run when due
start=$(now_ms)
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":5,"b":5}' '/api/v1/tasks/add/messages?delay=5s'
expect_json '.id | length > 0' "id of the delayed message"
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":6,"b":6}' "/api/v1/tasks/add/messages?at=$((start + 5000))"
assert_eq 2 "$(rcall ZCARD q.api.add.scheduled)" "delayed messages wait in the scheduled set"
assert_match '"a":5' "$(rcall ZRANGE q.api.add.scheduled 0 -1)" "the delayed body in the scheduled set"
assert_eq 1 "$(xlen q.api.add)" "delayed messages are not in the stream before their time"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 3 30
took=$(($(now_ms) - start))
assert_ge 4900 "$took" "the 5 s delay was kept"
assert_eq 0 "$(rcall ZCARD q.api.add.scheduled)" "the scheduled set after both ran"
for q in delay=abc delay=5x delay=-1s delay=1d delay= delay=1.s at=tomorrow \
	'delay=1s&at=1' delay=721h "at=$((start + 31 * 86400000))"; do
	expect_code 400 "${AUTH[@]}" -X POST -d '{"a":1,"b":1}' "/api/v1/tasks/add/messages?$q"
	expect_json '.error | test("delay|at")' "'$q' refused"
done
expect_code 400 "${AUTH[@]}" -X POST -d '{"a":1,"b":1}' '/api/v1/tasks/add/messages?delay=721h'
expect_json '.error | test("30 days")' "a delay over 30 days refused as such"
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":7,"b":7}' '/api/v1/tasks/add/messages?delay=720h'
assert_eq 1 "$(rcall ZCARD q.api.add.scheduled)" "a delay of 30 days accepted"
rcall DEL q.api.add.scheduled >/dev/null
assert_eq 3 "$(xlen q.api.add)" "nothing published by a refused delay"

# dead letters: four rejected messages
for n in 1 2 3 4; do
	expect_code 201 "${AUTH[@]}" -X POST -d "{\"mode\":\"reject\",\"n\":$n}" /api/v1/tasks/rej/messages
done
wait_metric taskmill_dead_letter_total 'task="rej"' 4 30
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters?limit=3"
expect_headers "GET dead-letters"
expect_json 'length == 3' "limit=3"
expect_json '[.[].body | fromjson | .n] == [4, 3, 2]' "newest first, bodies as JSON text"
expect_json '.[0] | (.id | test("^[0-9]+-[0-9]+$")) and (.origin_id | test("^[0-9]+-[0-9]+$")) and .attempts == 1 and (.failed_at | test("^20[0-9][0-9]-")) and (.error | length > 0)' "entry fields"
id4=$(jqr '.[0].id')
id3=$(jqr '.[1].id')
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json 'length == 4' "default limit lists all four"

# replay one: it runs again (and is dead-lettered again)
expect_code 200 "${AUTH[@]}" -X POST "/api/v1/tasks/rej/dead-letters/$id4/replay"
expect_json '.replayed == 1' "replay one"
wait_metric taskmill_dead_letter_total 'task="rej"' 5 30
# purge one
expect_code 200 "${AUTH[@]}" -X DELETE "/api/v1/tasks/rej/dead-letters/$id3"
expect_json '.purged == 1' "purge one"
expect_code 404 "${AUTH[@]}" -X DELETE "/api/v1/tasks/rej/dead-letters/$id3"
expect_json '.error | test("no dead letter")' "purged id is gone"
expect_code 404 "${AUTH[@]}" -X POST "/api/v1/tasks/rej/dead-letters/1-1/replay"
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json 'length == 3 and ([.[].body | fromjson | .n] | sort) == [1, 2, 4]' "after replay one and purge one"
# replay all, then purge all
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/rej/dead-letters/replay
expect_json '.replayed == 3' "replay all"
wait_metric taskmill_dead_letter_total 'task="rej"' 8 30
expect_code 200 "${AUTH[@]}" -X DELETE /api/v1/tasks/rej/dead-letters
expect_json '.purged == 3' "purge all"
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json '. == []' "nothing left"
# the refresher's depths show in /api/v1/tasks within a few seconds
wait_until "curl -sf -m 5 -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:$HTTP_PORT/api/v1/tasks | jq -e '.tasks[1].dead_letters == 0 and .tasks[0].queue_depth == 0'" 20
stop_daemon

# ---- 3: a hung broker stalls neither /ping nor /metrics
fault_proxy_start R "$REDIS_PORT"
CONF=$TEST_DIR/hung.yaml
write_http_config "$CONF" token='${TM_TEST_HTTP_TOKEN}' <<<"$TASKS"
sed -i "s|^broker: .*|broker: { url: \"redis://127.0.0.1:$FAULT_PORT_R/0\" }|" "$CONF"
start_daemon "$CONF"
wait_ping
fault_proxy R "blackhole both"
# two calls: the first waits for the broker's own timeouts (502) or the
# API's deadline (504); the second, queued behind it, for the deadline
start=$(now_ms)
hung_call() {
	curl -s -m 60 -o "$TEST_DIR/hung.$1.body" -w '%{http_code}' "${AUTH[@]}" \
		"http://127.0.0.1:$HTTP_PORT/api/v1/tasks/rej/dead-letters" \
		>"$TEST_DIR/hung.$1.code" 2>/dev/null
}
hung_call 1 &
hung1=$!
tm_on_exit "kill $hung1 2>/dev/null"
sleep 0.5
hung_call 2 &
hung2=$!
tm_on_exit "kill $hung2 2>/dev/null"
sleep 1
for ((i = 0; i < 5; i++)); do
	kill -0 "$hung1" 2>/dev/null || break
	assert_match '^(200|503)$' "$(http_code /ping)" "/ping while an API call waits on the broker"
	assert_eq 200 "$(http_code /metrics)" "/metrics while an API call waits on the broker"
	assert_eq 200 "$(http_code /healthz)" "/healthz while an API call waits on the broker"
	sleep 1
done
wait "$hung1" || true
took=$(($(now_ms) - start))
code=$(cat "$TEST_DIR/hung.1.code")
assert_match '^(502|504)$' "$code" "the API call on a hung broker ($(cat "$TEST_DIR/hung.1.body"))"
note "the API call on the hung broker answered $code after ${took} ms"
assert_ge 2000 "$took" "the API call waited for the broker"
wait "$hung2" || true
took=$(($(now_ms) - start))
assert_eq 504 "$(cat "$TEST_DIR/hung.2.code")" "the API call queued behind it ($(cat "$TEST_DIR/hung.2.body"))"
jq -e '.error | test("in time")' "$TEST_DIR/hung.2.body" >/dev/null ||
	fail "504 body: $(cat "$TEST_DIR/hung.2.body")"
note "the queued call answered 504 after ${took} ms"
fault_proxy R pass
wait_ping "$HTTP_PORT" 40
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
if grep -qF "$TOKEN" "$DAEMON_LOG"; then
	fail "the token shows in the daemon log"
fi
