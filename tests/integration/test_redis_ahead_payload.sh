# The reply of a read sent ahead goes through the max_payload filter like
# any other: a body over max_payload in it is dropped as it comes off the
# socket (the daemon never holds it) and its entry dead-lettered with the
# reason, never run.
#
# 96 entries are published while the daemon is stopped (prefetch 64: a
# read asks for 32 and the next goes ahead for 32 more): entries 40 and
# 60, in the read that goes ahead, have 16 MiB bodies over max_payload
# (1 MiB); the others are small and all run. The daemon's peak RSS grows
# by much less than one big body.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
write_config "$CONF" <<YAML
tasks:
  j:
    plugin: journal.so
    queue: q.ap
    prefetch: 64
    max_payload: 1MiB
    config: { path: "$JOURNAL" }
YAML
start_daemon "$CONF"
wait_ping

BIG=$TEST_DIR/big.json
pad_json "$BIG" $((16 * 1024 * 1024))

kill -STOP "$DAEMON_PID"
tmr_on_exit "kill -CONT $DAEMON_PID 2>/dev/null || true"
base=$(daemon_hwm)
: >"$TEST_DIR/ids"
: >"$TEST_DIR/big.ids"
for i in $(seq 1 96); do
	if ((i == 40 || i == 60)); then
		xadd_file q.ap body "$BIG" >>"$TEST_DIR/big.ids"
	else
		rcall XADD q.ap '*' body "{\"n\":$i}" >>"$TEST_DIR/ids"
	fi
done
kill -CONT "$DAEMON_PID"

wait_until "[[ \$(journal_count_covered $TEST_DIR/ids $JOURNAL) == 94 ]]" 30
wait_until '[[ $(xlen q.ap.dlq) == 2 ]]' 20
wait_until '[[ $(xpending q.ap) == 0 ]]' 10
assert_journal_only "$TEST_DIR/ids" "$JOURNAL"
# the two are settled by whichever workers take them: in either order
assert_eq "$(sort "$TEST_DIR/big.ids" | paste -sd ' ')" \
	"$(for d in $(xids q.ap.dlq); do xfield q.ap.dlq "$d" origin_id; done | sort | paste -sd ' ')" \
	"dead letter origins"
for dlq in $(xids q.ap.dlq); do
	assert_match "exceeds max_payload" "$(xfield q.ap.dlq "$dlq" error)" \
		"dead letter reason"
done
peak=$(daemon_hwm)
note "peak RSS: $base kB before, $peak kB after (grew by $((peak - base)) kB)"
assert_le $((6 * 1024)) $((peak - base)) "peak RSS growth in kB"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
