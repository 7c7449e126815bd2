# Redis request/reply. `taskmill emit --wait` adds the request with a
# reply stream of its own and a correlation id, prints the task's JSON
# result and deletes its reply stream; a task failure answers an error
# object (exit 1), no answer in time is exit 1 with a clear message. A raw
# redis-py requester with its own reply stream and correlation id gets
# the answer entry with every documented field, and the reply stream
# expires after reply_ttl. A retry answers nothing; the final outcome does.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
$PY -c 'import redis' 2>/dev/null || fail "python3-redis is not installed"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: q.rpc, reply_ttl: 30s }
  fail:
    plugin: fail.so
    queue: q.rpcfail
    max_retries: 1
    backoff: 100ms
YAML

# reply_keys: the reply streams emit --wait left behind.
reply_keys() {
	rcli --scan --pattern 'q.rpc.reply.*' | wc -l
}

# no daemon yet: nobody answers
tm emit -c "$CONF" add '{"a":1,"b":1}' --wait 1
assert_eq 1 "$TM_RC" "emit --wait exit status without a daemon"
grep -q "no reply from task 'add' within 1 s" "$TM_ERR" ||
	fail "emit --wait timeout message: $(cat "$TM_ERR")"
grep -q "stays queued and will run" "$TM_ERR" ||
	fail "emit --wait timeout message: $(cat "$TM_ERR")"
assert_eq "" "$(cat "$TM_OUT")" "emit --wait output on a timeout"
assert_eq 0 "$(reply_keys)" "reply streams left after the timeout"
tm emit -c "$CONF" add '{"a":1,"b":1}' --wait 0
assert_eq 2 "$TM_RC" "emit --wait 0 exit status"

start_daemon "$CONF"
wait_ping
# The request that timed out runs now: its answer goes to the deleted
# reply stream, which then expires after reply_ttl (30 s).
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 10
wait_until '[[ $(reply_keys) == 1 ]]' 10
late=$(rcli --scan --pattern 'q.rpc.reply.*')
ttl=$(rcall PTTL "$late")
((ttl > 0 && ttl <= 30000)) || fail "PTTL of the late answer's stream $late: $ttl"

tm emit -c "$CONF" add '{"a":2,"b":3}' --wait 10
assert_eq 0 "$TM_RC" "emit --wait exit status: $(cat "$TM_ERR")"
assert_eq '{"sum":5}' "$(cat "$TM_OUT")" "emit --wait output"
assert_eq 1 "$(reply_keys)" "reply streams left after an answer (the late one only)"

tm emit -c "$CONF" add '{"a":2}' --wait 10
assert_eq 1 "$TM_RC" "emit --wait exit status of a rejected request"
out=$(cat "$TM_OUT")
assert_eq rejected "$(jq -r .outcome <<<"$out")" "outcome in the error answer"
assert_eq 1 "$(jq -r .attempts <<<"$out")" "attempts in the error answer"
assert_eq add "$(jq -r .task <<<"$out")" "task in the error answer"
[[ $(jq -r .error <<<"$out") == *b* ]] || fail "error answer does not say what is wrong: $out"
grep -q "task 'add' failed" "$TM_ERR" || fail "emit --wait: no failure line: $(cat "$TM_ERR")"

# A raw requester: its own reply stream and correlation id, field by field.
read -r -d '' REQ <<'PY' || true
import json, sys, redis
port, queue, body, corr, ttl_max = sys.argv[1:6]
r = redis.Redis(host="127.0.0.1", port=int(port), decode_responses=True)
reply = "my.replies." + corr
rid = r.xadd(queue, {"body": body, "reply_to": reply, "correlation_id": corr})
got = r.xread({reply: "0-0"}, count=1, block=20000)
if not got:
    sys.exit("no answer within 20 s")
eid, f = got[0][1][0]
assert f["in_reply_to"] == rid, f
assert f["correlation_id"] == corr, f
ttl = r.pttl(reply)
assert 0 < ttl <= int(ttl_max), ttl
print(json.dumps({"outcome": f["outcome"], "attempts": f["attempts"],
                  "body": json.loads(f["body"]), "fields": sorted(f)}))
