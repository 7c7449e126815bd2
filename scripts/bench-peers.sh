#!/usr/bin/env bash
# taskmill next to what users would otherwise pick (issue 19, "Peers in the
# same run"). `make bench-peers` runs
#
#   scripts/bench-peers.sh BUILD_DIR
#
# after scripts/install-peers.sh and building BUILD_DIR/taskmill, its
# plugins, BUILD_DIR/bench/* and BUILD_DIR/bench/peers/peer_measure. Like
# scripts/bench.sh it runs a private redis-server and, when rabbitmq-server
# is installed, a private RabbitMQ node, on free loopback ports in a scratch
# dir removed at the end, and prints one table (also written to
# BUILD_DIR/bench/peers.txt, or $BENCH_PEERS_OUT).
#
# The workload is the same for everyone: N messages with an empty JSON
# object as their payload, pre-loaded with each consumer's own producer
# library in its own message format, then only the consumer runs, timed
# from first delivery to last ack from the broker's side:
#   Redis:    bench/peers/peer_measure.c (a Lua script per layout: the
#             stream and its group, Celery's list and "unacked" hash,
#             BullMQ's wait and active lists)
#   RabbitMQ: bench/measure.c (first delivery: the queue's ready count;
#             last ack: taskmill's /metrics, or the peer's byte on
#             BENCH_DONE_FD after a synchronous call that follows its
#             last ack)
# The consumers (bench/peers/, each configured as its documentation
# recommends for throughput):
#   taskmill  thread x4, the noop plugin, prefetch BENCH_PEERS_PREFETCH
#   celery    Debian python3-celery, Redis broker, acks_late, prefetch
#             multiplier 1, prefork concurrency 4 (as Celery's docs
#             recommend for reliability)
#   celery-fast  the same with Celery's defaults, faster and less safe:
#             ack on receipt, prefetch multiplier 4 (a row of its own)
#   redispy   Debian python3-redis: XREADGROUP COUNT 500, one XACK a batch
#   bullmq    npm bullmq: Worker, concurrency 50, removeOnComplete
#   pika      Debian python3-pika: basic_qos, manual ack of each message
#   amqplib   npm amqplib: prefetch, manual ack of each message
# Idle memory: each consumer started on an empty queue, 2 s after it is
# ready (taskmill: /ping answers 200; a peer: BENCH_READY_FILE), the sum of
# VmRSS and of Pss (smaps_rollup) over its process tree. Latency: RATE
# messages per second for SECONDS, published on a fixed schedule by the
# peer's own producer; p99 of publish -> ack on Redis, publish -> run on
# RabbitMQ (taskmill: bench/pub_rate.c, as in `make bench`; peers: see
# bench/README.md).
#
# Knobs (environment):
#   BENCH_PEERS_QUICK=1         smoke run: N 5000, latency 2 s, one repeat
#   BENCH_PEERS_N               messages per throughput run (100000)
#   BENCH_PEERS_REPEAT          runs per consumer, interleaved; best shown (2)
#   BENCH_PEERS_ONLY            consumers to run ("taskmill celery celery-fast
#                               redispy bullmq pika amqplib"); taskmill is
#                               always run
#   BENCH_PEERS_PREFETCH        taskmill's prefetch (1024, as in make bench)
#   BENCH_PEERS_AMQP_PREFETCH   pika's and amqplib's prefetch (300)
#   BENCH_PEERS_LAT_RATE, BENCH_PEERS_LAT_SECONDS   latency (1000 /s, 5 s)
#   BENCH_PEERS_AMQP=auto|no    RabbitMQ part (auto: when installed)
#   BENCH_PEERS_OUT             where the table is written
#   BENCH_PEERS_KEEP=1          keep the scratch dir (logs)
set -euo pipefail

