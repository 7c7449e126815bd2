# shellcheck shell=bash
# What the soak tests (test_soak.sh, test_soak_ops.sh) share: keeping
# their daemons alive, telling deaths asked for from the others, stopping
# them at the end, and the crash and sanitizer lines of their logs.
# Sourced by a test after lib.sh (which run.sh has already sourced).
#
# The test keeps, per daemon I (any set of indices): PID[I] its pid and
# HP[I] its HTTP port, and defines soak_start I, which starts daemon I
# (again) and sets PID[I]. The helpers here append to the test's arrays
# DEATHS (one line per unexpected exit) and stop_rcs, and count RESTARTS.
declare -a PID HP
DEATHS=()
RESTARTS=0
stop_rcs=()

# soak_check_alive I: when daemon I died without being killed here,
# record it and start it again so that the soak goes on.
soak_check_alive() {
	local i=$1 rc=0
	daemon_alive "${PID[i]}" && return 0
	wait "${PID[i]}" 2>/dev/null || rc=$?
	DEATHS+=("daemon $i pid ${PID[i]} exited with status $rc")
	note "UNEXPECTED: daemon $i pid ${PID[i]} exited with status $rc"
	soak_start "$i"
	RESTARTS=$((RESTARTS + 1))
}

# soak_kill9 I: kill -9 daemon I and reap it; a daemon that had already
# exited is recorded in DEATHS. It is not started again here.
soak_kill9() {
	local i=$1 rc=0
	kill -KILL "${PID[i]}" 2>/dev/null || true
	wait "${PID[i]}" 2>/dev/null || rc=$?
	((rc == 137)) || DEATHS+=("daemon $i pid ${PID[i]} had exited with status $rc before kill -9")
}

# soak_in_flight: the messages the daemons hold (read, not settled yet),
# over every daemon in PID; one more for a daemon that does not answer.
# Nothing pending is not enough before the stop: a daemon may still hold,
# or run, its copy of an entry another one reclaimed and acknowledged
# (test_redis_dup_stop), and a long run of it at the SIGTERM outlives
# shutdown_timeout (exit 1).
soak_in_flight() {
	local i n sum=0
	for i in "${!PID[@]}"; do
		n=$(metric taskmill_tasks_inflight '' "${HP[i]}") || n=1
		sum=$((sum + n))
	done
	echo "$sum"
}

# soak_stop I: SIGTERM daemon I; append its exit status to stop_rcs, or
# "hung" when it is still there 15 s later (then it is killed; the soaks'
# shutdown_timeout is 1 s). Not in a subshell: only this shell can reap it.
soak_stop() {
	local pid=${PID[$1]} rc=0 deadline=$(($(now_ms) + 15000))
	kill -TERM "$pid" 2>/dev/null || true
	while daemon_alive "$pid"; do
		if (($(now_ms) >= deadline)); then
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			stop_rcs+=(hung)
			return 0
		fi
		sleep 0.1
	done
	wait "$pid" 2>/dev/null || rc=$?
	stop_rcs+=("$rc")
}

# soak_crash_lines: the first 20 crash or sanitizer lines of every daemon
# log of the test (none: empty).
soak_crash_lines() {
	grep -aE 'SIGSEGV|SIGABRT|SIGBUS|Segmentation fault|AddressSanitizer|LeakSanitizer|runtime error:|ThreadSanitizer|double free|stack smashing' \
		"$TEST_DIR"/daemon.*.log | head -n 20 || true
}
