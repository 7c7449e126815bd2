# shellcheck shell=bash
# Fault injection for taskmill's integration tests: break the broker side on
# loopback, on command. Sourced by a test after lib.sh (which run.sh has
# already sourced):
#
#   . "$TM_SRCDIR/tests/integration/lib_fault.sh"
#
# A TCP proxy between daemon and broker (build/test-tools/tcpproxy, built by
# `make test-plugins`) passes, delays, blackholes, cuts or refuses
# connections; helpers drive Redis into OOM (maxmemory, noeviction), kill its
# clients, stall it (DEBUG SLEEP), start a read-only replica, and raise
# RabbitMQ's memory and disk alarms. Everything a helper starts or changes
# is undone when the test exits (lib.sh's tm_on_exit), since the run's Redis
# and RabbitMQ are shared by the tests that follow. tests/README.md has an
# example.

: "${TEST_DIR:?lib_fault.sh is sourced after lib.sh}"
declare -F tm_on_exit >/dev/null || {
	echo "lib_fault.sh: source lib.sh first" >&2
	exit 1
}

FAULT_PROXY_BIN=$TM_BUILD/test-tools/tcpproxy

# ------------------------------------------------------------ the proxy

# Per proxy NAME: FAULT_PORT_<NAME> (where clients connect),
# FAULT_CTL_<NAME> (its control port) and FAULT_PID_<NAME>; its stderr (one
# line per command) in TEST_DIR/proxy.NAME.log.

# fault_name_ok NAME: NAME can be part of a shell variable name.
fault_name_ok() {
	[[ $1 =~ ^[A-Za-z0-9_]+$ ]] || fail "fault proxy name '$1': use letters, digits, _"
}

# fault_proxy_start NAME TARGET_PORT: start a proxy on a free loopback port
# forwarding to 127.0.0.1:TARGET_PORT, in pass mode. Sets FAULT_PORT_<NAME>
# to its listen port. It is stopped when the test exits.
fault_proxy_start() {
	local name=$1 target=$2 out i lport='' cport='' pid
	fault_name_ok "$name"
	[[ -x $FAULT_PROXY_BIN ]] ||
		fail "$FAULT_PROXY_BIN not found: build it with make test-plugins"
	out=$TEST_DIR/proxy.$name.ports
	: >"$out"
	# Port 0: the proxy binds a free port itself and prints it (no race).
	"$FAULT_PROXY_BIN" 0 "127.0.0.1:$target" 0 >"$out" \
		2>>"$TEST_DIR/proxy.$name.log" &
	pid=$!
	printf -v "FAULT_PID_$name" '%s' "$pid"
	tm_on_exit "fault_proxy_stop $name"
	for ((i = 0; i < 100; i++)); do
		{ read -r lport && read -r cport; } <"$out" || true
		[[ -n $cport ]] && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	[[ $lport =~ ^[0-9]+$ && $cport =~ ^[0-9]+$ ]] ||
		fail "fault proxy $name did not start: $(tail -n 5 "$TEST_DIR/proxy.$name.log")"
	printf -v "FAULT_PORT_$name" '%s' "$lport"
	printf -v "FAULT_CTL_$name" '%s' "$cport"
	note "fault proxy $name pid $pid: 127.0.0.1:$lport -> 127.0.0.1:$target (control $cport)"
}

# fault_proxy NAME COMMAND...: send each COMMAND (one argument each: pass,
# cut, refuse, stats, "delay MS", "blackhole both|up|down") to the proxy and
# wait (10 s at most) for its answer. Fails on an error answer; prints the
# answers other than "ok" (those of stats).
fault_proxy() {
	local name=$1 cmd reply fd ctl
	shift
	fault_name_ok "$name"
	ctl=FAULT_CTL_$name
	[[ -n ${!ctl:-} ]] || fail "fault_proxy: no proxy named $name"
	for cmd in "$@"; do
		reply=
		exec {fd}<>"/dev/tcp/127.0.0.1/${!ctl}" ||
			fail "fault_proxy $name: control port ${!ctl} does not answer"
		printf '%s\n' "$cmd" >&"$fd"
		read -r -t 10 -u "$fd" reply || true
		exec {fd}>&-
		case $reply in
		ok) ;;
		conns\ *) printf '%s\n' "$reply" ;;
		*) fail "fault_proxy $name '$cmd': ${reply:-no answer within 10 s}" ;;
		esac
	done
}

# fault_proxy_stat NAME FIELD: one number of the proxy's stats (conns,
# bytes_up, bytes_down).
fault_proxy_stat() {
	local -a f
	local line
	line=$(fault_proxy "$1" stats) || fail "fault_proxy $1 stats failed"
	read -r -a f <<<"$line"
	case $2 in
	conns) echo "${f[1]}" ;;
	bytes_up) echo "${f[3]}" ;;
	bytes_down) echo "${f[5]}" ;;
	*) fail "fault_proxy_stat: no field $2" ;;
	esac
}