BUILD=${1:?usage: scripts/bench-peers.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEERS=$SRCDIR/bench/peers
TM=$BUILD/taskmill
BB=$BUILD/bench
PM=$BB/peers/peer_measure
# Debian's interpreter, whatever python3 comes first in PATH: the peers'
# packages are Debian's
PY=/usr/bin/python3
for f in "$TM" "$BUILD/plugins/noop.so" "$BUILD/plugins/journal.so" "$PM" \
	"$BB"/{measure,load_redis,load_amqp,pub_rate}; do
	[[ -e $f ]] || { echo "bench-peers: $f not found; run make bench-peers" >&2; exit 1; }
done
for tool in redis-server redis-cli curl awk node "$PY"; do
	command -v "$tool" >/dev/null 2>&1 ||
		{ echo "bench-peers: '$tool' not found; run scripts/install-peers.sh" >&2; exit 1; }
done

if [[ ${BENCH_PEERS_QUICK:-0} == 1 ]]; then
	N=${BENCH_PEERS_N:-5000}
	REPEAT=${BENCH_PEERS_REPEAT:-1}
	LAT_SECONDS=${BENCH_PEERS_LAT_SECONDS:-2}
else
	N=${BENCH_PEERS_N:-100000}
	REPEAT=${BENCH_PEERS_REPEAT:-2}
	LAT_SECONDS=${BENCH_PEERS_LAT_SECONDS:-5}
fi
LAT_RATE=${BENCH_PEERS_LAT_RATE:-1000}
LAT_N=$((LAT_RATE * LAT_SECONDS))
# the peers' publishers run one second longer, whose messages are left out
# of the figures: the first second of a fresh Python or Node process (its
# imports, the JIT) is not what a worker that runs for days looks like
LAT_WARM=$LAT_RATE
PEER_LAT_SECONDS=$((LAT_SECONDS + 1))
PREFETCH=${BENCH_PEERS_PREFETCH:-1024}
AMQP_PREFETCH=${BENCH_PEERS_AMQP_PREFETCH:-300}
ONLY=" ${BENCH_PEERS_ONLY:-taskmill celery celery-fast redispy bullmq pika amqplib} "
OUT=${BENCH_PEERS_OUT:-$BB/peers.txt}
GROUP=taskmill

DIR=$(mktemp -d "${TMPDIR:-/tmp}/taskmill-bench-peers.XXXXXX")
R=$DIR/results # one small JSON object per file
mkdir -p "$R"
REDIS_PID=
RABBIT_PID=
RABBIT_NODE=
CONSUMER_PID=
DAEMON_PID=
T0=$SECONDS

# log, now_ms, wait_gone, stop_pid, free_port, jget, calc, fmt_int, mib,
# rcli, start_daemon, the private brokers, bench_cleanup, print_table:
# shared with make bench
BENCH_NAME=bench-peers
# shellcheck source=scripts/bench/util.sh
. "$SRCDIR/scripts/bench/util.sh"

# stop_consumer: stop the consumer that runs (a peer or the daemon; the
# daemon's pid is also DAEMON_PID, set by start_daemon, which a failed
# start leaves behind)
stop_consumer() {
	[[ -n $CONSUMER_PID ]] || CONSUMER_PID=$DAEMON_PID
	DAEMON_PID=
	[[ -n $CONSUMER_PID ]] || return 0
	stop_pid "$CONSUMER_PID" 20
	CONSUMER_PID=
}

cleanup() {
	local rc=$?
	stop_consumer
	bench_cleanup "$rc" "$DIR" "${BENCH_PEERS_KEEP:-0}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wants() {
	[[ $1 == taskmill || $ONLY == *" $1 "* ]]
}

# ---------------------------------------------------------------- taskmill

# write_cfg FILE URL HTTP_PORT TASKS_YAML: a thread x4 daemon.
write_cfg() {
	cat >"$1" <<YAML
broker: { url: "$2" }
pool: { kind: thread, size: 4 }
plugin_dir: $BUILD/plugins
http: { listen: "127.0.0.1:$3" }
shutdown_timeout: 10s
log: { level: warning, format: text }
tasks:
$4
YAML
}

# ------------------------------------------------------------ the peers

export PYTHONPATH=$PEERS${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
NODE_PEERS=$PEERS/node

# start_peer LOG READY_FILE CMD...: start a consumer in the background and
# wait (60 s at most) for the file it creates once it consumes.
start_peer() {
	local logf=$1 ready=$2
	shift 2
	rm -f "$ready"
	BENCH_READY_FILE=$ready "$@" >>"$logf" 2>&1 &
	CONSUMER_PID=$!
	local deadline=$(($(now_ms) + 60000))
	until [[ -s $ready ]]; do
		if ! kill -0 "$CONSUMER_PID" 2>/dev/null || (($(now_ms) > deadline)); then
			echo "bench-peers: the consumer did not become ready ($*)" >&2
			return 1
		fi
		sleep 0.05
	done
}

# tree_pids PID: PID and its descendants
tree_pids() {
	local p c
	echo "$1"
	for p in /proc/"$1"/task/*/children; do
		# the children files list pids separated by spaces
		# shellcheck disable=SC2013
		for c in $(cat "$p" 2>/dev/null); do
			tree_pids "$c"
		done
	done
}

# idle_mem NAME: the idle consumer's VmRSS and Pss, summed over its process
# tree, into $R/NAME.idle.json (2 s after it became ready).
idle_mem() {
	sleep 2
	local rss=0 pss=0 n=0 p v
	for p in $(tree_pids "$CONSUMER_PID"); do
		v=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null || true)
		rss=$((rss + ${v:-0}))
		v=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
		pss=$((pss + ${v:-0}))
		n=$((n + 1))
	done
	echo "{\"rss_kib\":$rss,\"pss_kib\":$pss,\"procs\":$n}" >"$R/$1.idle.json"
}

# Ticks (1/CLK_TCK s) of CPU time: host_ticks the non-idle columns of
# /proc/stat; tree_ticks PID utime + stime of PID and its descendants.
host_ticks() {
	awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}
tree_ticks() {
	local p t=0 v
	for p in $(tree_pids "$1"); do
		v=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || true)
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
# children_s sets CHILDREN_S to the CPU seconds of this shell's reaped
# children (builtin times, second line), so that a foreground command's
# own CPU is the difference around it. Not to be called as $(children_s):
# a subshell's times does not count the shell's children.
children_s() {
	times >"$DIR/times"
	CHILDREN_S=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$DIR/times")
}

# lat_stats NAME FILE: p50/p99/max (us) of the latencies in FILE, one a
# line in the order the consumer saw them, past the first LAT_WARM, into
# $R/NAME.lat.json.
lat_stats() {
	tail -n +$((LAT_WARM + 1)) "$2" | sort -n | awk -v want="$LAT_N" '{ v[NR] = $1 }
		function q(p,  k) { k = int(p * NR + 0.999999); if (k < 1) k = 1; return v[k] }
		END { printf "{\"observed\":%d,\"published\":%d,\"lat_p50_us\":%d,\"lat_p99_us\":%d,\"lat_max_us\":%d}\n",
			NR, want, q(0.5), q(0.99), v[NR] }' >"$R/$1.lat.json"
}

# wait_lines FILE COUNT: until FILE has COUNT lines (60 s at most).
wait_lines() {
	local deadline=$(($(now_ms) + 60000))
	while (($(wc -l <"$1" 2>/dev/null || echo 0) < $2)); do
		(($(now_ms) < deadline)) || { log "only $(wc -l <"$1") of $2 latencies seen"; return 0; }
		sleep 0.1
	done
}

# peer_latency NAME CONSUMER_CMD -- PUBLISHER_CMD: start the consumer in
# latency mode, take its idle memory, run the peer's publisher (LAT_RATE/s
# for LAT_SECONDS + 1), wait for every latency, stop the consumer.
peer_latency() {
	local name=$1 cons=() pub=()
	shift
	while [[ $1 != -- ]]; do
		cons+=("$1")
		shift
	done
	shift
	pub=("$@")
	: >"$DIR/$name.lat"
	BENCH_LAT_FILE=$DIR/$name.lat start_peer "$DIR/$name.lat.log" "$DIR/$name.ready" "${cons[@]}"
	idle_mem "$name"
	local h0 c0 b0 p0 t0 h1 c1 b1 p1 t1
	h0=$(host_ticks) c0=$(tree_ticks "$CONSUMER_PID") b0=$(tree_ticks "$BROKER_PID")
	children_s
	p0=$CHILDREN_S t0=$(now_ms)
	"${pub[@]}" >>"$DIR/$name.pub.log" 2>&1
	children_s
	p1=$CHILDREN_S t1=$(now_ms)
	h1=$(host_ticks) c1=$(tree_ticks "$CONSUMER_PID") b1=$(tree_ticks "$BROKER_PID")
	wait_lines "$DIR/$name.lat" $((LAT_WARM + LAT_N))
	stop_consumer
	lat_stats "$name" "$DIR/$name.lat"
	# CPU that the rest of the host used while the publisher ran (not the
	# consumer, the broker, nor the publisher), as pub_rate reports it
	local other
	other=$(awk -v h=$((h1 - h0)) -v c=$((c1 - c0)) -v b=$((b1 - b0)) -v p="$p1" -v q="$p0" \
		-v hz="$(getconf CLK_TCK)" 'BEGIN { print (h - c - b) / hz - (p - q) }')
	sed -i "s/}\$/,\"other_cpu_s\":$other,\"window_s\":$(calc "($t1 - $t0) / 1000")}/" "$R/$name.lat.json"
	log "$name: idle $(jget "$R/$name.idle.json" rss_kib) KiB RSS, p99 $(jget "$R/$name.lat.json" lat_p99_us) us"
}

# best NAME: of $R/NAME.run*.json, the run with the highest rate into
# $R/NAME.json, with every run's rate listed.
best() {
	local f chosen list
	chosen=$(for f in "$R/$1".run*.json; do echo "$(jget "$f" rate) $f"; done |
		sort -n | tail -n 1 | cut -d' ' -f2)
	list=$(for f in "$R/$1".run*.json; do jget "$f" rate; done | paste -sd, -)
	sed "s/}\$/,\"runs\":[$list]}/" "$chosen" >"$R/$1.json"
}

# ------------------------------------------------------------- the host

CPU_MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
NCPU=$(nproc)
MEM_GIB=$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
# shellcheck disable=SC1091
OS=$(. /etc/os-release && echo "$PRETTY_NAME")
REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
TM_VERSION=$("$TM" --version 2>/dev/null | head -n 1 || echo unknown)
COMMIT=$(git -C "$SRCDIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
PY_VERSIONS=$("$PY" -c 'import sys, celery, redis, pika
print("python %d.%d, celery %s, redis-py %s, pika %s" % (sys.version_info[:2] + (celery.__version__, redis.__version__, pika.__version__)))' 2>/dev/null) ||
	{ echo "bench-peers: python3-celery, python3-redis or python3-pika missing; run scripts/install-peers.sh" >&2; exit 1; }
# shellcheck disable=SC2016 # JavaScript, not the shell's
NODE_VERSIONS=$(cd "$NODE_PEERS" && node -e 'const v = (p) => require(p + "/package.json").version;
console.log(`node ${process.versions.node}, bullmq ${v("bullmq")}, amqplib ${v("amqplib")}`)' 2>/dev/null) ||
	{ echo "bench-peers: bench/peers/node/node_modules missing; run scripts/install-peers.sh" >&2; exit 1; }
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

log "scratch dir $DIR; N=$N, $REPEAT run(s) per consumer"

# ------------------------------------------------------------------ Redis

redis_start "$DIR"
export BENCH_CELERY_BROKER=$REDIS_URL
BROKER_PID=$REDIS_PID # whose CPU the latency runs leave out of "elsewhere"

# What each layout has left: { undelivered, unfinished } (peer_measure.c).
LUA_STREAM="for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for j = 1, #g - 1, 2 do f[g[j]] = g[j + 1] end
  if f['name'] == ARGV[1] then
    local lag = tonumber(f['lag']) or -1
    return {lag, lag + f['pending']}
  end
end
return {-1, -1}"
LUA_CELERY="local q = redis.call('LLEN', KEYS[1])
return {q, q + redis.call('HLEN', KEYS[2])}"
LUA_BULLMQ="local w = redis.call('LLEN', KEYS[1])
return {w, w + redis.call('LLEN', KEYS[2])}"

# redis_measure NAME LUA_ARGS... -- CMD...: one measured run.
redis_measure() {
	local name=$1
	shift
	if ! "$PM" --n "$N" --redis "127.0.0.1:$REDIS_PORT" --broker-pid "$REDIS_PID" \
		--timeout 900 --log "$DIR/$name.log" "$@" >"$R/$name.json"; then
		echo "bench-peers: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

# redis_run PEER REP: load N messages with PEER's producer, run its consumer.
redis_run() {
	local peer=$1 name=redis.$1.run$2 http
	rcli FLUSHALL >/dev/null
	case $peer in
	taskmill)
		"$BB/load_redis" 127.0.0.1 "$REDIS_PORT" bench.taskmill "$N" >/dev/null 2>>"$DIR/load.log"
		rcli XGROUP CREATE bench.taskmill "$GROUP" 0 >/dev/null
		http=$(free_port)
		write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$http" \
			"  noop: { plugin: noop.so, queue: bench.taskmill, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
		redis_measure "$name" --eval "$LUA_STREAM" --key bench.taskmill --arg "$GROUP" \
			-- "$TM" run -c "$DIR/$name.yaml"
		;;
	redispy)
		"$PY" "$PEERS/redispy_peer.py" load "$REDIS_URL" bench.redispy "$N" 2>>"$DIR/load.log"
		rcli XGROUP CREATE bench.redispy "$GROUP" 0 >/dev/null
		redis_measure "$name" --eval "$LUA_STREAM" --key bench.redispy --arg "$GROUP" \
			-- "$PY" "$PEERS/redispy_peer.py" consume "$REDIS_URL" bench.redispy "$GROUP"
		;;
	celery | celery-fast)
		export BENCH_CELERY_FAST=0 BENCH_CELERY_QUEUE=bench.celery
		[[ $peer == celery-fast ]] && BENCH_CELERY_FAST=1
		"$PY" "$PEERS/celery_peer.py" load "$N" 2>>"$DIR/load.log"
		redis_measure "$name" --eval "$LUA_CELERY" \
			--key bench.celery --key unacked -- "${CELERY_WORKER[@]}"
		;;
	bullmq)
		node "$NODE_PEERS/bullmq_peer.js" load "$REDIS_URL" bench "$N" 2>>"$DIR/load.log"
		redis_measure "$name" --eval "$LUA_BULLMQ" --key bull:bench:wait \
			--key bull:bench:active -- node "$NODE_PEERS/bullmq_peer.js" consume "$REDIS_URL" bench
		;;
	esac
}
CELERY_WORKER=("$PY" -m celery -A celery_peer worker --concurrency 4 --pool prefork
	--loglevel WARNING --without-mingle --without-gossip)

REDIS_PEERS=()
for p in taskmill celery celery-fast redispy bullmq; do
	wants "$p" && REDIS_PEERS+=("$p")
done
for ((rep = 1; rep <= REPEAT; rep++)); do
	for p in "${REDIS_PEERS[@]}"; do
		redis_run "$p" "$rep"
	done
done
for p in "${REDIS_PEERS[@]}"; do
	best "redis.$p"
done

# Latency and idle memory.
rcli FLUSHALL >/dev/null
log "Redis: latency at $LAT_RATE msgs/s for $LAT_SECONDS s, idle memory"
for p in "${REDIS_PEERS[@]}"; do
	case $p in
	taskmill)
		HTTP=$(free_port)
		write_cfg "$DIR/lat-redis.yaml" "$REDIS_URL" "$HTTP" \
			"  noop: { plugin: noop.so, queue: bench.lat, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
		start_daemon "$DIR/lat-redis.yaml" "$DIR/lat-redis.log" "$HTTP"
		CONSUMER_PID=$DAEMON_PID
		idle_mem redis.taskmill
		BENCH_PIDS="$CONSUMER_PID $REDIS_PID" "$BB/pub_rate" redis 127.0.0.1 "$REDIS_PORT" \
			bench.lat "$LAT_RATE" "$LAT_SECONDS" >"$R/redis.taskmill.lat.json" ||
			{ echo "bench-peers: latency run: $(cat "$R/redis.taskmill.lat.json")" >&2; exit 1; }
		stop_consumer
		;;
	redispy)
		rcli XGROUP CREATE bench.lat.redispy "$GROUP" '$' MKSTREAM >/dev/null
		peer_latency redis.redispy \
			"$PY" "$PEERS/redispy_peer.py" consume "$REDIS_URL" bench.lat.redispy "$GROUP" -- \
			"$PY" "$PEERS/redispy_peer.py" pub "$REDIS_URL" bench.lat.redispy "$LAT_RATE" "$PEER_LAT_SECONDS"
		;;
	celery | celery-fast)
		export BENCH_CELERY_FAST=0 BENCH_CELERY_QUEUE=bench.lat.$p
		[[ $p == celery-fast ]] && BENCH_CELERY_FAST=1
		peer_latency "redis.$p" "${CELERY_WORKER[@]}" -- \
			"$PY" "$PEERS/celery_peer.py" pub "$LAT_RATE" "$PEER_LAT_SECONDS"
		;;
	bullmq)
		peer_latency redis.bullmq node "$NODE_PEERS/bullmq_peer.js" consume "$REDIS_URL" lat -- \
			node "$NODE_PEERS/bullmq_peer.js" pub "$REDIS_URL" lat "$LAT_RATE" "$PEER_LAT_SECONDS"
		;;
	esac
done

# --------------------------------------------------------------- RabbitMQ

AMQP_NOTE=
AMQP_PEERS=()
RABBIT_VERSION=
if [[ ${BENCH_PEERS_AMQP:-auto} == no ]]; then
	AMQP_NOTE="BENCH_PEERS_AMQP=no"
elif ! rabbit_installed; then
	AMQP_NOTE="rabbitmq-server is not installed"
else
	for p in taskmill pika amqplib; do
		wants "$p" && AMQP_PEERS+=("$p")
	done
fi

if ((${#AMQP_PEERS[@]} > 0)); then
	log "RabbitMQ: starting a private node"
	if rabbit_start "$DIR" "taskmill-peers-$$"; then
		BROKER_PID=$RABBIT_VM
	else
		AMQP_PEERS=()
		AMQP_NOTE="the private rabbitmq-server did not start"
		log "$AMQP_NOTE"
	fi
fi
AMQP_URL="amqp://guest:guest@127.0.0.1:${AMQP_PORT:-0}"

# amqp_measure NAME QUEUE END_ARGS... -- CMD...: one measured run.
amqp_measure() {
	local name=$1 queue=$2
	shift 2
	if ! "$BB/measure" --n "$N" --amqp "127.0.0.1:$AMQP_PORT" --queue "$queue" \
		--broker-pid "$RABBIT_VM" --timeout 900 --log "$DIR/$name.log" "$@" >"$R/$name.json"; then
		echo "bench-peers: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

# amqp_run PEER REP: load N messages with PEER's producer, run its consumer.
amqp_run() {
	local peer=$1 name=amqp.$1.run$2 http
	case $peer in
	taskmill)
		"$BB/load_amqp" 127.0.0.1 "$AMQP_PORT" bench.taskmill "$N" 2>>"$DIR/load.log"
		http=$(free_port)
		write_cfg "$DIR/$name.yaml" "$AMQP_URL" "$http" \
			"  noop: { plugin: noop.so, queue: bench.taskmill, prefetch: $PREFETCH, timeout: 0 }"
		amqp_measure "$name" bench.taskmill --metrics "127.0.0.1:$http" --task noop \
			-- "$TM" run -c "$DIR/$name.yaml"
		;;
	pika)
		"$PY" "$PEERS/pika_peer.py" load "$AMQP_URL" bench.pika "$N" 2>>"$DIR/load.log"
		amqp_measure "$name" bench.pika --done-pipe \
			-- "$PY" "$PEERS/pika_peer.py" consume "$AMQP_URL" bench.pika "$AMQP_PREFETCH" "$N"
		;;
	amqplib)
		node "$NODE_PEERS/amqplib_peer.js" load "$AMQP_URL" bench.amqplib "$N" 2>>"$DIR/load.log"
		amqp_measure "$name" bench.amqplib --done-pipe \
			-- node "$NODE_PEERS/amqplib_peer.js" consume "$AMQP_URL" bench.amqplib "$AMQP_PREFETCH" "$N"
		;;
	esac
}

if ((${#AMQP_PEERS[@]} > 0)); then
	# the daemon declares its queues (with its own arguments) first
	HTTP=$(free_port)
	write_cfg "$DIR/declare.yaml" "$AMQP_URL" "$HTTP" \
		"  noop: { plugin: noop.so, queue: bench.taskmill }
  journal: { plugin: journal.so, queue: bench.lat, config: { path: \"$DIR/lat-journal.txt\" } }"
	start_daemon "$DIR/declare.yaml" "$DIR/declare.log" "$HTTP"
	CONSUMER_PID=$DAEMON_PID
	stop_consumer
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for p in "${AMQP_PEERS[@]}"; do
			amqp_run "$p" "$rep"
		done
	done
	for p in "${AMQP_PEERS[@]}"; do
		best "amqp.$p"
	done
	log "RabbitMQ: latency at $LAT_RATE msgs/s for $LAT_SECONDS s, idle memory"
	for p in "${AMQP_PEERS[@]}"; do
		case $p in
		taskmill)
			HTTP=$(free_port)
			write_cfg "$DIR/lat-amqp.yaml" "$AMQP_URL" "$HTTP" \
				"  journal: { plugin: journal.so, queue: bench.lat, prefetch: $PREFETCH, timeout: 0, config: { path: \"$DIR/lat-journal.txt\" } }"
			start_daemon "$DIR/lat-amqp.yaml" "$DIR/lat-amqp.log" "$HTTP"
			CONSUMER_PID=$DAEMON_PID
			idle_mem amqp.taskmill
			BENCH_PIDS="$CONSUMER_PID $RABBIT_VM" "$BB/pub_rate" amqp 127.0.0.1 "$AMQP_PORT" \
				bench.lat "$LAT_RATE" "$LAT_SECONDS" "$DIR/lat-journal.txt" >"$R/amqp.taskmill.lat.json" ||
				{ echo "bench-peers: latency run: $(cat "$R/amqp.taskmill.lat.json")" >&2; exit 1; }
			stop_consumer
			;;
		pika | amqplib)
			if [[ $p == pika ]]; then
				cmd=("$PY" "$PEERS/pika_peer.py")
			else
				cmd=(node "$NODE_PEERS/amqplib_peer.js")
			fi
			peer_latency "amqp.$p" "${cmd[@]}" consume "$AMQP_URL" "bench.lat.$p" "$AMQP_PREFETCH" 0 -- \
				"${cmd[@]}" pub "$AMQP_URL" "bench.lat.$p" "$LAT_RATE" "$PEER_LAT_SECONDS"
			;;
		esac
	done
fi

# ------------------------------------------------------------ the table

HEADER="consumer	msgs/s	ratio	idle RSS MiB	ratio	idle PSS MiB	ratio	p99 us	ratio	cpu s/M	settings"
ROWS=()

# ratio A B: A / B to three significant digits (units from 100 on), "-"
# when B is 0 or missing
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 <= 0 || a == "") { print "-"; exit }
		x = a / b; if (x >= 100) printf "%.0f", x; else printf "%.3g", x }'
}

settings_of() {
	case $1 in
	taskmill) echo "thread x4, noop plugin, prefetch $PREFETCH" ;;
	celery) echo "prefork x4, acks_late, prefetch multiplier 1, no result backend" ;;
	celery-fast) echo "FASTER, LESS SAFE: Celery's defaults, ack on receipt (p99: publish->ack, before the run), prefetch multiplier 4; else as above" ;;
	redispy) echo "1 process, XREADGROUP COUNT 500, one XACK a batch" ;;
	bullmq) echo "Worker concurrency 50, removeOnComplete" ;;
	pika) echo "BlockingConnection, prefetch $AMQP_PREFETCH, ack each" ;;
	amqplib) echo "prefetch $AMQP_PREFETCH, ack each" ;;
	esac
}

label_of() {
	case $1 in
	taskmill) echo "taskmill (reference)" ;;
	celery) echo "Celery" ;;
	celery-fast) echo "Celery, early ack" ;;
	redispy) echo "redis-py group loop" ;;
	bullmq) echo "BullMQ" ;;
	pika) echo "pika" ;;
	amqplib) echo "amqplib" ;;
	esac
}

# rows BROKER PEER...: one row per consumer, ratios to taskmill's.
rows() {
	local b=$1 p f rate irss ipss p99 busy ref_rate ref_rss ref_pss ref_p99
	shift
	ref_rate=$(jget "$R/$b.taskmill.json" rate)
	ref_rss=$(jget "$R/$b.taskmill.idle.json" rss_kib)
	ref_pss=$(jget "$R/$b.taskmill.idle.json" pss_kib)
	ref_p99=$(jget "$R/$b.taskmill.lat.json" lat_p99_us)
	for p in "$@"; do
		f=$R/$b.$p
		rate=$(jget "$f.json" rate)
		busy=$(awk -v o="$(jget "$f.json" other_cpu_s)" -v s="$(jget "$f.json" seconds)" \
			-v lo="$(jget "$f.lat.json" other_cpu_s)" -v ls="$(jget "$f.lat.json" window_s)" \
			'BEGIN { t = s > 0 && o > 0 ? o / s : 0; l = ls > 0 && lo > 0 ? lo / ls : 0
				if (t > 0.25 || l > 0.25)
					printf "; BUSY HOST: %.1f (msgs/s) and %.1f (p99) cores used elsewhere", t, l }')
		irss=$(jget "$f.idle.json" rss_kib)
		ipss=$(jget "$f.idle.json" pss_kib)
		p99=$(jget "$f.lat.json" lat_p99_us)
		local IFS=$'\t'
		ROWS+=("$BROKER_LABEL $(label_of "$p")	$(fmt_int "$rate")	$(ratio "$rate" "$ref_rate")	$(mib "$irss")	$(ratio "$irss" "$ref_rss")	$(mib "$ipss")	$(ratio "$ipss" "$ref_pss")	$(printf %.0f "$p99")	$(ratio "$p99" "$ref_p99")	$(printf %.1f "$(jget "$f.json" cpu_s_per_m)")	$(settings_of "$p"); runs $(sed -n 's/.*"runs":\[\([^]]*\)\].*/\1/p' "$f.json" | tr , ' ')$busy")
	done
}

BROKER_LABEL=Redis rows redis "${REDIS_PEERS[@]}"
if ((${#AMQP_PEERS[@]} > 0)); then
	BROKER_LABEL=RabbitMQ rows amqp "${AMQP_PEERS[@]}"
else
	ROWS+=("RabbitMQ	skipped	-	-	-	-	-	-	-	-	$AMQP_NOTE")
fi

{
	echo
	echo "taskmill next to its peers, $DATE: $TM_VERSION ($COMMIT)"
	echo "host: $CPU_MODEL, $NCPU CPUs, $MEM_GIB GiB, $OS; redis $REDIS_VERSION${RABBIT_VERSION:+, rabbitmq $RABBIT_VERSION}"
	echo "peers: $PY_VERSIONS; $NODE_VERSIONS"
	echo "N=$(fmt_int "$N") messages, payload {}, pre-loaded by each consumer's own producer; best of $REPEAT interleaved runs (all listed)"
	echo "msgs/s: first delivery to last ack; idle: VmRSS and Pss summed over the process tree, 2 s after ready;"
	echo "p99: at $LAT_RATE msgs/s for $LAT_SECONDS s, publish->ack on Redis, publish->run on RabbitMQ; ratio: to taskmill on the same broker;"
	echo "cpu s/M: CPU seconds per million messages of the consumer's processes"
	echo
	print_table "$HEADER" "${ROWS[@]}"
} | tee "$DIR/table.txt"
mkdir -p "$(dirname "$OUT")"
cp "$DIR/table.txt" "$OUT"
log "done in $((SECONDS - T0)) s; table in $OUT"
