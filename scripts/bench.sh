#!/usr/bin/env bash
# The taskmill benchmark (DESIGN.md, Performance; issue 8). `make bench` runs
#
#   scripts/bench.sh BUILD_DIR
#
# after building BUILD_DIR/taskmill, its plugins and BUILD_DIR/bench/* (the
# helper programs of bench/, see bench/README.md). Everything runs on this
# host: a private redis-server and, when rabbitmq-server is installed, a
# private RabbitMQ node, on free loopback ports in a scratch dir that is
# removed at the end. Prints one table and writes it as JSON to
# BUILD_DIR/bench/results.json (or $BENCH_OUT).
#
# Throughput: N messages with body {} are pre-loaded, then only the consumer
# runs: the ceiling loop (bench/ceiling_redis.c, bench/ceiling_amqp.c) or
# the daemon with the noop task. bench/measure.c watches the broker and
# times first delivery -> last ack; it also takes CPU (consumer, broker,
# rest of the host) and RSS from /proc. Each configuration runs
# BENCH_REPEAT times, interleaved; the best run is shown (load from elsewhere
# only slows a run down), with every run's rate in its notes.
#
# Knobs (environment):
#   BENCH_QUICK=1           ~1 minute smoke run: small N, one repeat
#   BENCH_N                 Redis messages per run (1000000)
#   BENCH_AMQP_N            RabbitMQ messages per run (300000)
#   BENCH_REPEAT            runs per configuration (3)
#   BENCH_PREFETCH          Redis prefetch of the daemon, and the ceiling's
#                           unacknowledged bound (1024)
#   BENCH_AMQP_PREFETCH     the same for RabbitMQ (1024)
#   BENCH_POOLS             Redis daemon pools ("thread:4 thread:2 fork:4 fork:2")
#   BENCH_AMQP_POOLS        RabbitMQ daemon pools ("thread:4 fork:4"); a
#                           thread x4 daemon also runs on a quorum queue,
#                           reported next to classic (ratio, no target)
#   BENCH_FLAT              stream sizes of the flatness runs ("100000 2000000")
#   BENCH_LAT_RATE, BENCH_LAT_SECONDS   latency publisher (1000 /s, 5 s)
#   BENCH_SCALE_TASKS       noop tasks of the idle scale run (500)
#   BENCH_SCALE_SPREAD      tasks the spread throughput run uses (100)
#   BENCH_SCALE_N           messages of each scale throughput run (300000)
#   BENCH_SCALE_IDLE_S      seconds the idle scale run is watched (20)
#   BENCH_AMQP=auto|no      RabbitMQ part (auto: when rabbitmq-server exists)
#   BENCH_AMQP_PERSISTENT=1 pre-load RabbitMQ with delivery_mode 2
#   BENCH_OUT               JSON output path
#   BENCH_KEEP=1            keep the scratch dir (logs, configs)
#   BENCH_COMMIT            label of the build in the output (default: git)
#   BENCH_HOSTS             language hosts measured next to the C noop
#                           ("lua python exec"; those not built are skipped)
#   BENCH_HOST_POOLS        their pools ("thread:4 fork:4")
#   BENCH_HOST_N            messages per host run (50000; quick 5000: then
#                           the workers' start, e.g. Python's, weighs in)
#   BENCH_EXEC_N            messages per exec run (2000; quick 300)
set -euo pipefail

