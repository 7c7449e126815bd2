# rate_limit on Redis is one budget for every daemon reading the task: two
# daemons drain 2,000 messages of a task limited to 50/s, and over every
# 5 s window (from the plugin's own journal of start times) the two
# together start at most 50/s + 10%. Held-back messages wait in the
# stream: every run is a first attempt, nothing fails or is retried, and
# both daemons count their waits in taskmill_rate_limited_total.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=2000
RATE=50
WINDOW_S=5
JOURNAL=$TEST_DIR/runs.txt

tasks() {
	cat <<YAML
tasks:
  limited:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.limited
    prefetch: 64
    rate_limit: $RATE/s
    on_error: requeue
    config: { path: $JOURNAL }
YAML
}

xadd_bulk q.limited "$N" '{"n":%d}'

PORT_A=$(free_port)
tasks | write_config "$TEST_DIR/a.yaml" instance=a http_port="$PORT_A"
start_daemon "$TEST_DIR/a.yaml"
PID_A=$DAEMON_PID
PORT_B=$(free_port)
tasks | write_config "$TEST_DIR/b.yaml" instance=b http_port="$PORT_B"
start_daemon "$TEST_DIR/b.yaml"
PID_B=$DAEMON_PID
wait_ping "$PORT_A"
wait_ping "$PORT_B"

# while they run, the bucket is one key next to the stream
wait_until "[[ -s '$JOURNAL' ]]" 30
assert_eq hash "$(rcall TYPE q.limited.rate.taskmill)" "type of the bucket key"
# 2,000 at 50/s take 40 s; generous on a loaded machine
wait_until "[[ \$(wc -l <'$JOURNAL') -ge $N ]]" 180
wait_until '[[ $(xpending q.limited taskmill) == 0 ]]' 30

assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs journaled"
assert_eq "$N" "$(cut -d' ' -f1 "$JOURNAL" | sort -u | wc -l)" "distinct ids run"
assert_eq "" "$(awk '$2 != 1' "$JOURNAL" | head -n 3)" "runs past their first attempt"

# the most runs started in any window of WINDOW_S seconds (two pointers
# over the sorted start times)
max_in_window() {
	cut -d' ' -f3 "$JOURNAL" | sort -n | awk -v w=$((WINDOW_S * 1000000)) '
		{ t[NR] = $1 }
		END {
			j = 1; best = 0
			for (i = 1; i <= NR; i++) {
				while (t[i] - t[j] >= w) j++
				if (i - j + 1 > best) best = i - j + 1
			}
			print best
		}'
}
BOUND=$((RATE * WINDOW_S * 110 / 100))
MAX=$(max_in_window)
note "most runs started in a ${WINDOW_S}s window: $MAX (bound $BOUND)"
assert_le "$BOUND" "$MAX" "runs started in one ${WINDOW_S}s window by both daemons"

ran_a=$(metric taskmill_tasks_total 'task="limited",outcome="success"' "$PORT_A")
ran_b=$(metric taskmill_tasks_total 'task="limited",outcome="success"' "$PORT_B")
note "daemon a ran $ran_a, daemon b ran $ran_b"
assert_eq "$N" $((ran_a + ran_b)) "successes of both daemons"
for port in "$PORT_A" "$PORT_B"; do
	for o in error rejected timeout crashed invalid; do
		assert_eq 0 "$(metric taskmill_tasks_total "task=\"limited\",outcome=\"$o\"" "$port")" "outcome $o on :$port"
	done
	assert_eq 0 "$(metric taskmill_retries_total 'task="limited"' "$port")" "retries on :$port"
	assert_ge 1 "$(metric taskmill_rate_limited_total 'task="limited"' "$port")" "rate_limited_total on :$port"
done
assert_eq "$N 0 0" "$(stream_state q.limited taskmill)" "acked/pending/undelivered"

DAEMON_PID=$PID_A
stop_daemon
DAEMON_PID=$PID_B
stop_daemon
