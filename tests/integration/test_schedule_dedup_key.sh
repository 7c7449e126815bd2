# A slot published twice after a Redis failover runs once when its task
# has dedup_ttl: each fired entry carries dedup_key schedule:<name>:<slot>.
# The failover is simulated: once slot S ran, the daemon is stopped and
# the schedule's fired marker is set back one slot (a new master that
# missed the last write of the fire script), and the daemon started again
# with catch_up: once fires S again. The copy is acknowledged without
# running (outcome duplicate); the journal has S once.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

JOURNAL=$TEST_DIR/journal.txt
: >"$JOURNAL"
EVERY=20
MARK=q.tick.sched.slow
write_config "$TEST_DIR/d.yaml" log_level=info <<YAML
tasks:
  tick:
    plugin: journal.so
    queue: q.tick
    dedup_ttl: 10m
    config: { path: $JOURNAL }
schedules:
  slow: { task: tick, every: ${EVERY}s, body: { from: schedule }, catch_up: once }
YAML

# ids SLOT: the ids of the entries of slot SLOT
ids() {
	rcall EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			for i = 1, #e[2] - 1, 2 do
				if e[2][i] == 'slot' and e[2][i + 1] == ARGV[1] then
					out[#out + 1] = e[1]
				end
			end
		end
		return out" 1 q.tick "$1"
}

start_daemon "$TEST_DIR/d.yaml"
wait_ping
# the first slot, and its run
wait_until '[[ $(rcall EXISTS '"$MARK"') == 1 ]]' $((EVERY + 15))
S=$(rcall GET "$MARK")
id=$(ids "$S")
note "slot $S fired as entry $id"
assert_eq "schedule:slow:$S" "$(xfield q.tick "$id" dedup_key)" "the entry's dedup_key"
wait_until "grep -q '^$id ' '$JOURNAL'" 10
wait_metric taskmill_tasks_total 'task="tick",outcome="success"' 1 10
stop_daemon

# the marker as a new master that missed the last fire would hold it
rcall SET "$MARK" $((S - EVERY * 1000)) >/dev/null
start_daemon "$TEST_DIR/d.yaml"
wait_ping
wait_until "[[ \$(ids $S | wc -l) == 2 ]]" 15 ||
	fail "slot $S was not fired again"
wait_metric taskmill_tasks_total 'task="tick",outcome="duplicate"' 1 15
id2=$(ids "$S" | sed -n 2p)
assert_eq "schedule:slow:$S" "$(xfield q.tick "$id2" dedup_key)" "the copy's dedup_key"
wait_until '[[ $(xpending q.tick) == 0 ]]' 10
grep -q "^$id2 " "$JOURNAL" && fail "the copy $id2 of slot $S ran"
assert_eq 1 "$(grep -c "^$id " "$JOURNAL")" "runs of slot $S"
stop_daemon
