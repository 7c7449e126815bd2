# kill -9 in the middle of a run loses nothing. The journal writes into a
# FIFO that the test reads slowly, so the daemon is caught with tasks
# stalled in their run and prefetched deliveries pending when it is killed.
#  1. restarted with the same instance name, it re-reads its own pending
#     entries at once (XREADGROUP ... 0): nothing waits to be reclaimed;
#  2. killed again and replaced by a daemon with another instance name, that
#     one takes the dead consumer's entries over with XAUTOCLAIM once they
#     are idle past claim_idle.
# Every published id is journaled at least once; nothing is left pending or
# dead-lettered.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=300
POOL=2
PAD=$(printf '%01900d' 0) # ~1.9 KiB lines: the 64 KiB pipe holds ~33
FIFO=$TEST_DIR/journal.fifo
JOURNAL=$TEST_DIR/journal.txt
TASKS="tasks:
  journal:
    plugin: journal.so
    queue: q.k9
    prefetch: 50
    claim_idle: 1s
    config: { path: $FIFO }"
CONF_A=$TEST_DIR/a.yaml
CONF_B=$TEST_DIR/b.yaml
write_config "$CONF_A" instance=k9-a pool_size=$POOL <<<"$TASKS"
write_config "$CONF_B" instance=k9-b pool_size=$POOL <<<"$TASKS"
fifo_open "$FIFO"
: >"$JOURNAL"

# stall_and_kill BATCH: wait until the daemon is stalled on the full FIFO,
# let 40 more lines through, wait for the stall again, then kill -9 it.
stall_and_kill() {
	wait_metric taskmill_pool_busy '' "$POOL" 20
	fifo_read 40 "$JOURNAL"
	wait_metric taskmill_pool_busy '' "$POOL" 20
	wait_until "[[ \$(xpending q.k9) -ge $POOL ]]" 10
	local ndone pending
	ndone=$(journal_count_covered "$TEST_DIR/ids.$1" "$JOURNAL")
	pending=$(xpending q.k9)
	note "kill -9 with $ndone of $N journaled, $pending pending: $(stream_state q.k9)"
	assert_le $((N - 1)) "$ndone" "ids of batch $1 journaled before the kill"
	assert_ge "$POOL" "$pending" "entries pending at the kill"
	stop_daemon 10 KILL || true
}

# ---- 1: same instance again
xadd_bulk q.k9 "$N" "{\"batch\":1,\"n\":%d,\"pad\":\"$PAD\"}"
xids q.k9 >"$TEST_DIR/ids.1"
start_daemon "$CONF_A"
wait_ping
stall_and_kill 1

start_daemon "$CONF_A"
wait_ping
fifo_drain_start "$JOURNAL"
wait_until "[[ \$(journal_count_covered $TEST_DIR/ids.1 $JOURNAL) == $N ]]" 30
wait_until '[[ $(xpending q.k9) == 0 ]]' 10
assert_journal_covers "$TEST_DIR/ids.1" "$JOURNAL" "batch 1 (restart as the same instance)"
# Its own entries came back by the history read, not by a reclaim after
# claim_idle.
if grep -a 'reclaimed' "$DAEMON_LOG" >&2; then
	fail "the restarted instance waited for its own pending entries to be reclaimed (above)"
fi
# Stop the copy (idle now: the batch is done) so that the FIFO fills again.
fifo_drain_stop

# ---- 2: another instance takes over with XAUTOCLAIM
before=$(xlen q.k9)
xadd_bulk q.k9 "$N" "{\"batch\":2,\"n\":%d,\"pad\":\"$PAD\"}"
xids q.k9 | tail -n +$((before + 1)) >"$TEST_DIR/ids.2"
assert_eq "$N" "$(wc -l <"$TEST_DIR/ids.2")" "ids of batch 2"
stall_and_kill 2
# The dead consumer k9-a holds entries now.
held=$(rcall EVAL "local n = 0
	for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], 'taskmill')) do
		for i = 1, #c, 2 do
			if c[i] == 'name' and c[i + 1] == 'k9-a' then n = c[i + 3] end
		end
	end
	return n" 1 q.k9)
note "consumer k9-a holds $held entries"
assert_ge "$POOL" "$held" "entries pending on the killed consumer k9-a"

start_daemon "$CONF_B"
wait_ping
fifo_drain_start "$JOURNAL"
wait_until "[[ \$(journal_count_covered $TEST_DIR/ids.2 $JOURNAL) == $N ]]" 30
wait_until '[[ $(xpending q.k9) == 0 ]]' 10
assert_journal_covers "$TEST_DIR/ids.2" "$JOURNAL" "batch 2 (another instance)"
grep -aq 'reclaimed' "$DAEMON_LOG" ||
	fail "daemon k9-b never logged reclaiming k9-a's entries, yet they ran"

# Everything: no loss, nothing pending, nothing dead-lettered.
cat "$TEST_DIR/ids.1" "$TEST_DIR/ids.2" >"$TEST_DIR/ids.all"
assert_journal_covers "$TEST_DIR/ids.all" "$JOURNAL" "both batches"
assert_journal_only "$TEST_DIR/ids.all" "$JOURNAL" "both batches"
assert_eq "$((2 * N)) 0 0" "$(stream_state q.k9)" "acked/pending/undelivered of q.k9"
assert_eq 0 "$(xlen q.k9.dlq)" "XLEN q.k9.dlq"
assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
