# A producer chooses reply_to, so the daemon writes an answer only to a
# key that does not exist or is a reply stream it created (no consumer
# groups, an expiry, its newest entry an answer: first field
# taskmill_reply). Requests whose reply_to names
#   (a) another task's queue, with a backlog and a consumer group,
#   (b) the request's own queue,
#   (c) a dead-letter stream,
#   (d) a plain string key,
#   (e) a stream without expiry,
#   (f) a stream with an expiry whose entries are not answers,
#   (g) a hash,
#   (h) the dead-letter stream the same request is dead-lettered to,
# are settled as usual (acknowledged, or dead-lettered), nothing is added
# to the key and its expiry is left alone, also once reply_ttl has passed;
# each refusal is logged with why and counted in
# taskmill_replies_refused_total{task}. A flood of such requests is
# counted whole and logged at most 8 lines per task per 10 s. A new
# reply_to gets its answer with an expiry, and so does a second request
# to that reply stream (another requester's: allowed).
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: q.rr, reply_ttl: 2s }
  fail:
    plugin: fail.so
    queue: q.rrfail
    max_retries: 0
    reply_ttl: 2s
  flood: { plugin: add.so, queue: q.flood, reply_ttl: 2s }
YAML

# (a) another task's queue: a backlog of 3 and a group, nobody reading it
for i in 1 2 3; do
	rcall XADD q.other '*' body "{\"n\":$i}" >/dev/null
done
rcall XGROUP CREATE q.other grp 0 >/dev/null
# (d) a string, (e) a stream without expiry, (f) a stream with an expiry
# that taskmill did not write, (g) a hash
rcall SET my.str keep >/dev/null
rcall XADD my.log '*' line one >/dev/null
rcall XADD my.log '*' line two >/dev/null
rcall XADD my.cache '*' v 1 >/dev/null
rcall PEXPIRE my.cache 600000 >/dev/null
rcall HSET my.hash f v >/dev/null

start_daemon "$CONF"
wait_ping

# (c) a real dead-letter stream: a failing request dead-lettered at once
rcall XADD q.rrfail '*' body '{"mode":"error"}' >/dev/null
wait_until '[[ $(xlen q.rrfail.dlq) == 1 ]]' 10

# the queues as they are before the requests (q.rr itself grows by them)
other_groups=$(rcall XINFO GROUPS q.other | paste -sd ' ')

req() {
	rcall XADD q.rr '*' body '{"a":1,"b":1}' reply_to "$1" \
		correlation_id "c-$1" >/dev/null
}
for k in q.other q.rr q.rrfail.dlq my.str my.log my.cache my.hash; do
	req "$k"
done
# (h) a request dead-lettered to the stream it names as reply_to
rcall XADD q.rrfail '*' body '{"mode":"error"}' reply_to q.rrfail.dlq >/dev/null
# a good one, and a second answer to the same (now existing) reply stream
req my.ok
wait_until '[[ $(xlen my.ok) == 1 ]]' 10
req my.ok
wait_until '[[ $(xlen my.ok) == 2 ]]' 10

wait_metric taskmill_tasks_total 'task="add",outcome="success"' 9 20
wait_until '[[ $(xpending q.rr) == 0 && $(xpending q.rrfail) == 0 ]]' 20
assert_eq 2 "$(xlen q.rrfail.dlq)" "dead letters (the second one's reply_to was its own dead-letter stream)"

# the answers that were written: marker first, with an expiry
for id in $(xids my.ok); do
	assert_eq add "$(xfield my.ok "$id" taskmill_reply)" "marker of answer $id"
	assert_eq success "$(xfield my.ok "$id" outcome)" "outcome of answer $id"
	assert_eq c-my.ok "$(xfield my.ok "$id" correlation_id)" "correlation id of answer $id"
done
ttl=$(rcall PTTL my.ok)
((ttl > 0 && ttl <= 2000)) || fail "PTTL of my.ok: $ttl"

