# A 20 MiB body over max_payload (1 MiB) among small messages: it is
# dead-lettered as invalid with its reason and its body kept, every small
# message runs, and the daemon never holds the big body: its peak RSS
# grows by much less than the body's size. (The small messages come first:
# a blocking read may bring in one entry whole, see src/redis/intake.c;
# the batched reads are bounded.)
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
hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$DAEMON_PID/status"; }

BIG=$TEST_DIR/big.json
{
	printf '{"pad":"'
	head -c $((20 * 1024 * 1024)) /dev/zero | tr '\0' 'p'
	printf '"}'
} >"$BIG"
SIZE=$(stat -c %s "$BIG")

# publish while the daemon is stopped, so that its reads are batched
kill -STOP "$DAEMON_PID"
tmr_on_exit "kill -CONT $DAEMON_PID 2>/dev/null || true"
base=$(hwm)
: >"$TEST_DIR/ids"
for i in $(seq 1 20); do
	rcall XADD q.big '*' body "{\"n\":$i}" >>"$TEST_DIR/ids"
done
big=$(xadd_file q.big body "$BIG")
for i in $(seq 21 40); do
	rcall XADD q.big '*' body "{\"n\":$i}" >>"$TEST_DIR/ids"
done
note "published 40 small messages and $big ($SIZE bytes); peak RSS before: $base kB"
kill -CONT "$DAEMON_PID"

wait_until "[[ \$(journal_count_covered $TEST_DIR/ids $JOURNAL) == 40 ]]" 30
wait_until '[[ $(xlen q.big.dlq) == 1 ]]' 20
wait_until '[[ $(xpending q.big) == 0 ]]' 10
assert_journal_only "$TEST_DIR/ids" "$JOURNAL"
peak=$(hwm)
note "peak RSS after: $peak kB (grew by $((peak - base)) kB)"
assert_le $((8 * 1024)) $((peak - base)) "peak RSS growth in kB"

dlq=$(xids q.big.dlq)
assert_eq "$big" "$(xfield q.big.dlq "$dlq" origin_id)" "dead letter origin"
assert_eq 0 "$(xfield q.big.dlq "$dlq" attempts)" "dead letter attempts"
error=$(xfield q.big.dlq "$dlq" error)
note "error: $error"
assert_match "$SIZE bytes exceeds max_payload" "$error" "dead letter error"
assert_eq "$SIZE" "$(rcall EVAL "local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
	local f = r[1][2]
	for i = 1, #f, 2 do if f[i] == 'body' then return string.len(f[i + 1]) end end
	return -1" 1 q.big.dlq "$dlq")" "dead letter body size"
assert_eq 1 "$(metric taskmill_tasks_total 'task="j",outcome="invalid"')" "invalid count"

daemon_alive || fail "daemon died"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
