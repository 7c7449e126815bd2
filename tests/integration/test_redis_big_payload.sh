# 20 MiB bodies over max_payload (1 MiB): one at the head of a backlog of
# small messages, read in one batch, and one published while the daemon
# waits in a blocking read. Each is dead-lettered as invalid with its
# reason and its body kept, every small message runs, and the daemon never
# holds a big body: its peak RSS grows by much less than one body's size.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
write_config "$CONF" <<YAML
tasks:
  j:
    plugin: journal.so
    queue: q.big
    max_payload: 1MiB
    config: { path: "$JOURNAL" }
YAML
start_daemon "$CONF"
wait_ping

BIG=$TEST_DIR/big.json
pad_json "$BIG" $((20 * 1024 * 1024))
SIZE=$(stat -c %s "$BIG")

# publish while the daemon is stopped, so that its reads are batched
kill -STOP "$DAEMON_PID"
tmr_on_exit "kill -CONT $DAEMON_PID 2>/dev/null || true"
base=$(daemon_hwm)
: >"$TEST_DIR/ids"
big=$(xadd_file q.big body "$BIG")
for i in $(seq 1 40); do
	rcall XADD q.big '*' body "{\"n\":$i}" >>"$TEST_DIR/ids"
done
note "published $big ($SIZE bytes), then 40 small messages; peak RSS before: $base kB"
kill -CONT "$DAEMON_PID"

wait_until "[[ \$(journal_count_covered $TEST_DIR/ids $JOURNAL) == 40 ]]" 30
wait_until '[[ $(xlen q.big.dlq) == 1 ]]' 20
wait_until '[[ $(xpending q.big) == 0 ]]' 10
# the daemon is idle now, blocked in a read: the next big body arrives there
big2=$(xadd_file q.big body "$BIG")
rcall XADD q.big '*' body '{"n":41}' >>"$TEST_DIR/ids"
wait_until '[[ $(xlen q.big.dlq) == 2 ]]' 20
wait_until "[[ \$(journal_count_covered $TEST_DIR/ids $JOURNAL) == 41 ]]" 30
wait_until '[[ $(xpending q.big) == 0 ]]' 10
assert_journal_only "$TEST_DIR/ids" "$JOURNAL"
peak=$(daemon_hwm)
note "peak RSS after: $peak kB (grew by $((peak - base)) kB)"
assert_le $((8 * 1024)) $((peak - base)) "peak RSS growth in kB"

assert_eq "$big $big2" "$(for d in $(xids q.big.dlq); do xfield q.big.dlq "$d" origin_id; done | paste -sd ' ')" "dead letter origins"
for dlq in $(xids q.big.dlq); do
	assert_eq 0 "$(xfield q.big.dlq "$dlq" attempts)" "dead letter attempts"
	error=$(xfield q.big.dlq "$dlq" error)
	note "error: $error"
	assert_match "$SIZE bytes exceeds max_payload" "$error" "dead letter error"
	assert_eq "$SIZE" "$(rcall EVAL "local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
	local f = r[1][2]
	for i = 1, #f, 2 do if f[i] == 'body' then return string.len(f[i + 1]) end end
	return -1" 1 q.big.dlq "$dlq")" "dead letter body size"
done
assert_eq 2 "$(metric taskmill_tasks_total 'task="j",outcome="invalid"')" "invalid count"

daemon_alive || fail "daemon died"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
