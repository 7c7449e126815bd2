# rate_limit on RabbitMQ is per daemon (the broker has no store the
# daemons could share a bucket in): two daemons on one queue limited to
# 20/s each; over every 5 s window each daemon (from its own journal of
# start times) starts at most 20/s + 10%. Held-back deliveries wait
# unacknowledged (prefetch bounds them): every run is a first attempt,
# nothing fails or is retried, and waits are counted.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

N=400
RATE=20
WINDOW_S=5
Q=$AQ.limited

conf() {
	write_amqp_config "$TEST_DIR/$1.yaml" http_port="$2" <<YAML
tasks:
  limited:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: $Q
    prefetch: 16
    rate_limit: $RATE/s
    on_error: requeue
    config: { path: $TEST_DIR/runs.$1.txt }
YAML
}

# max_in_window JOURNAL: the most runs started in any WINDOW_S seconds.
max_in_window() {
	cut -d' ' -f3 "$1" | sort -n | awk -v w=$((WINDOW_S * 1000000)) '
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

PORT_A=$(free_port)
conf a "$PORT_A"
PORT_B=$(free_port)
conf b "$PORT_B"
# emit declares the topology
first=$(emit_amqp "$TEST_DIR/a.yaml" limited '{"n":0}')
amqptool publish "$Q" $((N - 1)) '{"n":%d}' >/dev/null

start_daemon "$TEST_DIR/a.yaml"
PID_A=$DAEMON_PID
start_daemon "$TEST_DIR/b.yaml"
PID_B=$DAEMON_PID
wait_ping "$PORT_A" 60
wait_ping "$PORT_B" 60

# 400 at 2 x 20/s take 10 s; generous on a loaded machine
wait_until "[[ \$(cat '$TEST_DIR'/runs.*.txt | wc -l) -ge $N ]]" 180
wait_until "[[ \$(ready_count $Q) == 0 ]]" 30

runs=$(cat "$TEST_DIR"/runs.*.txt)
assert_eq "$N" "$(wc -l <<<"$runs")" "runs journaled"
assert_eq "$N" "$(cut -d' ' -f1 <<<"$runs" | sort -u | wc -l)" "distinct ids run"
grep -q "^$first " <<<"$runs" || fail "the emitted message $first did not run"
assert_eq "" "$(awk '$2 != 1' <<<"$runs" | head -n 3)" "runs past their first attempt"

BOUND=$((RATE * WINDOW_S * 110 / 100))
for d in a b; do
	port=PORT_${d^^}
	port=${!port}
	[[ -s $TEST_DIR/runs.$d.txt ]] || fail "daemon $d ran nothing"
	max=$(max_in_window "$TEST_DIR/runs.$d.txt")
	note "daemon $d: $(wc -l <"$TEST_DIR/runs.$d.txt") runs, at most $max in a ${WINDOW_S}s window (bound $BOUND)"
	assert_le "$BOUND" "$max" "runs started in one ${WINDOW_S}s window by daemon $d"
	for o in error rejected timeout crashed invalid; do
		assert_eq 0 "$(metric taskmill_tasks_total "task=\"limited\",outcome=\"$o\"" "$port")" "outcome $o of daemon $d"
	done
	assert_eq 0 "$(metric taskmill_retries_total 'task="limited"' "$port")" "retries of daemon $d"
	assert_ge 1 "$(metric taskmill_rate_limited_total 'task="limited"' "$port")" "rate_limited_total of daemon $d"
done

DAEMON_PID=$PID_A
stop_daemon
DAEMON_PID=$PID_B
stop_daemon
assert_eq 0 "$(ready_count "$Q")" "ready after the stop (all acknowledged)"
assert_eq 0 "$(ready_count "$Q.dlq")" "dead letters"