BUILD=${1:?usage: scripts/bench.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TM=$BUILD/taskmill
BB=$BUILD/bench
for f in "$TM" "$BUILD"/plugins/{noop,add,sleep,fail,journal}.so \
	"$BB"/{measure,load_redis,ceiling_redis,pub_rate,load_amqp,ceiling_amqp}; do
	[[ -x $f || -f $f ]] || {
		echo "bench: $f not found; run make all bench-bins first" >&2
		exit 1
	}
done
for tool in redis-server redis-cli curl awk; do
	command -v "$tool" >/dev/null 2>&1 ||
		{ echo "bench: '$tool' not found; run scripts/install-deps.sh" >&2; exit 1; }
done

QUICK=${BENCH_QUICK:-0}
if [[ $QUICK == 1 ]]; then
	N=${BENCH_N:-100000}
	AMQP_N=${BENCH_AMQP_N:-30000}
	REPEAT=${BENCH_REPEAT:-1}
	FLAT=${BENCH_FLAT:-"50000 500000"}
	LAT_SECONDS=${BENCH_LAT_SECONDS:-2}
	HOST_N=${BENCH_HOST_N:-5000}
	EXEC_N=${BENCH_EXEC_N:-300}
else
	N=${BENCH_N:-1000000}
	AMQP_N=${BENCH_AMQP_N:-300000}
	REPEAT=${BENCH_REPEAT:-3}
	FLAT=${BENCH_FLAT:-"100000 2000000"}
	LAT_SECONDS=${BENCH_LAT_SECONDS:-5}
	HOST_N=${BENCH_HOST_N:-50000}
	EXEC_N=${BENCH_EXEC_N:-2000}
fi
HOSTS=${BENCH_HOSTS:-"lua python exec"}
HOST_POOLS=${BENCH_HOST_POOLS:-"thread:4 fork:4"}
PREFETCH=${BENCH_PREFETCH:-1024}
AMQP_PREFETCH=${BENCH_AMQP_PREFETCH:-1024}
POOLS=${BENCH_POOLS:-"thread:4 thread:2 fork:4 fork:2"}
AMQP_POOLS=${BENCH_AMQP_POOLS:-"thread:4 fork:4"}
LAT_RATE=${BENCH_LAT_RATE:-1000}
AMQP_MODE=${BENCH_AMQP:-auto}
OUT=${BENCH_OUT:-$BB/results.json}
# The ceiling keeps as many entries unacknowledged as the daemon may
# (prefetch): two reads of prefetch/2 in flight.
CEIL_DEPTH=2
CEIL_COUNT=$((PREFETCH / CEIL_DEPTH > 0 ? PREFETCH / CEIL_DEPTH : 1))

DIR=$(mktemp -d "${TMPDIR:-/tmp}/taskmill-bench.XXXXXX")
R=$DIR/results # one JSON object per file
mkdir -p "$R"
REDIS_PID=
RABBIT_PID=
RABBIT_NODE=
DAEMON_PID=
T0=$SECONDS

log() {
	printf '[bench %3ds] %s\n' $((SECONDS - T0)) "$*" >&2
}

now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# wait_gone PID SECONDS: wait for a process to exit; 1 if it did not.
wait_gone() {
	local deadline=$(($(now_ms) + $2 * 1000))
	while kill -0 "$1" 2>/dev/null; do
		(($(now_ms) < deadline)) || return 1
		sleep 0.05
	done
	wait "$1" 2>/dev/null || true
}

stop_daemon() {
	[[ -n $DAEMON_PID ]] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null || true
	wait_gone "$DAEMON_PID" 20 || kill -KILL "$DAEMON_PID" 2>/dev/null || true
	DAEMON_PID=
}

cleanup() {
	local rc=$?
	stop_daemon
	if [[ -n $REDIS_PID ]]; then
		kill -TERM "$REDIS_PID" 2>/dev/null || true
		wait_gone "$REDIS_PID" 10 || kill -KILL "$REDIS_PID" 2>/dev/null || true
	fi
	if [[ -n $RABBIT_PID ]]; then
		rabbitctl shutdown >/dev/null 2>&1 || true
		wait_gone "$RABBIT_PID" 20 || kill -KILL "$RABBIT_PID" 2>/dev/null || true
	fi
	if ((rc != 0)); then
		local f
		for f in "$DIR"/*.log; do
			[[ -s $f ]] || continue
			echo "--- $f (last 15 lines)" >&2
			tail -n 15 "$f" >&2
		done
	fi
	if [[ ${BENCH_KEEP:-0} == 1 ]]; then
		echo "bench: scratch dir kept: $DIR" >&2
	else
		rm -rf "$DIR"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_port: a free loopback port below the ephemeral range, where no
# outgoing connection of a client can be holding it.
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((EPHEMERAL_LOW > 21000)) || EPHEMERAL_LOW=60000
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % (EPHEMERAL_LOW - 20000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "bench: no free port" >&2
	return 1
}

# jget FILE KEY: a number or string field of a flat JSON object.
jget() {
	sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$1" | tr -d '"'
}

# calc EXPR: floating point arithmetic (awk).
calc() {
	awk "BEGIN { x = $1; print x }"
}

fmt_int() { # thousands separators
	awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); o = "";
		while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
		print s o }'
}

rcli() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# ---------------------------------------------------------------- daemon

# write_cfg FILE URL POOL_KIND POOL_SIZE HTTP_PORT TASKS_YAML
write_cfg() {
	cat >"$1" <<YAML
broker: { url: "$2"${BROKER_EXTRA:-} }
pool: { kind: $3, size: $4 }
plugin_dir: $BUILD/plugins
http: { listen: "127.0.0.1:$5" }
shutdown_timeout: 10s
log: { level: warning, format: text }
tasks:
$6
YAML
}

# start_daemon CFG LOG HTTP_PORT: run the daemon and wait for /ping 200.
start_daemon() {
	"$TM" run -c "$1" 2>>"$2" &
	DAEMON_PID=$!
	local deadline=$(($(now_ms) + 30000)) code
	while :; do
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$3/ping" || true)
		[[ $code == 200 ]] && return 0
		if ! kill -0 "$DAEMON_PID" 2>/dev/null || (($(now_ms) > deadline)); then
			echo "bench: the daemon did not become ready ($1); log:" >&2
			tail -n 20 "$2" >&2
			return 1
		fi
		sleep 0.05
	done
}

# pool_cfg KIND:SIZE -> "KIND SIZE"
pool_words() {
	echo "${1%%:*} ${1##*:}"
}

# ------------------------------------------------------------- the host

CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
NCPU=$(nproc)
MEM_GIB=$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
KERNEL=$(uname -r)
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
TM_VERSION=$("$TM" --version 2>/dev/null | head -n 1 || echo unknown)
COMMIT=${BENCH_COMMIT:-$(git -C "$SRCDIR" rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [[ -z ${BENCH_COMMIT:-} && -n $(git -C "$SRCDIR" status --porcelain -- src plugins 2>/dev/null) ]]; then
	COMMIT="$COMMIT+dirty"
fi
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

log "scratch dir $DIR; N=$N, AMQP N=$AMQP_N, $REPEAT run(s) per configuration"

# ------------------------------------------------------------------ Redis

REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DIR" --save '' \
	--appendonly no --daemonize no --logfile "$DIR/redis.log" &
REDIS_PID=$!
for ((i = 0; i < 100; i++)); do
	[[ $(rcli ping 2>/dev/null) == PONG ]] && break
	sleep 0.1
done
[[ $(rcli ping 2>/dev/null) == PONG ]] || { echo "bench: redis-server did not start" >&2; exit 1; }
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
GROUP=taskmill

# reset_group STREAM [FROM]: a fresh consumer group that has read up to
# FROM (default: nothing, 0).
reset_group() {
	rcli XGROUP DESTROY "$1" "$GROUP" >/dev/null
	rcli XGROUP CREATE "$1" "$GROUP" "${2:-0}" >/dev/null
}

# redis_run NAME STREAM COUNT LAST CONFIG [FROM]: one measured run into
# $R/NAME.json: the group starts after FROM (default 0: the whole stream)
# and COUNT entries up to LAST are consumed. CONFIG is "ceiling" or
# KIND:SIZE.
redis_run() {
	local name=$1 stream=$2 count=$3 last=$4 what=$5 from=${6:-0-0} cmd
	reset_group "$stream" "$from"
	if [[ $what == ceiling ]]; then
		cmd=("$BB/ceiling_redis" 127.0.0.1 "$REDIS_PORT" "$stream" "$GROUP"
			"$CEIL_COUNT" "$count" "$CEIL_DEPTH")
	else
		local kind size http
		read -r kind size < <(pool_words "$what")
		http=$(free_port)
		write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$kind" "$size" "$http" \
			"  noop: { plugin: noop.so, queue: $stream, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
		cmd=("$TM" run -c "$DIR/$name.yaml")
	fi
	if ! "$BB/measure" --n "$count" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$stream" --group "$GROUP" --last "$last" --from "$from" \
		--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
		-- "${cmd[@]}" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

# pick NAME_PREFIX best|median: copy the run with the highest (or the
# median) rate to $R/NAME_PREFIX.json and list every run's rate in it. Load
# from elsewhere on the host only ever slows a run down, so the best of a
# few is the least disturbed one; flatness compares medians of two sides.
pick() {
	local prefix=$1 which=$2 f rates=() files=()
	for f in "$R/$prefix".run*.json; do
		files+=("$f")
	done
	local chosen
	chosen=$(for f in "${files[@]}"; do echo "$(jget "$f" rate) $f"; done |
		sort -n | awk -v which="$which" '{ a[NR] = $2 }
			END { print which == "median" ? a[int((NR + 1) / 2)] : a[NR] }')
	for f in "${files[@]}"; do
		rates+=("$(jget "$f" rate)")
	done
	local list
	list=$(IFS=,; echo "${rates[*]}")
	sed "s/}\$/,\"runs\":[$list]}/" "$chosen" >"$R/$prefix.json"
}

best() { pick "$1" best; }
median() { pick "$1" median; }

log "Redis: loading $N entries"
LAST=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" bench.noop "$N" 2>>"$DIR/load.log")
rcli XGROUP CREATE bench.noop "$GROUP" 0 >/dev/null

read -r -a REDIS_CONFIGS <<<"ceiling $POOLS"
for ((rep = 1; rep <= REPEAT; rep++)); do
	for c in "${REDIS_CONFIGS[@]}"; do
		redis_run "redis.${c/:/}.run$rep" bench.noop "$N" "$LAST" "$c"
	done
done
for c in "${REDIS_CONFIGS[@]}"; do
	best "redis.${c/:/}"
done

# The language hosts: a noop-equivalent task of each (bench/hosts/), and
# the C noop again with the same N in the same pools, as the reference.
# host_task_yaml HOST STREAM: the task's YAML line.
host_task_yaml() {
	local common="queue: $2, group: $GROUP, prefetch: $PREFETCH, timeout: 0"
	case $1 in
	noop) echo "  noop: { plugin: noop.so, $common }" ;;
	lua) echo "  noop: { plugin: lua.so, $common, config: { script: $SRCDIR/bench/hosts/noop.lua } }" ;;
	python) echo "  noop: { plugin: python.so, $common, config: { module: bench_noop, path: [$SRCDIR/bench/hosts] } }" ;;
	exec) echo "  noop: { plugin: exec.so, $common, config: { command: [\"true\"] } }" ;;
	esac
}

# host_run NAME HOST KIND:SIZE COUNT: one measured run into $R/NAME.json.
host_run() {
	local name=$1 host=$2 what=$3 count=$4 stream=bench.host.$2 last kind size http
	rcli DEL "$stream" >/dev/null
	last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$stream" "$count" 2>>"$DIR/load.log")
	reset_group "$stream"
	read -r kind size < <(pool_words "$what")
	http=$(free_port)
	write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$kind" "$size" "$http" \
		"$(host_task_yaml "$host" "$stream")"
	if ! "$BB/measure" --n "$count" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$stream" --group "$GROUP" --last "$last" --from 0-0 \
		--broker-pid "$REDIS_PID" --timeout 600 --log "$DIR/$name.log" \
		-- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	rcli DEL "$stream" >/dev/null
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

BENCH_HOSTS_RUN=()
for h in $HOSTS; do
	if [[ -f $BUILD/plugins/$h.so ]]; then
		BENCH_HOSTS_RUN+=("$h")
	else
		log "host $h: $BUILD/plugins/$h.so not built, skipped"
	fi
done
if ((${#BENCH_HOSTS_RUN[@]} > 0)); then
	log "language hosts: N=$HOST_N (exec $EXEC_N), pools $HOST_POOLS"
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for c in $HOST_POOLS; do
			for h in noop "${BENCH_HOSTS_RUN[@]}"; do
				n=$HOST_N
				[[ $h == exec ]] && n=$EXEC_N
				host_run "host.$h.${c/:/}.run$rep" "$h" "$c" "$n"
			done
		done
	done
	for c in $HOST_POOLS; do
		for h in noop "${BENCH_HOSTS_RUN[@]}"; do
			best "host.$h.${c/:/}"
		done
	done
fi

# Flatness: the same work, a thread x4 daemon consuming FLAT_SMALL new
# entries, while the stream holds FLAT_SMALL entries in all, or FLAT_BIG:
# FLAT_BIG - FLAT_SMALL older ones that the group has already consumed
# and acknowledged (its last-delivered-id is past them, nothing pending),
# as on a stream that is never trimmed.
read -r FLAT_SMALL FLAT_BIG <<<"$FLAT"
# each side's runs are short (FLAT_SMALL messages): they alternate, so a
# change in the host's load hits both alike, and the median of each side
# is compared, not the best, which one lucky run would set
FLAT_REPEAT=$((REPEAT < 7 && QUICK != 1 ? 7 : REPEAT))
rcli DEL bench.noop >/dev/null # free the memory first
declare -A FLAT_FROM FLAT_LAST
for size in "$FLAT_SMALL" "$FLAT_BIG"; do
	log "Redis: a stream of $size entries, the last $FLAT_SMALL of them new (flatness)"
	FLAT_FROM[$size]=0-0
	if ((size > FLAT_SMALL)); then
		FLAT_FROM[$size]=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" \
			"bench.flat$size" $((size - FLAT_SMALL)) 2>>"$DIR/load.log")
	fi
	FLAT_LAST[$size]=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" \
		"bench.flat$size" "$FLAT_SMALL" 2>>"$DIR/load.log")
	rcli XGROUP CREATE "bench.flat$size" "$GROUP" 0 >/dev/null
done
for ((rep = 1; rep <= FLAT_REPEAT; rep++)); do
	for size in "$FLAT_SMALL" "$FLAT_BIG"; do
		redis_run "redis.flat$size.run$rep" "bench.flat$size" "$FLAT_SMALL" \
			"${FLAT_LAST[$size]}" thread:4 "${FLAT_FROM[$size]}"
	done
done
for size in "$FLAT_SMALL" "$FLAT_BIG"; do
	median "redis.flat$size"
	rcli DEL "bench.flat$size" >/dev/null
done

# Latency: publish -> ack at a steady rate, and the broker's own round trip.
log "Redis: latency at $LAT_RATE msgs/s for $LAT_SECONDS s"
HTTP=$(free_port)
write_cfg "$DIR/lat-redis.yaml" "$REDIS_URL" thread 4 "$HTTP" \
	"  noop: { plugin: noop.so, queue: bench.lat, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
start_daemon "$DIR/lat-redis.yaml" "$DIR/lat-redis.log" "$HTTP"
"$BB/pub_rate" rtt-redis 127.0.0.1 "$REDIS_PORT" 10000 >"$R/redis.rtt.json"
BENCH_PIDS="$DAEMON_PID $REDIS_PID" \
	"$BB/pub_rate" redis 127.0.0.1 "$REDIS_PORT" bench.lat "$LAT_RATE" "$LAT_SECONDS" \
	>"$R/redis.lat.json" || { echo "bench: latency run: $(cat "$R/redis.lat.json")" >&2; exit 1; }
stop_daemon

# Idle RSS: 4 workers, the five example tasks, 2 s after /ping turns 200.
idle_rss() { # idle_rss KIND NAME
	local http
	http=$(free_port)
	write_cfg "$DIR/idle-$1.yaml" "$REDIS_URL" "$1" 4 "$http" "$(
		cat <<YAML
  add: { plugin: add.so, queue: idle.add }
  noop: { plugin: noop.so, queue: idle.noop }
  sleep: { plugin: sleep.so, queue: idle.sleep }
  fail: { plugin: fail.so, queue: idle.fail }
  journal: { plugin: journal.so, queue: idle.journal, config: { path: "$DIR/idle-journal.txt" } }
YAML
	)"
	start_daemon "$DIR/idle-$1.yaml" "$DIR/idle-$1.log" "$http"
	sleep 2
	local rss anon file kids=0 k
	rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status")
	anon=$(awk '/^RssAnon/ { print $2 }' "/proc/$DAEMON_PID/status")
	file=$(awk '/^RssFile/ { print $2 }' "/proc/$DAEMON_PID/status")
	# the children files list pids separated by spaces
	# shellcheck disable=SC2013
	for k in $(cat /proc/"$DAEMON_PID"/task/*/children 2>/dev/null); do
		kids=$((kids + $(awk '/^VmRSS/ { print $2 }' "/proc/$k/status" 2>/dev/null || echo 0)))
	done
	echo "{\"rss_kib\":$rss,\"anon_kib\":$anon,\"file_kib\":$file,\"children_rss_kib\":$kids}" >"$R/$2.json"
	stop_daemon
}
log "idle RSS"
idle_rss thread idle.thread
idle_rss fork idle.fork