# once reply_ttl (2 s) has passed, every refused key is as it was
sleep 3
assert_eq 1 "$(rcall EXISTS q.other)" "q.other exists"
assert_eq 3 "$(xlen q.other)" "q.other's backlog"
assert_eq "$other_groups" "$(rcall XINFO GROUPS q.other | paste -sd ' ')" "q.other's group"
assert_eq -1 "$(rcall PTTL q.other)" "PTTL of q.other"
assert_eq 1 "$(rcall EXISTS q.rr)" "q.rr exists"
assert_eq -1 "$(rcall PTTL q.rr)" "PTTL of q.rr"
assert_eq 9 "$(xlen q.rr)" "entries of q.rr (the requests only)"
assert_eq -1 "$(rcall PTTL q.rrfail.dlq)" "PTTL of the dead-letter stream"
assert_eq 2 "$(xlen q.rrfail.dlq)" "entries of the dead-letter stream"
assert_eq keep "$(rcall GET my.str)" "my.str"
assert_eq -1 "$(rcall PTTL my.str)" "PTTL of my.str"
assert_eq 2 "$(xlen my.log)" "entries of my.log"
assert_eq -1 "$(rcall PTTL my.log)" "PTTL of my.log"
assert_eq 1 "$(xlen my.cache)" "entries of my.cache"
ttl=$(rcall PTTL my.cache)
((ttl > 590000)) || fail "PTTL of my.cache changed: $ttl"
assert_eq v "$(rcall HGET my.hash f)" "my.hash"
assert_eq -1 "$(rcall PTTL my.hash)" "PTTL of my.hash"
assert_eq 0 "$(rcall EXISTS my.ok)" "my.ok expired after reply_ttl"
# the daemon still reads its queue (its group was never touched)
assert_eq 0 "$(grep -c "group 'taskmill' is gone" "$DAEMON_LOG" || true)" "groups made again"

# every refusal counted and logged with why (8 and 1 are within the
# burst)
wait_metric taskmill_replies_refused_total 'task="add"' 7 10
wait_metric taskmill_replies_refused_total 'task="fail"' 1 10
why() {
	grep -c "reply_to '$1' refused: $2.*; no answer written, the request is settled as usual" "$DAEMON_LOG" || true
}
assert_eq 1 "$(why q.other 'it is a stream with consumer groups')" "log line for a task's queue"
assert_eq 1 "$(why q.rr 'it is a stream with consumer groups')" "log line for the own queue"
assert_eq 2 "$(why q.rrfail.dlq 'it is a stream without expiry')" "log lines for the dead-letter stream"
assert_eq 1 "$(why my.str 'it holds a string, not a stream')" "log line for a string"
assert_eq 1 "$(why my.log 'it is a stream without expiry')" "log line for a stream without expiry"
assert_eq 1 "$(why my.cache 'its newest entry is not a taskmill answer')" "log line for a stream of other entries"
assert_eq 1 "$(why my.hash 'it holds a hash, not a stream')" "log line for a hash"

# a flood: every refusal counted, at most 8 lines per 10 s logged
t0=$(now_ms)
out=$(for i in $(seq 1 40); do
	resp XADD q.flood '*' body '{"a":1,"b":1}' reply_to my.str
done | rcli --pipe 2>&1)
[[ $out =~ errors:\ 0,\ replies:\ 40 ]] || fail "flood: $out"
wait_metric taskmill_replies_refused_total 'task="flood"' 40 30
windows=$((($(now_ms) - t0) / 10000 + 2))
lines=$(grep -c "flood.*reply_to 'my.str' refused" "$DAEMON_LOG" || true)
note "flood: 40 refusals, $lines log lines within $windows windows of 10 s"
((lines >= 8 && lines <= 8 * windows)) || fail "flood: $lines log lines"
assert_eq 0 "$(xpending q.flood)" "flood requests pending"
assert_eq keep "$(rcall GET my.str)" "my.str after the flood"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