# fault_proxy_stop NAME: stop the proxy (SIGTERM, SIGKILL after 5 s); its
# connections are reset. Does nothing when it is not running.
fault_proxy_stop() {
	local name=$1 pidv i
	fault_name_ok "$name"
	pidv=FAULT_PID_$name
	[[ -n ${!pidv:-} ]] || return 0
	kill -TERM "${!pidv}" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "${!pidv}" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "${!pidv}" 2>/dev/null || true
	wait "${!pidv}" 2>/dev/null || true
	printf -v "FAULT_PID_$name" '%s' ''
	printf -v "FAULT_CTL_$name" '%s' ''
}

# ------------------------------------------------------------------ redis

# fault_rcli PORT ARGS...: redis-cli against 127.0.0.1:PORT; fails the test
# on an error reply (redis-cli prints those and exits 0).
fault_rcli() {
	local port=$1 out
	shift
	out=$(redis-cli -h 127.0.0.1 -p "$port" "$@" 2>&1) ||
		fail "redis-cli -p $port $*: $out"
	if [[ $out =~ ^(ERR|[A-Z]+ERR|OOM|READONLY|NOPERM|BUSY|LOADING)( |$) ]]; then
		fail "redis-cli -p $port $*: $out"
	fi
	printf '%s\n' "$out"
}

declare -A FAULT_OOM_SAVED=()

# redis_oom PORT on|off: on makes every write that allocates (XADD, SET...)
# fail with "OOM command not allowed" (maxmemory 1 byte, policy noeviction;
# XACK, XCLAIM, reads and deletes still work); off restores the server's
# maxmemory and policy as they were before "on". Undone at exit.
redis_oom() {
	local port=$1 mode=$2 mm pol
	case $mode in
	on)
		if [[ -z ${FAULT_OOM_SAVED[$port]:-} ]]; then
			mm=$(fault_rcli "$port" CONFIG GET maxmemory | sed -n 2p)
			pol=$(fault_rcli "$port" CONFIG GET maxmemory-policy | sed -n 2p)
			FAULT_OOM_SAVED[$port]="$mm $pol"
			# a subshell: a failing clean-up must not end the others
			tm_on_exit "(redis_oom $port off)"
		fi
		fault_rcli "$port" CONFIG SET maxmemory-policy noeviction >/dev/null
		fault_rcli "$port" CONFIG SET maxmemory 1 >/dev/null
		;;
	off)
		[[ -n ${FAULT_OOM_SAVED[$port]:-} ]] || return 0
		read -r mm pol <<<"${FAULT_OOM_SAVED[$port]}"
		fault_rcli "$port" CONFIG SET maxmemory "$mm" >/dev/null
		fault_rcli "$port" CONFIG SET maxmemory-policy "$pol" >/dev/null
		unset "FAULT_OOM_SAVED[$port]"
		;;
	*) fail "redis_oom: on or off, not '$mode'" ;;
	esac
	note "redis on port $port: OOM $mode"
}

# redis_kill_clients PORT [TYPE]: CLIENT KILL every client of TYPE (normal,
# the default; pubsub, replica, master) but this redis-cli itself. Prints
# how many were killed.
redis_kill_clients() {
	local port=$1 type=${2:-normal} n
	n=$(fault_rcli "$port" CLIENT KILL TYPE "$type" SKIPME yes)
	note "redis on port $port: killed $n clients of type $type"
	echo "$n"
}

FAULT_SLEEP_PIDS=()

