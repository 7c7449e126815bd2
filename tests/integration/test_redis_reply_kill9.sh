# A request survives a daemon's kill -9 between its run and its
# acknowledgement: it stays pending, unanswered; the daemon restarted
# (same instance) runs it again and answers it, so the requester, waiting
# all along on its reply stream, gets its answer (at least once).
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
$PY -c 'import redis' 2>/dev/null || fail "python3-redis is not installed"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" instance=rk9 <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.rk9 }
YAML

start_daemon "$CONF"
wait_ping

# the requester: publishes, then waits up to 60 s on its reply stream
ANSWER=$TEST_DIR/answer.json
$PY - "$REDIS_PORT" >"$ANSWER" 2>"$TEST_DIR/requester.err" <<'PY' &
import json, sys, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), decode_responses=True)
rid = r.xadd("q.rk9", {"body": '{"ms":4000}', "reply_to": "rk9.replies",
                       "correlation_id": "k9"})
got = r.xread({"rk9.replies": "0-0"}, count=10, block=60000)
if not got:
    sys.exit("no answer within 60 s")
f = got[0][1][0][1]
print(json.dumps({"rid": rid, "f": f}))
PY
REQ_PID=$!
tm_on_exit "kill $REQ_PID 2>/dev/null || true"

# kill -9 while the request runs
wait_metric taskmill_pool_busy '' 1 20
assert_eq 1 "$(xpending q.rk9)" "pending while it runs"
stop_daemon 10 KILL || true
assert_eq 0 "$(xlen rk9.replies)" "answers after the kill"
assert_eq 1 "$(xpending q.rk9)" "pending after the kill"

start_daemon "$CONF"
wait_ping
rc=0
wait "$REQ_PID" || rc=$?
assert_eq 0 "$rc" "requester exit status: $(cat "$TEST_DIR/requester.err")"
ans=$(cat "$ANSWER")
note "answer: $ans"
assert_eq success "$(jq -r .f.outcome <<<"$ans")" "outcome of the answer"
assert_eq 2 "$(jq -r .f.attempts <<<"$ans")" "attempts of the answer (run again)"
assert_eq k9 "$(jq -r .f.correlation_id <<<"$ans")" "correlation id of the answer"
assert_eq "$(jq -r .rid <<<"$ans")" "$(jq -r .f.in_reply_to <<<"$ans")" "in_reply_to"
wait_until '[[ $(xpending q.rk9) == 0 ]]' 10
assert_eq 1 "$(xlen rk9.replies)" "answers in all"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