# Scale (issue 14): one daemon with SCALE_TASKS noop tasks, idle: its
# Redis connections, threads, the commands per second Redis gets from it
# and its CPU; then throughput with the load spread over SCALE_SPREAD
# tasks against the same load on one task.
SCALE_TASKS=${BENCH_SCALE_TASKS:-500}
SCALE_SPREAD=${BENCH_SCALE_SPREAD:-100}
SCALE_N=${BENCH_SCALE_N:-$((QUICK == 1 ? 100000 : 300000))}
SCALE_IDLE_S=${BENCH_SCALE_IDLE_S:-$((QUICK == 1 ? 5 : 20))}
SCALE_POOL=4

# scale_tasks N PREFIX [PREFETCH]: the tasks: yaml of N noop tasks on
# PREFIX.I
scale_tasks() {
	local i
	for ((i = 0; i < $1; i++)); do
		echo "  t$i: { plugin: noop.so, queue: $2.$i, group: $GROUP, prefetch: ${3:-$PREFETCH}, timeout: 0 }"
	done
}

# proc_ticks PID: utime + stime of a process, in clock ticks
proc_ticks() {
	awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# redis_cmds_for SECONDS: the commands clients send to Redis in that
# time, as MONITOR shows them (those that scripts run inside Redis are
# shown as "lua" and not counted)
redis_cmds_for() {
	timeout "$1" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" MONITOR 2>/dev/null |
		awk '/^[0-9.]+ \[[0-9]+ [0-9.:]+\]/ { n++ } END { print n + 0 }' || true
}

scale_idle() {
	local http conns threads c0 c1 t0 t1 hz
	http=$(free_port)
	write_cfg "$DIR/scale-idle.yaml" "$REDIS_URL" thread "$SCALE_POOL" "$http" \
		"$(scale_tasks "$SCALE_TASKS" scale.idle)"
	start_daemon "$DIR/scale-idle.yaml" "$DIR/scale-idle.log" "$http"
	curl -s -o /dev/null -m 5 "http://127.0.0.1:$http/status" || true
	# past the start: the first upkeep round looks at every task
	sleep 8
	conns=$(($(rcli CLIENT LIST | wc -l) - 1))
	threads=$(ls "/proc/$DAEMON_PID/task" | wc -l)
	hz=$(getconf CLK_TCK)
	t0=$(proc_ticks "$DAEMON_PID")
	c=$(redis_cmds_for "$SCALE_IDLE_S")
	t1=$(proc_ticks "$DAEMON_PID")
	echo "{\"tasks\":$SCALE_TASKS,\"pool\":$SCALE_POOL,\"connections\":$conns,\"threads\":$threads,\"idle_cmds_per_s\":$(calc "$c / $SCALE_IDLE_S"),\"idle_cpu_pct\":$(calc "($t1 - $t0) * 100 / $hz / $SCALE_IDLE_S"),\"seconds\":$SCALE_IDLE_S}" \
		>"$R/scale.idle.json"
	stop_daemon
	local i
	for ((i = 0; i < SCALE_TASKS; i++)); do
		echo "DEL scale.idle.$i scale.idle.$i.retry.$GROUP"
	done | rcli >/dev/null
}

# scale_left NTASKS: entries of the scale.rNTASKS.* streams not yet
# delivered to the group or not yet acknowledged
SCALE_LEFT_LUA="local n = 0
for _, k in ipairs(KEYS) do
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', k)) do
    local f = {}
    for j = 1, #g - 1, 2 do f[g[j]] = g[j + 1] end
    if f['name'] == ARGV[1] then
      n = n + (tonumber(f['lag']) or 1) + f['pending']
    end
  end
end
return n"
scale_left() {
	local i keys=()
	for ((i = 0; i < $1; i++)); do
		keys+=("scale.r$1.$i")
	done
	rcli EVAL "$SCALE_LEFT_LUA" "$1" "${keys[@]}" "$GROUP"
}

# scale_rate NTASKS REP: SCALE_N entries spread over NTASKS streams,
# consumed by one thread daemon with NTASKS tasks; timed from the first
# acknowledgement seen until the last (polled every 10 ms). One task gets the bench's prefetch; NTASKS tasks share it (at
# least 16 each), so that both hold about as many messages in flight.
scale_rate() {
	local nt=$1 rep=$2 http i per t0 t1 left
	per=$((SCALE_N / nt))
	for ((i = 0; i < nt; i++)); do
		"$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "scale.r$nt.$i" "$per" >/dev/null 2>>"$DIR/load.log"
		rcli XGROUP CREATE "scale.r$nt.$i" "$GROUP" 0 >/dev/null
	done
	http=$(free_port)
	local pf=$((PREFETCH / nt < 16 ? 16 : PREFETCH / nt))
	write_cfg "$DIR/scale-r$nt.yaml" "$REDIS_URL" thread "$SCALE_POOL" "$http" \
		"$(scale_tasks "$nt" "scale.r$nt" "$pf")"
	"$TM" run -c "$DIR/scale-r$nt.yaml" 2>>"$DIR/scale-r$nt.log" &
	DAEMON_PID=$!
	local deadline=$(($(now_ms) + 600000)) t0=
	while :; do
		left=$(scale_left "$nt")
		[[ -z $t0 ]] && ((left < per * nt)) && t0=$(now_ms)
		((left == 0)) && break
		(($(now_ms) > deadline)) && { echo "bench: scale run of $nt tasks stuck, $left left" >&2; exit 1; }
		sleep 0.01
	done
	t1=$(now_ms)
	((t1 > t0)) || t1=$((t0 + 1))
	stop_daemon
	echo "{\"tasks\":$nt,\"n\":$((per * nt)),\"ms\":$((t1 - t0)),\"rate\":$(calc "$per * $nt * 1000 / ($t1 - $t0)")}" \
		>"$R/scale.r$nt.run$rep.json"
	for ((i = 0; i < nt; i++)); do
		echo "DEL scale.r$nt.$i"
	done | rcli >/dev/null
	log "scale: $nt task(s): $(fmt_int "$(jget "$R/scale.r$nt.run$rep.json" rate)") msgs/s"
}
log "scale: $SCALE_TASKS idle tasks for $SCALE_IDLE_S s"
scale_idle
log "scale: $(fmt_int "$SCALE_N") messages on 1 task, then on $SCALE_SPREAD"
SCALE_REPEAT=$((REPEAT < 2 ? 2 : REPEAT))
for ((rep = 1; rep <= SCALE_REPEAT; rep++)); do
	scale_rate 1 "$rep"
	scale_rate "$SCALE_SPREAD" "$rep"
done
best scale.r1
best "scale.r$SCALE_SPREAD"

# --------------------------------------------------------------- RabbitMQ

AMQP=skip
AMQP_NOTE=""
RABBIT_VERSION=""
if [[ $AMQP_MODE == no ]]; then
	AMQP_NOTE="BENCH_AMQP=no"
elif [[ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] && ! command -v rabbitmq-server >/dev/null 2>&1; then
	AMQP_NOTE="rabbitmq-server is not installed"
else
	AMQP=ceiling
	# Does this build have the RabbitMQ adapter? `check` may report the
	# kind as unsupported; `emit` against a closed port certainly does.
	probe_port=$(free_port)
	write_cfg "$DIR/probe.yaml" "amqp://guest:guest@127.0.0.1:$probe_port" thread 1 \
		"$(free_port)" "  noop: { plugin: noop.so, queue: bench.noop }"
	probe=$("$TM" check -c "$DIR/probe.yaml" 2>&1 || true)
	if ! grep -qi 'not supported' <<<"$probe"; then
		probe=$(timeout 15 "$TM" emit -c "$DIR/probe.yaml" noop '{}' 2>&1 || true)
	fi
	if grep -qi 'not supported' <<<"$probe"; then
		AMQP_NOTE="taskmill: $(grep -i -m 1 'not supported' <<<"$probe" | sed 's/^.*: \(broker [^:]*not supported[^;]*\).*$/\1/')"
	else
		AMQP=full
	fi
fi

# Erlang writes erl_crash.dump into its working directory (or here)
export ERL_CRASH_DUMP="$DIR/erl_crash.dump"

rabbitctl() {
	env HOME="$DIR/rabbit" RABBITMQ_CONF_ENV_FILE="$DIR/rabbit/env.conf" \
		"$RABBITCTL" -n "$RABBIT_NODE" -q "$@"
}

# start_rabbit: a private node on fresh free ports; 0 once it is up.
start_rabbit() {
	AMQP_PORT=$(free_port)
	rm -rf "$DIR/rabbit"
	mkdir -p "$DIR/rabbit/mnesia" "$DIR/rabbit/log"
	: >"$DIR/rabbit/env.conf"
	echo '[].' >"$DIR/rabbit/enabled_plugins"
	(
		cd "$DIR/rabbit"
		exec env HOME="$DIR/rabbit" RABBITMQ_NODE_PORT="$AMQP_PORT" \
			RABBITMQ_DIST_PORT="$(free_port)" RABBITMQ_NODENAME="$RABBIT_NODE" \
			RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
			RABBITMQ_MNESIA_BASE="$DIR/rabbit/mnesia" RABBITMQ_LOG_BASE="$DIR/rabbit/log" \
			RABBITMQ_CONF_ENV_FILE="$DIR/rabbit/env.conf" \
			RABBITMQ_CONFIG_FILE="$DIR/rabbit/rabbitmq" \
			RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/rabbit/enabled_plugins" \
			RABBITMQ_PID_FILE="$DIR/rabbit/pid" \
			"$RABBIT_SERVER"
	) >>"$DIR/rabbit.log" 2>&1 &
	RABBIT_PID=$!
	local i
	for ((i = 0; i < 120; i++)); do
		# our node name: a broker of someone else on the port cannot answer
		rabbitctl await_startup --timeout 60 >/dev/null 2>&1 && return 0
		kill -0 "$RABBIT_PID" 2>/dev/null || break
		sleep 0.5
	done
	[[ -s $DIR/rabbit/pid ]] && kill -KILL "$(cat "$DIR/rabbit/pid")" 2>/dev/null
	kill -KILL "$RABBIT_PID" 2>/dev/null || true
	wait "$RABBIT_PID" 2>/dev/null || true
	RABBIT_PID=
	return 1
}

if [[ $AMQP != skip ]]; then
	log "RabbitMQ: starting a private node"
	RABBIT_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
	RABBITCTL=/usr/lib/rabbitmq/bin/rabbitmqctl
	# /usr/sbin/ wrappers switch to the rabbitmq user, who cannot write here
	[[ -x $RABBIT_SERVER ]] || RABBIT_SERVER=$(command -v rabbitmq-server)
	[[ -x $RABBITCTL ]] || RABBITCTL=$(command -v rabbitmqctl)
	RABBIT_NODE=taskmill-bench-$$@localhost
	# a port taken between the check and the bind fails the start: retry
	if start_rabbit || start_rabbit; then
		# the broker's CPU is the Erlang VM's, whose pid is in the pid file
		RABBIT_VM=$(cat "$DIR/rabbit/pid")
		RABBIT_VERSION=$(rabbitctl version 2>/dev/null || true)
	else
		AMQP=skip
		AMQP_NOTE="the private rabbitmq-server did not start (see rabbit.log)"
		log "$AMQP_NOTE"
		tail -n 5 "$DIR/rabbit.log" >&2 || true
	fi
fi

AMQP_URL="amqp://guest:guest@127.0.0.1:${AMQP_PORT:-0}"

# amqp_run NAME CONFIG: load the queue, then one measured run.
amqp_run() {
	local name=$1 what=$2 cmd ready=()
	if [[ $AMQP == ceiling ]]; then
		ready=(--declare) # no daemon declares the queue
	fi
	[[ ${BENCH_AMQP_PERSISTENT:-0} == 1 ]] && ready+=(--persistent)
	"$BB/load_amqp" "${ready[@]}" 127.0.0.1 "$AMQP_PORT" bench.noop "$AMQP_N" 2>>"$DIR/load.log"
	local end=(--done-pipe)
	if [[ $what == ceiling ]]; then
		cmd=("$BB/ceiling_amqp" 127.0.0.1 "$AMQP_PORT" bench.noop "$AMQP_PREFETCH" "$AMQP_N")
	else
		local kind size http
		read -r kind size < <(pool_words "$what")
		http=$(free_port)
		write_cfg "$DIR/$name.yaml" "$AMQP_URL" "$kind" "$size" "$http" \
			"  noop: { plugin: noop.so, queue: bench.noop, prefetch: $AMQP_PREFETCH, timeout: 0 }"
		cmd=("$TM" run -c "$DIR/$name.yaml")
		end=(--metrics "127.0.0.1:$http" --task noop)
	fi
	if ! "$BB/measure" --n "$AMQP_N" --amqp "127.0.0.1:$AMQP_PORT" --queue bench.noop \
		"${end[@]}" --broker-pid "$RABBIT_VM" --timeout 300 --log "$DIR/$name.log" \
		-- "${cmd[@]}" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

# amqp_quorum_run NAME: amqp_run's thread x4 daemon on a quorum queue
# (broker.amqp.queue_type: quorum), declared by the daemon beforehand.
amqp_quorum_run() {
	local name=$1 http
	"$BB/load_amqp" 127.0.0.1 "$AMQP_PORT" bench.quorum "$AMQP_N" 2>>"$DIR/load.log"
	http=$(free_port)
	BROKER_EXTRA=", amqp: { queue_type: quorum }" write_cfg "$DIR/$name.yaml" \
		"$AMQP_URL" thread 4 "$http" \
		"  noop: { plugin: noop.so, queue: bench.quorum, prefetch: $AMQP_PREFETCH, timeout: 0 }"
	if ! "$BB/measure" --n "$AMQP_N" --amqp "127.0.0.1:$AMQP_PORT" --queue bench.quorum \
		--metrics "127.0.0.1:$http" --task noop --broker-pid "$RABBIT_VM" --timeout 300 \
		--log "$DIR/$name.log" -- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

AMQP_CONFIGS=()
if [[ $AMQP != skip ]]; then
	AMQP_CONFIGS=(ceiling)
	if [[ $AMQP == full ]]; then
		read -r -a more <<<"$AMQP_POOLS"
		AMQP_CONFIGS+=("${more[@]}")
		# the daemon declares its queues (with its own arguments) first
		HTTP=$(free_port)
		write_cfg "$DIR/declare.yaml" "$AMQP_URL" thread 1 "$HTTP" \
			"  noop: { plugin: noop.so, queue: bench.noop }
  journal: { plugin: journal.so, queue: bench.lat, config: { path: \"$DIR/lat-journal.txt\" } }"
		start_daemon "$DIR/declare.yaml" "$DIR/declare.log" "$HTTP"
		stop_daemon
	fi
	if [[ $AMQP == full ]]; then
		# the quorum queue, declared by a daemon that uses it
		HTTP=$(free_port)
		BROKER_EXTRA=", amqp: { queue_type: quorum }" write_cfg \
			"$DIR/declare-quorum.yaml" "$AMQP_URL" thread 1 "$HTTP" \
			"  noop: { plugin: noop.so, queue: bench.quorum }"
		start_daemon "$DIR/declare-quorum.yaml" "$DIR/declare.log" "$HTTP"
		stop_daemon
	fi
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for c in "${AMQP_CONFIGS[@]}"; do
			amqp_run "amqp.${c/:/}.run$rep" "$c"
		done
		if [[ $AMQP == full ]]; then
			amqp_quorum_run "amqp.quorum.thread4.run$rep"
		fi
	done
	for c in "${AMQP_CONFIGS[@]}"; do
		best "amqp.${c/:/}"
	done
	if [[ $AMQP == full ]]; then
		best amqp.quorum.thread4
	fi
	if [[ $AMQP == full ]]; then
		log "RabbitMQ: latency at $LAT_RATE msgs/s for $LAT_SECONDS s"
		HTTP=$(free_port)
		write_cfg "$DIR/lat-amqp.yaml" "$AMQP_URL" thread 4 "$HTTP" \
			"  journal: { plugin: journal.so, queue: bench.lat, prefetch: $AMQP_PREFETCH, timeout: 0, config: { path: \"$DIR/lat-journal.txt\" } }"
		start_daemon "$DIR/lat-amqp.yaml" "$DIR/lat-amqp.log" "$HTTP"
		"$BB/pub_rate" rtt-amqp 127.0.0.1 "$AMQP_PORT" bench.lat 10000 >"$R/amqp.rtt.json"
		BENCH_PIDS="$DAEMON_PID $RABBIT_VM" \
			"$BB/pub_rate" amqp 127.0.0.1 "$AMQP_PORT" bench.lat "$LAT_RATE" "$LAT_SECONDS" \
			"$DIR/lat-journal.txt" >"$R/amqp.lat.json" ||
			{ echo "bench: latency run: $(cat "$R/amqp.lat.json")" >&2; exit 1; }
		stop_daemon
	else
		"$BB/pub_rate" rtt-amqp 127.0.0.1 "$AMQP_PORT" bench.noop 10000 >"$R/amqp.rtt.json"
	fi
fi

# ------------------------------------------------------------ the table

# One row per figure, tab-separated columns (see HEADER).
HEADER="figure	value	reference	ratio	target	result	cpu s/M	broker s/M	RSS MiB	notes"
ROWS=()
TARGETS_JSON=()

# row FIGURE VALUE REFERENCE RATIO TARGET RESULT CPU BROKER RSS NOTES
row() {
	local IFS=$'\t'
	ROWS+=("$*")
}

# verdict OK: PASS or MISS
verdict() {
	if [[ $1 == 1 ]]; then echo PASS; else echo MISS; fi
}

# target_json NAME VALUE LIMIT RESULT
target_json() {
	TARGETS_JSON+=("{\"name\":\"$1\",\"value\":$2,\"target\":\"$3\",\"result\":\"$4\"}")
}

mib() {
	awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'
}

runs_of() {
	sed -n 's/.*"runs":\[\([^]]*\)\].*/\1/p' "$1" | tr , ' '
}

# run_cols FILE: the cpu, broker, RSS and notes columns of a throughput run.
run_cols() {
	local f=$1 s other kids rss notes
	s=$(jget "$f" seconds)
	other=$(calc "$(jget "$f" other_cpu_s) / ($s > 0 ? $s : 1)")
	kids=$(jget "$f" children)
	rss=$(mib "$(jget "$f" rss_peak_kib)")
	((kids > 0)) && rss="$rss+$(mib "$(jget "$f" children_rss_peak_kib)")"
	notes="$(printf '%.0f ctx switches/k msgs' "$(jget "$f" ctxt_switches_per_k)")"
	notes+=$(awk -v o="$other" 'BEGIN { if (o > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o }')
	notes+="; runs $(runs_of "$f")"
	printf '%.2f\t%.2f\t%s\t%s' "$(jget "$f" cpu_s_per_m)" \
		"$(jget "$f" broker_cpu_s_per_m)" "$rss" "$notes"
}

# throughput_rows BROKER LABEL
throughput_rows() {
	local b=$1 label=$2 ceil cf rate ratio c kind size min ok name v
	cf=$R/$b.ceiling.json
	ceil=$(jget "$cf" rate)
	row "$label ceiling loop" "$(fmt_int "$ceil")/s" - - - - "$(run_cols "$cf")"
	local configs=()
	if [[ $b == redis ]]; then
		read -r -a configs <<<"$POOLS"
	else
		read -r -a configs <<<"$AMQP_POOLS"
	fi
	for c in "${configs[@]}"; do
		read -r kind size < <(pool_words "$c")
		name="$b.$kind$size"
		[[ -f $R/$name.json ]] || continue
		rate=$(jget "$R/$name.json" rate)
		ratio=$(calc "$rate / $ceil")
		case $b.$kind in
		redis.thread) min=0.5 ;;
		redis.fork) min=0.25 ;;
		amqp.thread) min=0.8 ;;
		amqp.fork) min=0.5 ;;
		esac
		ok=$(awk -v r="$ratio" -v m="$min" 'BEGIN { print (r >= m) ? 1 : 0 }')
		v=$(verdict "$ok")
		row "$label taskmill $kind x$size" "$(fmt_int "$rate")/s" "$(fmt_int "$ceil")/s" \
			"$(printf %.2f "$ratio")" ">= $min" "$v" "$(run_cols "$R/$name.json")"
		target_json "$b.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v"
	done
}

throughput_rows redis "Redis"

# RSS of the thread x4 run, and its growth between the halves
f=$R/redis.thread4.json
if [[ -f $f ]]; then
	peak=$(jget "$f" rss_peak_kib)
	ok=$(awk -v k="$peak" 'BEGIN { print (k <= 32 * 1024) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "Redis thread x4 peak RSS in the run" "$(mib "$peak") MiB" - - "<= 32 MiB" "$v" - - - \
		"VmHWM at the last ack of $(fmt_int "$N")"
	target_json redis.thread4.rss_peak_mib "$(mib "$peak")" "<= 32" "$v"
	h1=$(jget "$f" rss_half1_kib)
	h2=$(jget "$f" rss_half2_kib)
	growth=$((h2 - h1))
	ok=$(((growth <= 256) ? 1 : 0))
	v=$(verdict "$ok")
	row "Redis thread x4 RSS growth, 2nd half" "$growth KiB" "$(mib "$h1") -> $(mib "$h2") MiB" - \
		"<= 256 KiB" "$v" - - - "highest VmRSS of each half (sampled every 10 ms)"
	target_json redis.thread4.rss_growth_kib "$growth" "<= 256" "$v"
fi

# language hosts: each host's noop next to the C noop of the same pool
host_rows() {
	local c kind size ref h f rate ratio min ok v growth
	for c in $HOST_POOLS; do
		read -r kind size < <(pool_words "$c")
		ref=$R/host.noop.$kind$size.json
		[[ -f $ref ]] || continue
		row "host C noop $kind x$size" "$(fmt_int "$(jget "$ref" rate)")/s" - - - - "$(run_cols "$ref")"
		for h in "${BENCH_HOSTS_RUN[@]}"; do
			f=$R/host.$h.$kind$size.json
			[[ -f $f ]] || continue
			rate=$(jget "$f" rate)
			ratio=$(calc "$rate / $(jget "$ref" rate)")
			case $h.$kind in
			lua.*) min=0.5 ;;
			python.fork) min=0.2 ;;
			*) min= ;;
			esac
			growth=$(($(jget "$f" rss_half2_kib) - $(jget "$f" rss_half1_kib)))
			if [[ -n $min ]]; then
				ok=$(awk -v r="$ratio" -v m="$min" 'BEGIN { print (r >= m) ? 1 : 0 }')
				v=$(verdict "$ok")
				target_json "host.$h.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v"
			else
				min=-
				v=reported
			fi
			[[ $min == - ]] || min=">= $min"
			row "host $h noop $kind x$size" "$(fmt_int "$rate")/s" \
				"$(fmt_int "$(jget "$ref" rate)")/s" "$(printf %.2f "$ratio")" "$min" "$v" \
				"$(run_cols "$f"); RSS 2nd half $growth KiB"
		done
	done
}
((${#BENCH_HOSTS_RUN[@]} == 0)) || host_rows

# flatness
fs=$R/redis.flat$FLAT_SMALL.json
fb=$R/redis.flat$FLAT_BIG.json
rs=$(jget "$fs" rate)
rb=$(jget "$fb" rate)
ratio=$(calc "$rb / $rs")
ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? 1 : 0 }')
v=$(verdict "$ok")
row "Redis thread x4, stream of $(fmt_int "$FLAT_BIG")" "$(fmt_int "$rb")/s" \
	"$(fmt_int "$rs")/s (of $(fmt_int "$FLAT_SMALL"))" "$(printf %.2f "$ratio")" "0.90-1.10" "$v" \
	"$(printf %.2f "$(jget "$fb" cpu_s_per_m)")" "$(printf %.2f "$(jget "$fb" broker_cpu_s_per_m)")" \
	"$(mib "$(jget "$fb" rss_peak_kib)")" \
	"the same $(fmt_int "$FLAT_SMALL") new entries consumed; runs $(runs_of "$fb") vs $(runs_of "$fs")"
target_json redis.flat_ratio "$(printf %.3f "$ratio")" "0.90-1.10" "$v"

# latency_row BROKER LABEL WHAT
latency_row() {
	local b=$1 label=$2 what=$3 lf=$R/$1.lat.json rf=$R/$1.rtt.json
	local p50 p99 max rtt99 rtt50 idle99 ratio ok v
	p50=$(jget "$lf" lat_p50_us)
	p99=$(jget "$lf" lat_p99_us)
	max=$(jget "$lf" lat_max_us)
	rtt50=$(jget "$lf" rtt_p50_us)
	rtt99=$(jget "$lf" rtt_p99_us)
	idle99=$(jget "$rf" rtt_p99_us)
	ratio=$(calc "$p99 / $rtt99")
	ok=$(awk -v r="$ratio" 'BEGIN { print (r <= 5) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "$label $what p50/p99/max" "$(printf '%.0f/%.0f/%.0f us' "$p50" "$p99" "$max")" \
		"rtt p99 $(printf %.0f "$rtt99") us" "$(printf %.1f "$ratio")x" "<= 5x" "$v" - - - \
		"$(jget "$lf" observed)/$(jget "$lf" published) msgs at $LAT_RATE/s; broker rtt in the same window p50 $(printf %.0f "$rtt50") us; back-to-back idle rtt p99 $(printf %.0f "$idle99") us (p99 = $(printf %.1f "$(calc "$p99 / $idle99")")x)$(awk -v o="$(jget "$lf" other_cpu_s)" -v w="$(jget "$lf" window_s)" 'BEGIN { if (w > 0 && o / w > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o / w }')"
	target_json "$b.latency_p99_over_rtt_p99" "$(printf %.2f "$ratio")" "<= 5" "$v"
}
latency_row redis "Redis thread x4" "publish->ack"

# idle RSS
irss=$(jget "$R/idle.thread.json" rss_kib)
ok=$(awk -v k="$irss" 'BEGIN { print (k <= 5 * 1024) ? 1 : 0 }')
v=$(verdict "$ok")
row "idle RSS, thread x4, 5 example tasks" "$(mib "$irss") MiB" - - "<= 5 MiB" "$v" - - - \
	"VmRSS 2 s after ready: $(mib "$(jget "$R/idle.thread.json" anon_kib)") anon + $(mib "$(jget "$R/idle.thread.json" file_kib)") file (shared libs); fork x4: $(mib "$(jget "$R/idle.fork.json" rss_kib)") + $(mib "$(jget "$R/idle.fork.json" children_rss_kib)") in children"
target_json idle_rss_mib "$(mib "$irss")" "<= 5" "$v"

# scale (issue 14; "before": the one-thread, one-connection-per-task
# intake, as measured for the issue with 200 noop tasks)
sf=$R/scale.idle.json
sc=$(jget "$sf" connections)
st=$(($(jget "$sf" threads) - $(jget "$sf" pool)))
sq=$(jget "$sf" idle_cmds_per_s)
su=$(jget "$sf" idle_cpu_pct)
v=$(verdict $((sc <= 4 ? 1 : 0)))
row "scale: $SCALE_TASKS idle tasks, Redis connections" "$sc" "203 before (200 tasks)" - "<= 4" "$v" - - - \
	"CLIENT LIST, monitoring connection open"
target_json scale.connections "$sc" "<= 4" "$v"
v=$(verdict $((st <= 8 ? 1 : 0)))
row "scale: $SCALE_TASKS idle tasks, threads beyond the pool" "$st" "209 threads before (200 tasks)" - "<= 8" "$v" - - - \
	"$(jget "$sf" threads) threads in /proc/PID/task, pool of $(jget "$sf" pool)"
target_json scale.threads_beyond_pool "$st" "<= 8" "$v"
v=$(verdict "$(awk -v q="$sq" 'BEGIN { print (q < 20) ? 1 : 0 }')")
row "scale: $SCALE_TASKS idle tasks, Redis commands" "$(printf %.1f "$sq")/s" "840/s before (200 tasks)" - "< 20/s" "$v" - - - \
	"sent to Redis (MONITOR) over $SCALE_IDLE_S s, 8 s after ready"
target_json scale.idle_cmds_per_s "$(printf %.2f "$sq")" "< 20" "$v"
v=$(verdict "$(awk -v u="$su" 'BEGIN { print (u < 0.2) ? 1 : 0 }')")
row "scale: $SCALE_TASKS idle tasks, daemon CPU" "$(printf %.2f "$su")%" "1.7% before (200 tasks)" - "< 0.2%" "$v" - - - \
	"utime + stime over $SCALE_IDLE_S s, of one core"
target_json scale.idle_cpu_pct "$(printf %.3f "$su")" "< 0.2" "$v"
r1=$(jget "$R/scale.r1.json" rate)
rs=$(jget "$R/scale.r$SCALE_SPREAD.json" rate)
ratio=$(calc "$rs / $r1")
v=$(verdict "$(awk -v r="$ratio" 'BEGIN { print (r >= 0.8) ? 1 : 0 }')")
row "scale: load over $SCALE_SPREAD tasks, thread x$SCALE_POOL" "$(fmt_int "$rs")/s" "$(fmt_int "$r1")/s (1 task)" \
	"$(printf %.2f "$ratio")" ">= 0.8" "$v" - - - "$(fmt_int "$SCALE_N") msgs, first ack to last ack; prefetch $PREFETCH on 1 task, $((PREFETCH / SCALE_SPREAD < 16 ? 16 : PREFETCH / SCALE_SPREAD)) each on $SCALE_SPREAD; runs $(runs_of "$R/scale.r$SCALE_SPREAD.json") vs $(runs_of "$R/scale.r1.json")"
target_json scale.spread_ratio "$(printf %.3f "$ratio")" ">= 0.8" "$v"

if [[ $AMQP != skip ]]; then
	throughput_rows amqp "RabbitMQ"
	if [[ $AMQP == full ]]; then
		# a quorum queue is slower by design (every message replicated
		# through Raft, here on one node): the ratio is reported, no target
		if [[ -f $R/amqp.quorum.thread4.json && -f $R/amqp.thread4.json ]]; then
			qrate=$(jget "$R/amqp.quorum.thread4.json" rate)
			crate=$(jget "$R/amqp.thread4.json" rate)
			row "RabbitMQ taskmill thread x4, quorum queue" "$(fmt_int "$qrate")/s" \
				"$(fmt_int "$crate")/s classic" "$(printf %.2f "$(calc "$qrate / $crate")")" \
				- - "$(run_cols "$R/amqp.quorum.thread4.json")"
		fi
		latency_row amqp "RabbitMQ thread x4" "publish->run"
	else
		row "RabbitMQ taskmill" skipped - - - - - - - "$AMQP_NOTE"
	fi
else
	row "RabbitMQ" skipped - - - - - - - "$AMQP_NOTE"
fi

# print
PASSES=0
MISSES=0
for row in "${ROWS[@]}"; do
	IFS=$'\t' read -r -a cols <<<"$row"
	case ${cols[5]} in
	PASS) PASSES=$((PASSES + 1)) ;;
	MISS) MISSES=$((MISSES + 1)) ;;
	esac
done
{
	echo
	echo "taskmill benchmark, $DATE: $TM_VERSION ($COMMIT)"
	echo "host: $CPU_MODEL, $NCPU CPUs, $MEM_GIB GiB, Linux $KERNEL; redis $REDIS_VERSION${RABBIT_VERSION:+, rabbitmq $RABBIT_VERSION}"
	echo "Redis N=$(fmt_int "$N"), RabbitMQ N=$(fmt_int "$AMQP_N"), prefetch $PREFETCH/$AMQP_PREFETCH, noop task; best of $REPEAT interleaved runs (all listed)"
	echo "msgs/s: first delivery to last ack; ratio: to the ceiling loop; cpu s/M: CPU seconds per million messages of the consumer"
	echo "(daemon and fork children); broker s/M: of the broker; RSS: peak (+ fork children); BUSY HOST: CPU used by other processes"
	echo
	printf '%s\n' "$HEADER" "${ROWS[@]}" |
		awk -F'\t' '
		{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; if (NF > nf) nf = NF }
		END {
			for (r = 1; r <= n; r++) {
				line = ""
				for (i = 1; i <= nf; i++) {
					s = c[r, i]
					if (i < nf) s = sprintf("%-" w[i] "s  ", s)
					line = line s
				}
				print line
				if (r == 1) { sep = ""; for (i = 1; i < nf; i++) { for (k = 0; k < w[i]; k++) sep = sep "-"; sep = sep "  " } print sep "-----" }
			}
		}'
	echo
	echo "$PASSES target(s) met, $MISSES missed. JSON: $OUT"
} | tee "$DIR/table.txt"

# JSON
json_runs() {
	local first=1 f name
	for f in "$R"/*.json; do
		name=$(basename "$f" .json)
		[[ $name == *.run[0-9]* ]] && continue
		((first)) || printf ','
		first=0
		printf '"%s":%s' "$name" "$(cat "$f")"
	done
}
mkdir -p "$(dirname "$OUT")"
{
	printf '{"date":"%s","taskmill":"%s","commit":"%s",' "$DATE" "$TM_VERSION" "$COMMIT"
	printf '"host":{"cpu":"%s","cpus":%s,"mem_gib":%s,"kernel":"%s","redis":"%s","rabbitmq":"%s"},' \
		"$CPU_MODEL" "$NCPU" "$MEM_GIB" "$KERNEL" "$REDIS_VERSION" "$RABBIT_VERSION"
	printf '"params":{"n":%s,"amqp_n":%s,"repeat":%s,"prefetch":%s,"amqp_prefetch":%s,"ceiling_redis":"%s x %s in flight","flat":[%s],"latency_rate":%s,"latency_seconds":%s,"quick":%s},' \
		"$N" "$AMQP_N" "$REPEAT" "$PREFETCH" "$AMQP_PREFETCH" "$CEIL_DEPTH" "$CEIL_COUNT" \
		"${FLAT// /,}" "$LAT_RATE" "$LAT_SECONDS" "$QUICK"
	printf '"amqp":"%s","amqp_note":"%s",' "$AMQP" "${AMQP_NOTE//\"/\'}"
	printf '"results":{%s},' "$(json_runs)"
	printf '"targets":[%s],' "$(IFS=,; echo "${TARGETS_JSON[*]}")"
	printf '"table":"%s"}\n' "$(sed 's/\\/\\\\/g; s/"/\\"/g' "$DIR/table.txt" | awk '{ printf "%s\\n", $0 }')"
} >"$OUT"
log "done in $((SECONDS - T0)) s"