# redis_debug_sleep PORT SECONDS: stall the server (DEBUG SLEEP, it answers
# nobody meanwhile) for SECONDS (decimals allowed), in the background;
# returns once the server has stopped answering. The server must allow
# DEBUG from local clients (run.sh's and priv_redis_start's do:
# enable-debug-command local). Reaped at exit.
redis_debug_sleep() {
	local port=$1 secs=$2 pid i
	fault_rcli "$port" CONFIG GET enable-debug-command | grep -qxE 'yes|local' ||
		fail "redis on port $port refuses DEBUG (start it with --enable-debug-command local)"
	redis-cli -h 127.0.0.1 -p "$port" DEBUG SLEEP "$secs" >/dev/null 2>&1 &
	pid=$!
	if ((${#FAULT_SLEEP_PIDS[@]} == 0)); then
		tm_on_exit 'fault_reap_sleeps'
	fi
	FAULT_SLEEP_PIDS+=("$pid")
	# it stalls once the PING below gets no answer within 0.5 s
	for ((i = 0; i < 50; i++)); do
		timeout 0.5 redis-cli -h 127.0.0.1 -p "$port" PING >/dev/null 2>&1 || break
		sleep 0.05
	done
	note "redis on port $port: DEBUG SLEEP $secs (redis-cli pid $pid)"
}

# fault_reap_sleeps: wait for the DEBUG SLEEP clients (test clean-up; the
# server answers again once each sleep ends).
fault_reap_sleeps() {
	local pid
	for pid in "${FAULT_SLEEP_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	FAULT_SLEEP_PIDS=()
}

REPLICA_PORT=
REPLICA_PID=

# redis_replica_start MASTER_PORT: start a private redis-server replicating
# 127.0.0.1:MASTER_PORT, read-only (writes get "READONLY You can't write
# against a read only replica"), data in TEST_DIR/replica; wait until its
# link to the master is up. Sets REPLICA_PORT and REPLICA_PID. Stopped at
# exit.
redis_replica_start() {
	local master=$1 dir=$TEST_DIR/replica i
	[[ -z $REPLICA_PID ]] || fail "redis_replica_start: a replica already runs"
	REPLICA_PORT=$(free_port)
	mkdir -p "$dir"
	redis-server --bind 127.0.0.1 --port "$REPLICA_PORT" --dir "$dir" \
		--save '' --appendonly no --daemonize no \
		--enable-debug-command local \
		--replicaof 127.0.0.1 "$master" --replica-read-only yes \
		--logfile "$dir/redis.log" &
	REPLICA_PID=$!
	tm_on_exit 'redis_replica_stop'
	for ((i = 0; i < 200; i++)); do
		if redis-cli -h 127.0.0.1 -p "$REPLICA_PORT" INFO replication 2>/dev/null |
			grep -q '^master_link_status:up'; then
			note "read-only replica of port $master: pid $REPLICA_PID on port $REPLICA_PORT"
			return 0
		fi
		kill -0 "$REPLICA_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$dir/redis.log" >&2 || true
	fail "replica of port $master on port $REPLICA_PORT: no link to the master within 20 s"
}

# redis_replica_promote: make the replica a master (REPLICAOF NO ONE), as a
# failover would; it accepts writes from then on.
redis_replica_promote() {
	[[ -n $REPLICA_PID ]] || fail "redis_replica_promote: no replica"
	fault_rcli "$REPLICA_PORT" REPLICAOF NO ONE >/dev/null
}

# redis_replica_stop: end the replica, if it runs.
redis_replica_stop() {
	[[ -n $REPLICA_PID ]] || return 0
	kill -KILL "$REPLICA_PID" 2>/dev/null || true
	wait "$REPLICA_PID" 2>/dev/null || true
	REPLICA_PID=
}

# --------------------------------------------------------------- rabbitmq

# fault_rabbitctl ARGS...: rabbitmqctl against the run's node (run.sh starts
# it when an amqp test is selected; see lib_amqp.sh).
fault_rabbitctl() {
	[[ -n ${RABBIT_NODE:-} ]] ||
		fail "no rabbitmq node for this run (run.sh starts one for test_amqp_* tests)"
	# shellcheck disable=SC2153 # exported by run.sh with RABBIT_NODE
	HOME=$RABBIT_HOME ERL_EPMD_PORT=$RABBIT_EPMD_PORT timeout 60 \
		"$RABBIT_BIN/rabbitmqctl" -n "$RABBIT_NODE" "$@"
}

# rabbit_alarms: the node's resource alarms raised now ("memory", "disk"),
# one per line.
rabbit_alarms() {
	fault_rabbitctl eval 'rabbit_alarm:get_alarms().' |
		grep -oE 'resource_limit,(memory|disk)' | sed 's/.*,//' | sort -u
}

# fault_rabbit_alarm KIND on|off SET_CMD ON_VALUE OFF_VALUE: set the limit,
# wait (30 s at most) until the alarm is raised or cleared.
fault_rabbit_alarm() {
	local kind=$1 mode=$2 cmd=$3 on=$4 off=$5 i
	case $mode in
	on) fault_rabbitctl "$cmd" "$on" >/dev/null ;;
	off) fault_rabbitctl "$cmd" "$off" >/dev/null ;;
	*) fail "rabbit_${kind}_alarm: on or off, not '$mode'" ;;
	esac
	for ((i = 0; i < 300; i++)); do
		if rabbit_alarms | grep -qx "$kind"; then
			[[ $mode == on ]] && break
		else
			[[ $mode == off ]] && break
		fi
		sleep 0.1
	done
	((i < 300)) || fail "rabbitmq $kind alarm not $mode within 30 s"
	note "rabbitmq $kind alarm $mode"
}

declare -A FAULT_RABBIT_HOOKED=()

# fault_rabbit_hook KIND: clear the KIND alarm at exit (once).
fault_rabbit_hook() {
	[[ -n ${FAULT_RABBIT_HOOKED[$1]:-} ]] && return 0
	FAULT_RABBIT_HOOKED[$1]=1
	tm_on_exit "(rabbit_$1_alarm off)"
}

# rabbit_mem_alarm on|off: raise the node's memory alarm (watermark 0: the
# broker blocks every publishing connection) or clear it (back to 0.4, the
# default). Waits until the alarm is in that state; cleared at exit.
rabbit_mem_alarm() {
	fault_rabbit_hook mem
	fault_rabbit_alarm memory "$1" set_vm_memory_high_watermark 0 0.4
}

# rabbit_disk_alarm on|off: raise the node's disk alarm (a free-disk limit
# no disk has: publishers are blocked) or clear it (back to run.sh's 1MB).
# Waits until the alarm is in that state; cleared at exit.
rabbit_disk_alarm() {
	fault_rabbit_hook disk
	fault_rabbit_alarm disk "$1" set_disk_free_limit 1000000000GB 1MB
}
