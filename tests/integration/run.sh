#!/usr/bin/env bash
# Integration tests: the real taskmill binary against a real redis-server.
#
#   TM_BUILD=/abs/build tests/integration/run.sh [NAME...]
#
# Starts one redis-server on a free loopback port in a scratch dir for the
# whole run (or uses TM_TEST_REDIS_PORT, a redis already running on
# 127.0.0.1, whose data every test flushes), then runs every
# tests/integration/test_*.sh (or only those named: "happy_path",
# "test_cli.sh", ...; or a path to a test file) each in its own bash process with
# lib.sh sourced, its own scratch dir, a FLUSHALL before it and a watchdog
# timeout (TM_TEST_TIMEOUT, default 120 s). Prints "ok - NAME" or
# "not ok - NAME" per test and one closing "N passed, N failed" line; exits 1
# if any test failed. A test that calls `skip` counts as skipped, or as failed
# when CI=true or TM_SKIPS_AS_FAILS=1.
#
# Lanes: TM_TEST_JOBS=N (default 3: most tests wait on brokers and timers,
# so 3 lanes keep 2 cores about half busy) tests run at the same time, each lane
# with its own redis-server (its own REDIS_PORT, flushed only for that
# lane's tests) and its own slice of the free_port range; 1 runs them one
# after another. A free lane takes the next test that may start: the known
# long tests first (LONG_TESTS below), then file order. Tests sharing
# something global never overlap: each test_amqp_* test has one of the
# run's RabbitMQ nodes to itself (TM_RABBIT_NODES of them, default 2), the
# test_amqp_cluster_* tests (a cluster each) run one at a time beside
# them, and so do the tests with a line
# "# run.sh: serial" (fixed ports, ...); a test with a line
# "# run.sh: alone" runs while no other test does. With TM_TEST_REDIS_PORT
# there is one lane. Results print as each test ends.
#
# TM_KEEP_SCRATCH=1 keeps the scratch dir (logs, configs) for inspection.
# When TM_BUILD ends in build-asan or build-tsan, sanitizer reports (ASan,
# UBSan, LeakSanitizer, ThreadSanitizer) in any log of a test (daemon or CLI
# stderr) fail that test. TSAN_OPTIONS set by the caller is kept.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TM_SRCDIR=${TM_SRCDIR:-$(cd "$HERE/../.." && pwd)}
: "${TM_BUILD:?set TM_BUILD to the absolute build directory}"
TM_BUILD=$(cd "$TM_BUILD" && pwd) || exit 1
export TM_BUILD TM_SRCDIR
TEST_TIMEOUT=${TM_TEST_TIMEOUT:-120}
SKIPS_AS_FAILS=${TM_SKIPS_AS_FAILS:-0}
JOBS=${TM_TEST_JOBS:-3}
if [[ ! $JOBS =~ ^[1-9][0-9]?$ ]]; then
	echo "run.sh: TM_TEST_JOBS must be a number of lanes, 1-99 (got '$JOBS')" >&2
	exit 1
fi
[[ ${CI:-} == true ]] && SKIPS_AS_FAILS=1

if [[ ! -x $TM_BUILD/taskmill ]]; then
	echo "run.sh: $TM_BUILD/taskmill not found; build it first (make)" >&2
	exit 1
fi
for tool in redis-server redis-cli curl timeout; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "run.sh: '$tool' not found; run scripts/install-deps.sh" >&2
		exit 1
	fi
done

SANITIZED=0
SAN_NAME=
if [[ $TM_BUILD == *build-asan ]]; then
	SANITIZED=1
	SAN_NAME=ASan+UBSan
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
elif [[ $TM_BUILD == *build-tsan ]]; then
	# ThreadSanitizer: report every race and keep going (halt_on_error=0),
	# with exit status 0 (exitcode=0) so that a test runs to its end and
	# the log scan below fails it, with all its reports; both stacks of a
	# lock-order inversion, and a longer per-thread history than the
	# default so that the "previous access" stack is rarely lost.
	SANITIZED=1
	SAN_NAME=TSan
	export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:exitcode=0:second_deadlock_stack=1:history_size=4}
fi
SAN_PATTERN='ERROR: AddressSanitizer|runtime error:|LeakSanitizer'
SAN_PATTERN+='|WARNING: ThreadSanitizer|FATAL: ThreadSanitizer|ThreadSanitizer: CHECK failed'

