# shellcheck shell=bash
# What the delayed-message tests share: the task "stamp" (test plugin
# stamp.so, which writes one line per run to OUT: the run's start in epoch
# ms, then the body), its configuration on RabbitMQ, the run of one
# delayed message, two daemons, and the lateness report over many.
# Sourced by a test after lib.sh (and lib_amqp.sh for the RabbitMQ
# parts); not a test itself
# (run.sh runs test_*.sh only):
#
#   . "$TM_SRCDIR/tests/integration/lib_delay.sh"
#
# Sets OUT (emptied) and, with lib_amqp.sh, Q: the task's queue.

OUT=$TEST_DIR/stamps
: >"$OUT"
Q=${AQ:+$AQ.stamp}

# delay_config FILE [task='KEY: VALUE'...] [queue=NAME] [write=FUNC]
# [OPTION...]: writes FILE with FUNC (lib_amqp.sh's write_amqp_config
# unless named, e.g. lib.sh's write_config for Redis) and its OPTIONs,
# and the one task stamp on queue NAME (Q unless named), with each
# task='KEY: VALUE' among its keys.
delay_config() {
	local file=$1 kv keys='' queue=$Q write=write_amqp_config opts=()
	shift
	for kv in "$@"; do
		case $kv in
		task=*) keys+=", ${kv#task=}" ;;
		queue=*) queue=${kv#queue=} ;;
		write=*) write=${kv#write=} ;;
		*) opts+=("$kv") ;;
		esac
	done
	"$write" "$file" "${opts[@]}" <<YAML
tasks:
  stamp: { plugin: $TM_BUILD/test-plugins/stamp.so, queue: $queue, config: { path: $OUT }$keys }
YAML
}

# delay_start [task='KEY: VALUE'...] [OPTION...]: writes CONF
# (TEST_DIR/taskmill.yaml) with delay_config, starts the daemon on it and
# waits until it is ready.
delay_start() {
	CONF=$TEST_DIR/taskmill.yaml
	delay_config "$CONF" "$@"
	start_daemon "$CONF"
	wait_ping "" 60
}

# delay_run_after NAME DELAY: emits {"n":"NAME"} to stamp (through CONF)
# with --delay DELAY, waits for its run and sets RAN_AFTER to the ms from
# just before the emit to the run's start.
RAN_AFTER=0
delay_run_after() {
	local t0 ran
	t0=$(now_ms)
	emit_amqp "$CONF" stamp "{\"n\":\"$1\"}" --delay "$2" >/dev/null
	wait_until "grep -q '\"$1\"' '$OUT'" 60
	ran=$(awk -v n="\"$1\"" 'index($0, n) { print $1; exit }' "$OUT")
	RAN_AFTER=$((ran - t0))
	note "$1 (--delay $2): emitted at $t0, ran $RAN_AFTER ms after"
}

# delay_lateness N: OUT holds the runs of N messages whose bodies carry
# "i" (the message's number) and "due" (its due time, epoch ms): each ran
# exactly once, none before its time; reports the lateness (run start
# minus due time) p50/p99/max, not asserted (the machine is shared).
delay_lateness() {
	local n=$1 uniq p50 p99 max
	assert_eq "$n" "$(wc -l <"$OUT")" "runs"
	uniq=$(sed -n 's/.*"i": *\([0-9]*\),.*/\1/p' "$OUT" | sort -u | wc -l)
	assert_eq "$n" "$uniq" "distinct messages run"
	sed -n 's/^\([0-9]*\) .*"due": *\([0-9]*\)}.*/\1 \2/p' "$OUT" |
		awk '{print $1 - $2}' | sort -n >"$TEST_DIR/late"
	assert_eq "$n" "$(wc -l <"$TEST_DIR/late")" "lateness of every run"
	assert_ge 0 "$(head -n 1 "$TEST_DIR/late")" "no run before its time (least lateness, ms)"
	p50=$(sed -n "$((n / 2))p" "$TEST_DIR/late")
	p99=$(sed -n "$((n * 99 / 100))p" "$TEST_DIR/late")
	max=$(tail -n 1 "$TEST_DIR/late")
	echo "# lateness over $n delayed messages, 2 daemons: p50 $p50 ms, p99 $p99 ms, max $max ms" >&2
}

# delay_start_two: starts a daemon on each of TEST_DIR/w1.yaml and
# TEST_DIR/w2.yaml (HTTP ports PORT1 and PORT2), sets PID1 and PID2 and
# waits until both are ready.
delay_start_two() {
	start_daemon "$TEST_DIR/w1.yaml"
	PID1=$DAEMON_PID
	start_daemon "$TEST_DIR/w2.yaml"
	PID2=$DAEMON_PID
	wait_ping "$PORT1" 60
	wait_ping "$PORT2" 60
}

# delay_stop_two: stops both daemons; each exits 0.
delay_stop_two() {
	local pid rc
	for pid in "$PID1" "$PID2"; do
		DAEMON_PID=$pid
		rc=0
		stop_daemon || rc=$?
		assert_eq 0 "$rc" "daemon exit status"
	done
}

# delay_wait_runs N SECONDS: waits SECONDS at most until OUT holds N runs,
# then 1 s more: a run too many would show by then.
delay_wait_runs() {
	wait_until "[[ \$(wc -l <'$OUT') -ge $1 ]]" "$2"
	sleep 1
}
