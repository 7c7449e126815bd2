# Deduplication on Redis (dedup_ttl > 0). The same dedup_key published 5
# times (one copy, then four after it succeeded) runs once: the four are
# acknowledged without running, outcome duplicate, and a request among
# them is answered with the first run's result. After dedup_ttl the key
# runs again. A failed run does not block the next copy. Copies read
# before any of them succeeded may all run, but only the first success
# is recorded: the others count as duplicates. Messages without a key are
# never deduplicated. DEDUP_POOL (thread) is the pool kind
# (test_dedup_fork.sh runs this with the fork pool).
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
: >"$JOURNAL"
write_config "$CONF" pool_kind="${DEDUP_POOL:-thread}" <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.dd
    dedup_ttl: 3s
    config: { path: $JOURNAL }
  add: { plugin: add.so, queue: q.ddadd, dedup_ttl: 1m }
YAML

runs() { grep -c "$1" "$JOURNAL" || true; }

start_daemon "$CONF"
wait_ping

# 1. one copy runs; four more copies after its success do not
rcall XADD q.dd '*' body '{"n":"order-1"}' dedup_key order-1 >/dev/null
wait_until '[[ $(runs order-1) == 1 ]]' 10
wait_until '[[ $(xpending q.dd) == 0 ]]' 10
ttl=$(rcall PTTL q.dd.dedup.order-1)
((ttl > 0 && ttl <= 3000)) || fail "PTTL of q.dd.dedup.order-1: $ttl"
for i in 1 2 3; do
	rcall XADD q.dd '*' body '{"n":"order-1"}' dedup_key order-1 >/dev/null
done
rcall XADD q.dd '*' body '{"n":"order-1"}' dedup_key order-1 \
	reply_to dd.replies correlation_id c1 >/dev/null
wait_metric taskmill_tasks_total 'task="journal",outcome="duplicate"' 4 10
wait_until '[[ $(xpending q.dd) == 0 ]]' 10
assert_eq 1 "$(runs order-1)" "runs of dedup key order-1"
assert_eq 1 "$(metric taskmill_tasks_total 'task="journal",outcome="success"')" "successes"
assert_eq 5 "$(stream_state q.dd | cut -d' ' -f1)" "entries of q.dd acknowledged"
assert_eq 1 "$(xlen dd.replies)" "answers to the duplicate request"
assert_eq duplicate "$(xfield dd.replies "$(xids dd.replies)" outcome)" "the duplicate's answer"

# 2. after dedup_ttl the key runs again
wait_until '[[ $(rcall EXISTS q.dd.dedup.order-1) == 0 ]]' 10
rcall XADD q.dd '*' body '{"n":"order-1"}' dedup_key order-1 >/dev/null
wait_until '[[ $(runs order-1) == 2 ]]' 10
wait_metric taskmill_tasks_total 'task="journal",outcome="success"' 2 10

# 3. a failed run does not block the next copy; the success does, and a
# duplicate request gets the first success's result
rcall XADD q.ddadd '*' body '{"a":1}' dedup_key k2 >/dev/null
wait_metric taskmill_tasks_total 'task="add",outcome="rejected"' 1 10
assert_eq 0 "$(rcall EXISTS q.ddadd.dedup.k2)" "dedup key after a failed run"
rcall XADD q.ddadd '*' body '{"a":1,"b":2}' dedup_key k2 >/dev/null
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 10
assert_eq '{"sum":3}' "$(rcall GET q.ddadd.dedup.k2)" "stored result of k2"
rcall XADD q.ddadd '*' body '{"a":5,"b":5}' dedup_key k2 \
	reply_to dd.replies2 correlation_id c2 >/dev/null
wait_until '[[ $(xlen dd.replies2) == 1 ]]' 10
id=$(xids dd.replies2)
assert_eq duplicate "$(xfield dd.replies2 "$id" outcome)" "outcome of the duplicate request"
assert_eq '{"sum":3}' "$(xfield dd.replies2 "$id" body)" "answer of the duplicate request"
assert_eq 1 "$(metric taskmill_tasks_total 'task="add",outcome="duplicate"')" "duplicates of add"

# 4. copies read before any success: all may run, one success counts
stop_daemon
for i in 1 2 3; do
	rcall XADD q.ddadd '*' body "{\"a\":$i,\"b\":0}" dedup_key k3 \
		reply_to dd.replies3 >/dev/null
done
# and copies without a key are never deduplicated
for i in 1 2; do
	rcall XADD q.ddadd '*' body '{"a":1,"b":1}' >/dev/null
done
start_daemon "$CONF"
wait_ping
wait_until '[[ $(xlen dd.replies3) == 3 ]]' 10
wait_until '[[ $(xpending q.ddadd) == 0 ]]' 10
outs=$(rcall EVAL "local o = {}
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		for i = 1, #e[2], 2 do
			if e[2][i] == 'outcome' then o[#o + 1] = e[2][i + 1] end
		end
	end
	table.sort(o)
	return table.concat(o, ',')" 1 dd.replies3)
assert_eq "duplicate,duplicate,success" "$outs" "outcomes of three copies read together"
first=$(rcall GET q.ddadd.dedup.k3)
for id in $(xids dd.replies3); do
	assert_eq "$first" "$(xfield dd.replies3 "$id" body)" "every answer of k3 carries the recorded result"
done


rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
