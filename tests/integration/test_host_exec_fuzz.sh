# A bounded fuzzer of the exec host's boundary: messages whose seed makes
# the command (build/test-tools/exec_fuzz_child) hostile in random ways:
# stdout binary, huge, invalid UTF-8, invalid JSON, nested deep, byte by
# byte, without newline, closed early; stdin unread or closed; stderr long
# lines with NULs; random exit statuses and signals; grandchildren that keep
# stdout open (in the group and deaf to SIGTERM, in a session of their
# own, stopped); sleeping past the deadline with SIGTERM honoured or
# ignored. Through a thread-pool daemon, then a fork-pool one, batch after
# batch for TM_FUZZ_SECONDS in all (default 20; make check-soak: 600; the
# thread pool has the first half), it asserts: the
# daemon never dies and exits 0 at the end; every message is settled once
# (nothing pending); no run takes longer than its deadline + 1 s (the
# duration histogram's 2.5 s bucket holds every run of the 1.5 s timeout);
# after each batch the daemon's descriptors are back to what they were,
# nothing is left below it (no zombie, no command) and nothing of a run's
# process group is left anywhere. TM_FUZZ_SEED fixes the
# first seed (default: random, printed) to replay a run.
CONF=$TEST_DIR/taskmill.yaml
CHILD=$TM_BUILD/test-tools/exec_fuzz_child
[[ -x $CHILD ]] || fail "exec_fuzz_child not built (make test-plugins)"
[[ -f $TM_PLUGINS/exec.so ]] || fail "exec.so not built"
SECONDS_TOTAL=${TM_FUZZ_SECONDS:-20}
SEED=${TM_FUZZ_SEED:-$((RANDOM * 32768 + RANDOM))}
BATCH=12
MAX_OUTPUT=65536
note "fuzzing for ${SECONDS_TOTAL}s from seed $SEED (TM_FUZZ_SEED to replay)"

# fds: the daemon's open descriptors
fds() {
	ls "/proc/$DAEMON_PID/fd" | wc -l
}

# below_daemon: every process below the daemon that is not a taskmill
# process, or is a zombie ("PID STAT COMM" lines)
below_daemon() {
	local c
	for c in $(pgrep -P "${1:-$DAEMON_PID}" || true); do
		ps -o pid=,stat=,comm= -p "$c" | awk '$2 ~ /^Z/ || $3 !~ /^(taskmill|tm-)/' || true
		below_daemon "$c"
	done
}

# group_left: commands or grandchildren still alive in a run's process
# group once every run settled ("PID PGID STAT" lines); only those that
# made a session of their own (pid = sid) may outlive their run
group_left() {
	ps -C exec_fuzz_child -o pid=,sid=,pgid=,stat= | awk '$1 != $2' || true
}

# Descriptors at rest: after a first batch, as some are opened on first
# need (a connection for dead letters); more than FD_SLACK above that
# afterwards is a leak (one a run would pass it within a batch).
FD_SLACK=2

# fuzz_pool KIND SECONDS: fuzz a daemon of pool KIND for SECONDS; seeds go
# on from $seed
fuzz_pool() {
	local kind=$1 secs=$2 first=$((seed + 1)) sent=0 base_fds= t_end t_fd
	local i pad left count in_bound o rc
	write_config "$CONF" pool_kind="$kind" pool_size=3 log_level=info <<YAML
tasks:
  fz:
    plugin: exec.so
    queue: q.fz
    on_error: reject
    max_retries: 0
    circuit_failures: 0
    timeout: 1500ms
    config:
      command: [$CHILD, "$MAX_OUTPUT"]
      max_output: $MAX_OUTPUT
      max_log_lines: 5
      kill_grace_ms: 200
YAML
	rcli FLUSHALL >/dev/null
	start_daemon "$CONF"
	wait_ping
	t_end=$(($(now_ms) + secs * 1000))
	while (($(now_ms) < t_end)); do
		for ((i = 0; i < BATCH; i++)); do
			seed=$((seed + 1))
			# a random pad: bodies from a few bytes to 64 KiB
			pad=$(head -c $(((seed * 7919) % 65536)) /dev/zero | tr '\0' 'p')
			rcall XADD q.fz '*' body "{\"seed\":$seed,\"pad\":\"$pad\"}" >/dev/null
		done
		sent=$((sent + BATCH))
		wait_until "[[ \$(metric taskmill_tasks_total 'task=\"fz\"') == $sent ]]" 60
		daemon_alive || fail "the daemon died ($kind pool, seeds up to $seed)"
		# the descriptors of the runs are closed once they settled
		# (an HTTP connection of the last scrape may take a moment to close)
		if [[ -z $base_fds ]]; then
			sleep 0.5
			base_fds=$(fds)
			note "descriptors at rest: $base_fds"
		fi
		t_fd=$(($(now_ms) + 10000))
		while (($(fds) > base_fds + FD_SLACK)); do
			if (($(now_ms) >= t_fd)); then
				ls -l "/proc/$DAEMON_PID/fd" >&2
				fail "descriptors leaked: $(fds) open, $base_fds at rest ($kind pool, seeds up to $seed)"
			fi
			sleep 0.1
		done
		# (a fork-pool worker just replaced is a zombie until the pool
		# reaps it: give that a moment; a leak stays)
		t_fd=$(($(now_ms) + 5000))
		while left=$(below_daemon; group_left) && [[ -n $left ]]; do
			(($(now_ms) < t_fd)) ||
				fail "left below the daemon ($kind pool, seeds up to $seed): $left"
			sleep 0.1
		done
	done
	note "$kind pool: $sent runs, seeds $first..$seed"

	count=$(metric taskmill_task_duration_seconds_count 'task="fz"')
	in_bound=$(metric taskmill_task_duration_seconds_bucket 'task="fz",le="2.5"')
	assert_eq "$sent" "$count" "$kind pool: runs measured"
	if ((in_bound != count)); then
		curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | grep 'duration_seconds_bucket{task="fz"' >&2
		fail "$((count - in_bound)) of $count runs took longer than the deadline + 1 s ($kind pool, seeds $first..$seed)"
	fi
	for o in success error rejected timeout crashed invalid; do
		note "$kind pool: outcome $o: $(metric taskmill_tasks_total "task=\"fz\",outcome=\"$o\"")"
	done
	assert_eq 0 "$(metric taskmill_tasks_total 'task="fz",outcome="crashed"')" "$kind pool: no run crashed a worker"
	assert_eq 0 "$(xpending q.fz taskmill)" "$kind pool: nothing pending"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
}

seed=$SEED
fuzz_pool thread $(((SECONDS_TOTAL + 1) / 2))
fuzz_pool fork $((SECONDS_TOTAL / 2))
