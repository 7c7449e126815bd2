# A burst of HTTP while tasks run: 3000 requests over every endpoint from
# 16 parallel clients, plus malformed raw requests over plain sockets,
# while 2000 noop messages are published and processed. Every request gets
# an answer, every message succeeds, nothing is left pending, and the
# daemon stays ready.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq nc xargs

N=2000
REQUESTS=3000
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 log_level=info <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop, prefetch: 64 }
  add: { plugin: add.so, queue: q.add }
YAML
start_daemon "$CONF"
wait_ping

# ---- the request list: every endpoint, good and bad
base="http://127.0.0.1:$HTTP_PORT"
paths=(/ping /healthz /metrics /status /asyncapi.json /nope /ping?x=1)
: >"$TEST_DIR/urls"
for ((i = 0; i < REQUESTS; i++)); do
	printf -- '-o /dev/null %s%s\n' "$base" "${paths[i % ${#paths[@]}]}"
done >"$TEST_DIR/urls"

# 16 clients at once, 50 requests per curl process
(
	xargs -P 16 -n 150 curl -s -m 20 -w '%{http_code}\n' \
		<"$TEST_DIR/urls" >"$TEST_DIR/codes" 2>/dev/null || true
) &
BURST_PID=$!
tmh_on_exit "kill $BURST_PID 2>/dev/null || true"

# ---- malformed requests over raw sockets, in parallel with the burst
raw_round() {
	local r=$1
	printf 'garbage\r\n\r\n' | raw_send "garbage.$r"
	printf '\r\n\r\n\r\n' | raw_send "blank.$r"
	printf 'GET /ping HTTP/1.0\r\n\r\n' | raw_send "http10.$r"
	printf 'GET /ping HTTP/9.9\r\nHost: x\r\n\r\n' | raw_send "badversion.$r"
	printf 'GET /ping\r\n\r\n' | raw_send "noversion.$r"
	printf 'GET  HTTP/1.1\r\nHost: x\r\n\r\n' | raw_send "nopath.$r"
	printf 'GET /ping HTTP/1.1\r\nHost: x\r\nX-Broken-Header\r\n\r\n' | raw_send "badheader.$r"
	printf 'GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n' "$(head -c 100000 /dev/zero | tr '\0' a)" | raw_send "bigheader.$r"
	printf 'POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nshort' | raw_send "shortbody.$r"
	printf 'GET /status HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot chunked\r\n' | raw_send "badchunk.$r"
	printf 'GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n' | raw_send "negative.$r"
	printf 'GET /pi\0ng HTTP/1.1\r\nHost: x\r\n\r\n' | raw_send "nul.$r"
	printf 'GET /%%ff%%00%%2e%%2e/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n' | raw_send "traversal.$r"
	head -c 65536 /dev/urandom | raw_send "noise.$r"
	printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n' | raw_send "unfinished.$r"
	: | raw_send "empty.$r"
}
(for r in 1 2 3; do raw_round "$r"; done) &
RAW_PID=$!
tmh_on_exit "kill $RAW_PID 2>/dev/null || true"

# ---- the work, published while the burst runs
for chunk in 1 2 3 4; do
	xadd_bulk q.noop $((N / 4)) "{\"chunk\":$chunk,\"n\":%d}"
done
emit "$CONF" add '{"a":20,"b":22}' >/dev/null

wait "$RAW_PID" || true
# the burst is bounded by curl's own timeouts; wait for it a bounded time
deadline=$(($(now_ms) + 90000))
while kill -0 "$BURST_PID" 2>/dev/null; do
	(($(now_ms) < deadline)) || fail "the request burst did not finish within 90 s"
	sleep 0.2
done
wait "$BURST_PID" || true

# ---- every request got an answer, with the right code
total=$(wc -l <"$TEST_DIR/codes")
assert_eq "$REQUESTS" "$total" "answers recorded"
bad=$(grep -cvE '^(200|404)$' "$TEST_DIR/codes" || true)
if ((bad > 0)); then
	sort "$TEST_DIR/codes" | uniq -c >&2
	fail "$bad of $REQUESTS requests got no answer or an unexpected code"
fi
assert_eq $((REQUESTS / ${#paths[@]} + (REQUESTS % ${#paths[@]} > 5 ? 1 : 0))) \
	"$(grep -c '^404$' "$TEST_DIR/codes")" "404 answers (/nope)"
grep -q '^HTTP/1\.[01] 200' "$TEST_DIR/raw.http10.1.out" || fail "an HTTP/1.0 request was not answered 200"
# malformed requests get a 4xx/5xx or a closed connection, never a 200
for f in garbage blank badversion noversion nopath badheader bigheader noise \
	shortbody negative; do
	if grep -q '^HTTP/1\.[01] 2' "$TEST_DIR/raw.$f.1.out"; then
		fail "malformed request '$f' was answered $(head -n 1 "$TEST_DIR/raw.$f.1.out")"
	fi
done

# ---- every task ran, nothing is left pending, the daemon is fine
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N" 60
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 20
for outcome in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"noop\",outcome=\"$outcome\"")" "noop $outcome"
done
wait_until '[[ $(xpending q.noop) == 0 ]]' 15
assert_eq "$N 0 0" "$(stream_state q.noop)" "acked/pending/undelivered of q.noop"
daemon_alive || fail "the daemon died"
expect_code 200 /ping
expect_code 200 /healthz
expect_code 200 /status
expect_json '.tasks.noop.outcomes.success == 2000' "noop successes in /status"
expect_code 200 /metrics

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