# The tests to run: all of them, or those named on the command line.
tests=()
if (($#)); then
	for name in "$@"; do
		# a path (with a slash) to a test outside the default glob
		if [[ $name == */* && -f $name ]]; then
			tests+=("$(cd "$(dirname "$name")" && pwd)/${name##*/}")
			continue
		fi
		name=${name##*/}
		name=${name%.sh}
		name=${name#test_}
		if [[ ! -f $HERE/test_$name.sh ]]; then
			echo "run.sh: no test named $name" >&2
			exit 1
		fi
		tests+=("$HERE/test_$name.sh")
	done
else
	for t in "$HERE"/test_*.sh; do
		[[ -f $t ]] && tests+=("$t")
	done
fi

# The known long tests (longest first, plain build): they start first so
# that no lane ends the run alone with one of them. Others follow in file
# order.
LONG_TESTS=(amqp_cluster_tls_alarm amqp_cluster_failover http_broker_hung
	http_api flow_rate_redis redis_sentinel redis_trim_race amqp_fault_alarms
	http_console_live http_broker_blackhole amqp_schedule_fire
	fork_drain_acks soak amqp_pause amqp_delay_durable delay_redis_many
	schedule_fire_redis http_asyncapi http_slowloris fault_harness circuit
	http_endpoints redis_dlq_refused http_burst)
ordered=()
for long in "${LONG_TESTS[@]}"; do
	for i in "${!tests[@]}"; do
		[[ ${tests[i]##*/} == "test_$long.sh" ]] || continue
		ordered+=("${tests[i]}")
		unset 'tests[i]'
	done
done
tests=("${ordered[@]}" "${tests[@]}")
unset ordered long i

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/taskmill-it.XXXXXX")
# Per lane (index 0..JOBS-1): its redis-server (pid, port) and, while it
# runs a test, the test's scratch dir and its job (the subshell running it;
# the test's watchdog pid is in DIR/watchdog.pid).
LANE_REDIS_PID=()
LANE_REDIS_PORT=()
LANE_DIR=()
LANE_JOB=()
LANE_RNODE=() # the RabbitMQ node of the lane's test_amqp_* test

# Kill whatever a test left behind: daemons it recorded.
kill_test_daemons() {
	local dir=$1 pid
	[[ -n $dir && -f $dir/daemon.pids ]] || return 0
	while read -r pid; do
		kill -KILL "$pid" 2>/dev/null || true
	done <"$dir/daemon.pids"
}

# stop_lane_test LANE: end the test a lane runs (interrupted run): its
# watchdog forwards the signal to the test's process group.
stop_lane_test() {
	local dir=${LANE_DIR[$1]:-} pid
	[[ -n $dir ]] || return 0
	if [[ -s $dir/watchdog.pid ]]; then
		read -r pid <"$dir/watchdog.pid"
		kill -TERM "$pid" 2>/dev/null || true
	fi
	kill -TERM "${LANE_JOB[$1]}" 2>/dev/null || true
	kill_test_daemons "$dir"
}

stop_redis() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local lane
	for lane in "${!LANE_DIR[@]}"; do
		stop_lane_test "$lane"
	done
	stop_rabbits # RabbitMQ block below
	for lane in "${!LANE_REDIS_PID[@]}"; do
		stop_redis "${LANE_REDIS_PID[lane]}"
	done
	if [[ ${TM_KEEP_SCRATCH:-0} == 1 ]]; then
		echo "# scratch kept in $SCRATCH"
	else
		rm -rf "$SCRATCH"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_is_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

redis_ping() {
	[[ $(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

# start_redis LANE: start the lane's private redis-server on a free port,
# in its own dir $SCRATCH/lane-LANE; sets LANE_REDIS_PORT[LANE].
start_redis() {
	local lane=$1 dir=$SCRATCH/lane-$1 attempt port i pid
	mkdir -p "$dir"
	for ((attempt = 0; attempt < 10; attempt++)); do
		port=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		port_is_free "$port" || continue
		redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
			--save '' --appendonly no --daemonize no \
			--enable-debug-command local \
			--logfile "$dir/redis.log" &
		pid=$!
		LANE_REDIS_PID[lane]=$pid
		for ((i = 0; i < 100; i++)); do
			if redis_ping "$port"; then
				LANE_REDIS_PORT[lane]=$port
				return 0
			fi
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		# Lost a race for the port, or a slow start: try another port.
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		unset 'LANE_REDIS_PID[lane]'
	done
	echo "run.sh: could not start redis-server; its log:" >&2
	tail -n 20 "$dir/redis.log" >&2 2>/dev/null
	return 1
}

if [[ -n ${TM_TEST_REDIS_PORT:-} ]]; then
	JOBS=1 # one server: every test flushes it, so one test at a time
	LANE_REDIS_PORT[0]=$TM_TEST_REDIS_PORT
	if ! redis_ping "$TM_TEST_REDIS_PORT"; then
		echo "run.sh: no redis answers on 127.0.0.1:$TM_TEST_REDIS_PORT (TM_TEST_REDIS_PORT)" >&2
		exit 1
	fi
	echo "# using the redis already running on 127.0.0.1:$TM_TEST_REDIS_PORT (it is flushed before each test)"
else
	((JOBS > ${#tests[@]})) && JOBS=${#tests[@]}
	((JOBS >= 1)) || JOBS=1
	for ((lane = 0; lane < JOBS; lane++)); do
		start_redis "$lane" || exit 1
	done
	echo "# redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:${LANE_REDIS_PORT[*]}"
fi
# REDIS_PORT is set per lane, for each test (run_lane_test)
echo "# binary: $TM_BUILD/taskmill${SAN_NAME:+ ($SAN_NAME)}"
echo "# $JOBS lane(s) (TM_TEST_JOBS)"

# ---- RabbitMQ: BEGIN (maintained with src/amqp/) --------------------------
# RABBIT_NODES rabbitmq-servers per run (TM_RABBIT_NODES, default 2, at
# most one per lane), started only when a test_amqp_* test is selected:
# each on loopback, with free AMQP, distribution and epmd ports, node
# taskmill-test-$$-K@localhost, and its data, logs, config and Erlang
# cookie (HOME) in $SCRATCH/rabbit-K. A test_amqp_* test has a node to
# itself while it runs (it may restart it, raise its alarms, count its
# connections): run_lane_test exports that node's RABBIT_PORT,
# RABBIT_NODE, RABBIT_BIN, RABBIT_HOME and RABBIT_EPMD_PORT for it (see
# lib_amqp.sh). Not started (the amqp tests then skip) when
# rabbitmq-server is not installed, nor for the test_amqp_cluster_* tests,
# which start a cluster of their own (lib_rabbit_cluster.sh).
RABBIT_BIN=${TM_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
RABBIT_NODES=${TM_RABBIT_NODES:-2}
[[ $RABBIT_NODES =~ ^[1-9]$ ]] || {
	echo "run.sh: TM_RABBIT_NODES must be 1-9 (got '$RABBIT_NODES')" >&2
	exit 2
}
((RABBIT_NODES <= JOBS)) || RABBIT_NODES=$JOBS
# per node K: pid, ports, HOME and name; RNODE_LANE[K] is the lane whose
# test uses it (unset: free)
R_PID=() R_PORT=() R_DIST=() R_EPMD=() R_HOME=() R_NAME=() RNODE_LANE=()

# rabbitctl_node K ARGS...: rabbitmqctl against node K.
rabbitctl_node() {
	local k=$1
	shift
	timeout 40 env HOME="${R_HOME[k]}" ERL_EPMD_PORT="${R_EPMD[k]}" \
		"$RABBIT_BIN/rabbitmqctl" -n "${R_NAME[k]}" "$@"
}

stop_rabbit() {
	local k=$1 i pid=${R_PID[$1]:-}
	[[ -n $pid ]] || return 0
	rabbitctl_node "$k" stop >/dev/null 2>&1 || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		((i == 50)) && kill -TERM "$pid" 2>/dev/null
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	R_PID[k]=
	# the node started a private epmd on its epmd port: end it too
	ERL_EPMD_PORT=${R_EPMD[k]} timeout 5 epmd -kill >/dev/null 2>&1 || true
}

stop_rabbits() {
	local k
	for k in "${!R_PID[@]}"; do
		stop_rabbit "$k"
	done
}

# launch_rabbit K: start node K's server on ports no node uses, without
# waiting for it. Ports below 32000, out of the kernel's ephemeral range,
# as lib.sh's.
launch_rabbit() {
	local k=$1 p ports=() i home=$SCRATCH/rabbit-$1
	for ((i = 0; i < 200 && ${#ports[@]} < 3; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		port_is_free "$p" && [[ " ${ports[*]} ${R_PORT[*]} ${R_DIST[*]} ${R_EPMD[*]} " != *" $p "* ]] &&
			ports+=("$p")
	done
	((${#ports[@]} == 3)) || return 1
	R_PORT[k]=${ports[0]} R_DIST[k]=${ports[1]} R_EPMD[k]=${ports[2]}
	R_HOME[k]=$home R_NAME[k]=taskmill-test-$$-$k@localhost
	mkdir -p "$home"
	: >"$home/enabled_plugins"
	printf '%s\n' "listeners.tcp.default = 127.0.0.1:${R_PORT[k]}" \
		'loopback_users = none' 'log.console = false' \
		'log.file.level = info' 'disk_free_limit.absolute = 1MB' \
		>"$home/rabbitmq.conf"
	(
		cd "$home" &&
			export HOME="$home" ERL_EPMD_PORT="${R_EPMD[k]}" \
				ERL_CRASH_DUMP="$home/erl_crash.dump" \
				RABBITMQ_NODENAME="${R_NAME[k]}" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
				RABBITMQ_NODE_PORT="${R_PORT[k]}" RABBITMQ_DIST_PORT="${R_DIST[k]}" \
				RABBITMQ_MNESIA_BASE="$home/mnesia" RABBITMQ_LOG_BASE="$home/log" \
				RABBITMQ_CONFIG_FILE="$home/rabbitmq.conf" \
				RABBITMQ_ENABLED_PLUGINS_FILE="$home/enabled_plugins" &&
			exec "$RABBIT_BIN/rabbitmq-server"
	) >"$home/server.log" 2>&1 &
	R_PID[k]=$!
}

# await_rabbit K: wait (bounded) until node K serves AMQP; 1 when it died
# or did not come up.
await_rabbit() {
	local k=$1 deadline=$((SECONDS + 60))
	while ((SECONDS < deadline)); do
		kill -0 "${R_PID[k]}" 2>/dev/null || return 1
		rabbitctl_node "$k" await_startup --timeout 30 >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

# start_rabbits: launch every node, then wait for each; a node that could
# not start (a port taken meanwhile) gets other ports, up to 3 tries.
start_rabbits() {
	local k attempt
	for ((k = 0; k < RABBIT_NODES; k++)); do
		launch_rabbit "$k" || true
	done
	for ((k = 0; k < RABBIT_NODES; k++)); do
		for ((attempt = 0; attempt < 3; attempt++)); do
			[[ -n ${R_PID[k]:-} ]] && await_rabbit "$k" && continue 2
			stop_rabbit "$k"
			launch_rabbit "$k" || true
		done
		echo "run.sh: could not start rabbitmq-server; its log:" >&2
		tail -n 20 "$SCRATCH/rabbit-$k/server.log" >&2 2>/dev/null
		return 1
	done
}

for t in "${tests[@]}"; do
	# the cluster tests start their own nodes (lib_rabbit_cluster.sh)
	[[ ${t##*/} == test_amqp_* && ${t##*/} != test_amqp_cluster_* ]] || continue
	if [[ -x $RABBIT_BIN/rabbitmq-server ]]; then
		start_rabbits || exit 1
		v=$(cd "$RABBIT_BIN/../lib" 2>/dev/null && ls -d rabbitmq_server-* 2>/dev/null | head -n 1)
		for k in "${!R_PID[@]}"; do
			echo "# rabbitmq-server ${v#rabbitmq_server-} on 127.0.0.1:${R_PORT[k]} (${R_NAME[k]})"
		done
	fi
	break
done

# free_rabbit: the index of a node no test uses, or nothing.
free_rabbit() {
	local k
	for k in "${!R_PID[@]}"; do
		[[ -n ${RNODE_LANE[k]:-} ]] || { echo "$k"; return 0; }
	done
}
# ---- RabbitMQ: END ---------------------------------------------------------

# job_gone PID: the lane's job has ended (gone, or a zombie not yet waited).
job_gone() {
	local state
	state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 0
	[[ -z $state || $state == Z ]]
}

# show_logs DIR: the end of every log a failed test left.
show_logs() {
	local f
	for f in "$1"/test.log "$1"/daemon.*.log "$1"/cli.log; do
		[[ -s $f ]] || continue
		echo "#   --- ${f##*/} (last 40 lines)"
		tail -n 40 "$f" | sed 's/^/#   /'
	done
}

# SERIAL[TEST]=1: the test declares "# run.sh: serial" (it uses something
# global, such as a fixed port: never at the same time as another such test).
# ALONE[TEST]=1: "# run.sh: alone" (it loads the machine on purpose, or its
# outcome depends on CPU time: it runs while no other test does; such tests
# wait until no lane is busy, so in practice they run last).
declare -A SERIAL=() ALONE=()
for t in "${tests[@]}"; do
	grep -qx '# run.sh: serial' "$t" && SERIAL[$t]=1
	grep -qx '# run.sh: alone' "$t" && ALONE[$t]=1
done

# run_lane_test LANE TEST DIR: the lane's job (a background subshell): run the
# test under its watchdog against the lane's redis, kill the daemons it left,
# then post "LANE STATUS MS" on fd 3 (the lanes FIFO: one short line, an
# atomic write). The watchdog runs in the background so that its pid is in
# DIR/watchdog.pid for an interrupted run's clean-up.
run_lane_test() {
	local lane=$1 t=$2 dir=$3 name start rc=0 wd
	name=$(basename "$t" .sh)
	name=${name#test_}
	start=$(date +%s%N)
	# shellcheck disable=SC2016  # expanded by the test's own bash
	local limit=$TEST_TIMEOUT
	# a cluster test starts three RabbitMQ nodes first (about 30 s), or
	# moves slots and fails Redis masters over
	[[ $name != amqp_cluster_* && $name != redis_cluster ]] ||
		((limit >= 300)) || limit=300
	# a test_amqp_* test's own node (the scheduler gave it one)
	local rk=${LANE_RNODE[lane]:-}
	if [[ -n $rk ]]; then
		export RABBIT_PORT=${R_PORT[rk]} RABBIT_NODE=${R_NAME[rk]} \
			RABBIT_BIN RABBIT_HOME=${R_HOME[rk]} RABBIT_EPMD_PORT=${R_EPMD[rk]}
	fi
	TEST_DIR=$dir REDIS_PORT=${LANE_REDIS_PORT[lane]} \
		TM_PORT_LO=$((20000 + lane * (12000 / JOBS))) \
		TM_PORT_SPAN=$((12000 / JOBS)) \
		timeout -k 5 "$limit" bash -c '
		set -eEuo pipefail
		trap '\''echo "ERROR: line $LINENO: $BASH_COMMAND (status $?)" >&2'\'' ERR
		cd "$TEST_DIR"
		source "$1"
		source "$2"
	' "test_$name" "$HERE/lib.sh" "$t" >"$dir/test.log" 2>&1 </dev/null 3>&- &
	wd=$!
	echo "$wd" >"$dir/watchdog.pid"
	wait "$wd" || rc=$?
	kill_test_daemons "$dir"
	echo "$lane $rc $((($(date +%s%N) - start) / 1000000))" >&3
}

passed=0
failed=0
skipped=0

# report NAME DIR RC MS: print a finished test's line (and logs) and count it.
report() {
	local name=$1 dir=$2 rc=$3 elapsed=$4 why= reason
	if ((rc == 124 || rc == 137)); then
		why="timed out (watchdog: TM_TEST_TIMEOUT, at least 300 s for cluster tests)"
	elif ((rc == 77)); then
		why=skip
	elif ((rc != 0)); then
		why="exit status $rc"
	fi
	if ((SANITIZED)) && [[ $why != skip ]] &&
		grep -Eqs "$SAN_PATTERN" "$dir"/*.log; then
		why="${why:+$why; }sanitizer report"
		{
			echo "#   --- sanitizer report"
			grep -Eh -A 30 "$SAN_PATTERN" "$dir"/*.log | head -n 120 | sed 's/^/#   /'
		} >"$dir/sanitizer.txt"
	fi

	if [[ -z $why ]]; then
		echo "ok - $name (${elapsed} ms)"
		passed=$((passed + 1))
	elif [[ $why == skip ]]; then
		reason=$(sed -n 's/^SKIP: //p' "$dir/test.log" | tail -n 1)
		if ((SKIPS_AS_FAILS)); then
			echo "not ok - $name # SKIP counted as failure: $reason"
			failed=$((failed + 1))
		else
			echo "ok - $name # SKIP $reason"
			skipped=$((skipped + 1))
		fi
	else
		echo "not ok - $name ($why, ${elapsed} ms)"
		grep -E '^(FAIL|ERROR): ' "$dir/test.log" | head -n 5 | sed 's/^/#   /'
		[[ -f $dir/sanitizer.txt ]] && cat "$dir/sanitizer.txt"
		show_logs "$dir"
		failed=$((failed + 1))
	fi
}

# The scheduler. Invariants: a lane is busy iff LANE_DIR[lane] is set; at
# most one busy lane runs a serial test (serial_lane), a test_amqp_* test
# runs only on a RabbitMQ node no other test uses (RNODE_LANE[K] is the
# lane using node K, LANE_RNODE[LANE] the node of a lane) and at
# most one a test_amqp_cluster_* test, which starts a cluster of its own
# (cluster_lane: two clusters at once would be six nodes on the machine);
# a test marked alone runs (alone_lane) only while no other lane is busy;
# tests[] holds the tests not started yet, in the order to start them.
# Lanes post on the FIFO when their test ends.
mkfifo "$SCRATCH/lanes.fifo"
exec 3<>"$SCRATCH/lanes.fifo"
serial_lane=
cluster_lane=
alone_lane=
busy=0
while ((${#tests[@]} || busy)); do
	# every free lane takes the first test that may start now
	for ((lane = 0; lane < JOBS; lane++)); do
		[[ -z ${LANE_DIR[lane]:-} ]] || continue
		[[ -z $alone_lane ]] || break
		pick=
		for i in "${!tests[@]}"; do
			t=${tests[i]}
			if [[ -n ${ALONE[$t]:-} ]]; then
				((busy == 0)) || continue
			fi
			if [[ -n ${SERIAL[$t]:-} ]]; then
				[[ -z $serial_lane ]] || continue
			fi
			if [[ ${t##*/} == test_amqp_cluster_* ]]; then
				[[ -z $cluster_lane ]] || continue
			elif [[ ${t##*/} == test_amqp_* && ${#R_PID[@]} -gt 0 ]]; then
				[[ -n $(free_rabbit) ]] || continue
			fi
			pick=$i
			break
		done
		[[ -n $pick ]] || break
		t=${tests[pick]}
		unset 'tests[pick]'
		tests=("${tests[@]}")
		name=$(basename "$t" .sh)
		name=${name#test_}
		dir=$SCRATCH/$name
		# a test named more than once (to repeat it) gets a directory per
		# run: runs in other lanes would share its files and ports
		rep=1
		while [[ -e $dir ]]; do
			rep=$((rep + 1))
			dir=$SCRATCH/$name.$rep
		done
		mkdir -p "$dir"
		if [[ $(redis-cli -h 127.0.0.1 -p "${LANE_REDIS_PORT[lane]}" FLUSHALL 2>&1) != OK ]]; then
			echo "not ok - $name # FLUSHALL failed"
			failed=$((failed + 1))
			lane=$((lane - 1)) # the lane is still free: try the next test
			continue
		fi
		[[ -n ${SERIAL[$t]:-} ]] && serial_lane=$lane
		if [[ ${t##*/} == test_amqp_cluster_* ]]; then
			cluster_lane=$lane
		elif [[ ${t##*/} == test_amqp_* && ${#R_PID[@]} -gt 0 ]]; then
			k=$(free_rabbit)
			RNODE_LANE[k]=$lane
			LANE_RNODE[lane]=$k
		fi
		[[ -n ${ALONE[$t]:-} ]] && alone_lane=$lane
		LANE_DIR[lane]=$dir
		run_lane_test "$lane" "$t" "$dir" &
		LANE_JOB[lane]=$!
		busy=$((busy + 1))
	done
	((busy)) || continue # every test that was left failed its FLUSHALL

	# one lane ends its test. A lane's job killed from outside never posts:
	# once it is gone (a job posts before it ends, so its line would be in
	# the FIFO by then) its test counts as failed.
	until read -r -t 30 lane rc elapsed <&3; do
		for i in "${!LANE_JOB[@]}"; do
			job_gone "${LANE_JOB[i]}" || continue
			read -r -t 1 lane rc elapsed <&3 || { lane=$i rc=143 elapsed=0; }
			break 2
		done
	done
	wait "${LANE_JOB[lane]}" 2>/dev/null || true
	dir=${LANE_DIR[lane]}
	unset 'LANE_DIR[lane]' 'LANE_JOB[lane]'
	busy=$((busy - 1))
	[[ $serial_lane == "$lane" ]] && serial_lane=
	if [[ -n ${LANE_RNODE[lane]:-} ]]; then
		unset 'RNODE_LANE[LANE_RNODE[lane]]' 'LANE_RNODE[lane]'
	fi
	[[ $cluster_lane == "$lane" ]] && cluster_lane=
	[[ $alone_lane == "$lane" ]] && alone_lane=
	report "${dir##*/}" "$dir" "$rc" "$elapsed"
done
exec 3>&-

if ((skipped)); then
	echo "$passed passed, $failed failed, $skipped skipped"
else
	echo "$passed passed, $failed failed"
fi
((failed == 0))
