# What the autoscaling gauges cost Redis: scraped twice a second, a
# daemon reads every task's counts (lag, pending, dead letters, oldest
# age, delayed due) at most every 5 s, in one script per slot, so the
# round trips do not grow with tasks: 100 tasks cost as many as 1. The
# commands the script runs inside Redis grow with tasks (they are not
# round trips). Counted with MONITOR over the same window for both.
. "$TM_SRCDIR/tests/integration/lib.sh"

WINDOW_S=11
priv_redis_start
REDIS_PORT=$PRIV_REDIS_PORT

# run_window NTASKS: start a daemon with NTASKS idle tasks, scrape
# /metrics every 0.5 s for WINDOW_S seconds under MONITOR, stop it; sets
# READS (depth scripts sent), INNER (commands they ran inside Redis),
# ROUNDS (every command sent by a client) and GAUGES (tasks with a lag).
run_window() {
	local n=$1 i conf=$TEST_DIR/taskmill.$1.yaml mon=$TEST_DIR/monitor.$1.txt
	HTTP_PORT=
	{
		echo "tasks:"
		for ((i = 0; i < n; i++)); do
			echo "  t$i: { plugin: noop.so, queue: q.cost.$n.$i }"
		done
	} >"$TEST_DIR/tasks.$n.yaml"
	# not in a pipeline: write_config sets HTTP_PORT
	write_config "$conf" pool_size=2 log_level=info <"$TEST_DIR/tasks.$n.yaml"
	start_daemon "$conf"
	wait_ping "$HTTP_PORT" 60
	# the first rounds of the daemon's other threads are over
	sleep 2
	priv_rcli MONITOR >"$mon" &
	local mpid=$!
	sleep 0.3
	local end=$(($(now_ms) + WINDOW_S * 1000))
	while (($(now_ms) < end)); do
		curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics" >"$TEST_DIR/metrics.$n.txt" ||
			fail "no /metrics"
		sleep 0.5
	done
	kill "$mpid" 2>/dev/null || true
	wait "$mpid" 2>/dev/null || true
	stop_daemon
	READS=$(grep -v ' lua\] ' "$mon" | grep -c '"EVAL" "local out = {}.*XINFO' || true)
	INNER=$(grep -c ' lua\] "XINFO" "GROUPS"' "$mon" || true)
	ROUNDS=$(grep -v ' lua\] ' "$mon" | grep -c '^[0-9]' || true)
	GAUGES=$(grep -c '^taskmill_queue_lag{' "$TEST_DIR/metrics.$n.txt" || true)
	note "$n task(s): $READS depth reads, $INNER XINFO GROUPS inside them, $ROUNDS commands sent in all, in ${WINDOW_S} s; $GAUGES lag gauges"
}

run_window 1
reads1=$READS inner1=$INNER rounds1=$ROUNDS
assert_eq 1 "$GAUGES" "lag gauges of 1 task"
run_window 100
reads100=$READS inner100=$INNER rounds100=$ROUNDS
assert_eq 100 "$GAUGES" "lag gauges of 100 tasks"

# scrapes every 0.5 s, reads at most every 5 s: 2 or 3 in the window
assert_ge 2 "$reads1" "depth reads of 1 task in ${WINDOW_S} s"
assert_le 3 "$reads1" "depth reads of 1 task in ${WINDOW_S} s"
assert_le "$reads1" "$reads100" "depth reads of 100 tasks: no more than of 1"
assert_ge $((reads1 - 1)) "$reads100" "depth reads of 100 tasks: as many as of 1"
# what grows is inside Redis: one XINFO GROUPS per task per read
assert_eq $((reads100 * 100)) "$inner100" "XINFO GROUPS per task inside the 100 tasks' reads"
note "every command sent: $rounds1 with 1 task, $rounds100 with 100"
true
