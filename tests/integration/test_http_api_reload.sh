# A SIGHUP reload does not wait for an admin API call under way: the API
# worker holds the configuration it runs on by a reference of its own,
# not by gen_lock, so the reload publishes the new configuration (its log
# line) while a slow broker call still runs; the call finishes its work
# on the replaced configuration, which is freed only once the call has
# ended (every dead letter replayed once; no use after free under ASan).
# The call is slow because the broker is: every chunk through the fault
# proxy between daemon and Redis waits 100 ms, and replaying N dead
# letters takes one round trip per TM_REDIS_REPLAY_CHUNK (100) of them:
# N is large enough that the replay takes ten round trips, several times
# what the reload's own trips through the proxy take.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
need_tools jq curl

TOKEN=reload-token
AUTH=(-H "Authorization: Bearer $TOKEN")
N=1000
Q=q.api.reload
fault_proxy_start R "$REDIS_PORT"
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" token="$TOKEN" pool_size=2 <<YAML
tasks:
  work: { plugin: noop.so, queue: $Q }
YAML
sed -i "s|^broker: .*|broker: { url: \"redis://127.0.0.1:$FAULT_PORT_R/0\" }|" "$CONF"
grep -q "$FAULT_PORT_R" "$CONF" || fail "broker line not rewritten"
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60

# N dead letters, written straight to Redis (not through the proxy)
rcli EVAL "for k = 1, tonumber(ARGV[1]) do
  redis.call('XADD', KEYS[1], '*', 'body', '{\"n\":' .. k .. '}',
    'task', 'work', 'error', 'test', 'attempts', '1')
end" 1 "$Q.dlq" "$N" >/dev/null
assert_eq "$N" "$(xlen "$Q.dlq")" "dead letters written"

fault_proxy R "delay 100"
curl -s -m 120 -o "$TEST_DIR/replay.body" -w '%{http_code}' "${AUTH[@]}" \
	-X POST "http://127.0.0.1:$HTTP_PORT/api/v1/tasks/work/dead-letters/replay" \
	>"$TEST_DIR/replay.code" 2>/dev/null &
REPLAY=$!
tm_on_exit "kill $REPLAY 2>/dev/null"
# the replay is under way once the first dead letters have moved
wait_until "(( \$(xlen '$Q.dlq') <= $N - 2 ))" 60
T0=$(now_ms)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' '$DAEMON_LOG'" 60
LEFT=$(xlen "$Q.dlq")
note "reloaded $(($(now_ms) - T0)) ms after SIGHUP, $LEFT of $N dead letters still to replay"
assert_ne 0 "$LEFT" "dead letters still to replay when the reload's line arrived (the reload did not wait for the API call)"
kill -0 "$REPLAY" 2>/dev/null ||
	fail "the API call ended before the reload's line arrived"

# the call finishes its work on the replaced configuration, which is
# freed only after that (the ASan build would report a use after free)
wait_until "(( \$(xlen '$Q.dlq') == 0 ))" 90
wait "$REPLAY" || true
code=$(cat "$TEST_DIR/replay.code")
note "the replay answered $code: $(cat "$TEST_DIR/replay.body")"
# answered by the API's deadline (504) on a very slow machine
if [[ $code == 200 ]]; then
	assert_eq "$N" "$(jq '.replayed' "$TEST_DIR/replay.body")" "dead letters replayed"
else
	assert_eq 504 "$code" "the replay's answer"
fi
fault_proxy R pass
wait_metric taskmill_tasks_total 'task="work",outcome="success"' "$N" 60
expect_code 200 "${AUTH[@]}" /api/v1/tasks/work/dead-letters
expect_json '. == []' "no dead letters left"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