PY
ans=$($PY -c "$REQ" "$REDIS_PORT" q.rpc '{"a":40,"b":2}' corr-1 30000) ||
	fail "raw requester failed: $ans"
note "raw answer: $ans"
assert_eq success "$(jq -r .outcome <<<"$ans")" "raw answer outcome"
assert_eq 1 "$(jq -r .attempts <<<"$ans")" "raw answer attempts"
assert_eq 42 "$(jq -r .body.sum <<<"$ans")" "raw answer body"
assert_eq '["attempts","body","correlation_id","in_reply_to","outcome","taskmill_reply"]' \
	"$(jq -c .fields <<<"$ans")" "raw answer fields"

# A failing request is retried once (max_retries: 1), then dead-lettered:
# one answer, from the final attempt, expiring after the default
# reply_ttl (5 min).
ans=$($PY -c "$REQ" "$REDIS_PORT" q.rpcfail '{"mode":"error"}' corr-2 300000) ||
	fail "raw requester (failing task) failed: $ans"
note "raw answer: $ans"
assert_eq error "$(jq -r .outcome <<<"$ans")" "answer outcome after the retries"
assert_eq 2 "$(jq -r .attempts <<<"$ans")" "answer attempts after the retries"
assert_eq error "$(jq -r .body.outcome <<<"$ans")" "error object outcome"
assert_eq 1 "$(xlen my.replies.corr-2)" "answers of a retried request"
assert_eq 1 "$(xlen q.rpcfail.dlq)" "dead letters of the failing request"

# A request without correlation_id is answered without one.
id=$(rcall XADD q.rpc '*' body '{"a":1,"b":1}' reply_to my.replies.nocorr)
wait_until '[[ $(xlen my.replies.nocorr) == 1 ]]' 10
fields=$(rcall EVAL "local e = redis.call('XRANGE', KEYS[1], '-', '+')[1][2]
	local k = {}
	for i = 1, #e, 2 do k[#k + 1] = e[i] end
	table.sort(k)
	return table.concat(k, ',')" 1 my.replies.nocorr)
assert_eq "attempts,body,in_reply_to,outcome,taskmill_reply" "$fields" "fields without a correlation id"
assert_eq "taskmill_reply add" "$(rcall EVAL "local f = redis.call('XRANGE', KEYS[1], '-', '+')[1][2]
	return f[1] .. ' ' .. f[2]" 1 my.replies.nocorr)" "the answer's first field: the marker, the task's name"
assert_eq "$id" "$(rcall EVAL "return redis.call('XRANGE', KEYS[1], '-', '+')[1][2][10]" 1 my.replies.nocorr)" "in_reply_to"

# An invalid body is answered too (it never runs: 0 attempts).
rcall XADD q.rpc '*' body 'not json' reply_to my.replies.bad >/dev/null
wait_until '[[ $(xlen my.replies.bad) == 1 ]]' 10
bad=$(xids my.replies.bad)
assert_eq invalid "$(xfield my.replies.bad "$bad" outcome)" "outcome of an invalid request"
assert_eq 0 "$(xfield my.replies.bad "$bad" attempts)" "attempts of an invalid request"
assert_eq invalid "$(xfield my.replies.bad "$bad" body | jq -r .outcome)" "error object of an invalid request"

# A reply_to that is not a stream: the answer is refused and logged, the
# request is acknowledged all the same (test_redis_reply_refused.sh has
# every other kind of key).
rcall SET my.replies.str x >/dev/null
rcall XADD q.rpc '*' body '{"a":1,"b":1}' reply_to my.replies.str >/dev/null
wait_until "grep -q \"reply_to 'my.replies.str' refused: it holds a string\" $DAEMON_LOG" 10
wait_until '[[ $(xpending q.rpc) == 0 ]]' 10

assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(xpending q.rpc)" "pending in q.rpc after the stop"
