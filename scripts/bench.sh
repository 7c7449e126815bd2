#!/usr/bin/env bash
# The taskmill benchmark (DESIGN.md, Performance; issues 8 and 19). `make
# bench` runs
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
# BENCH_REPEAT times, interleaved; the best run and the median run are
# shown, with every run's rate in the notes, and the verdict is on the best
# (load from elsewhere only slows a run down). The targets are issue 19's
# (docs/performance.md, "Targets").
#
# Knobs (environment):
#   BENCH_QUICK=1           smoke run (~2 minutes on 2 busy cores): small N,
#                           one repeat; its figures mean nothing
#   BENCH_PARTS             the parts to run, any of
#                             redis    Redis throughput: ceiling loop, pools
#                             hosts    language hosts next to the C noop
#                             flat     flatness over a long stream
#                             latency  publish->ack p99 at BENCH_LAT_RATE,
#                                      both brokers, each of BENCH_LAT_POOLS
#                             idle     idle RSS
#                             scale    500 idle tasks, load spread over 100
#                             amqp     RabbitMQ throughput (classic, quorum)
#                             rows     the extra rows (scripts/bench/rows/)
#                           (default all: "redis hosts flat latency idle
#                           scale amqp rows"); e.g. BENCH_PARTS="redis amqp"
#   BENCH_N                 Redis messages per run (1000000)
#   BENCH_AMQP_N            RabbitMQ messages per run (300000)
#   BENCH_REPEAT            runs per configuration (3)
#   BENCH_PREFETCH          Redis prefetch of the daemon, and the ceiling's
#                           unacknowledged bound (1024)
#   BENCH_AMQP_PREFETCH     the same for RabbitMQ (1024)
#   BENCH_POOLS             Redis daemon pools ("thread:4 thread:2 fork:4 fork:2")
#   BENCH_AMQP_POOLS        RabbitMQ daemon pools ("thread:4 fork:4"); the
#                           ceiling loop and these also run on a quorum
#                           queue (ratio to its own ceiling, no target)
#   BENCH_FLAT              stream sizes of the flatness runs ("100000 2000000")
#   BENCH_LAT_RATE, BENCH_LAT_SECONDS   latency publisher (1000 /s, 5 s)
#   BENCH_LAT_POOLS         daemon pools of the latency runs ("thread:4 fork:4")
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
#   BENCH_ROWS_ONLY=1       the same as BENCH_PARTS=rows: only the extra rows
#                           (scripts/bench/rows/, below), with the private
#                           brokers, none of the built-in runs
#   BENCH_ROW_FILES         the extra row files to source, by name without
#                           .sh ("bodies sleep"; default: all of them)
#   the extra rows' own knobs are at the top of their files
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
LAT_POOLS=${BENCH_LAT_POOLS:-"thread:4 fork:4"}
AMQP_MODE=${BENCH_AMQP:-auto}
OUT=${BENCH_OUT:-$BB/results.json}
ALL_PARTS="redis hosts flat latency idle scale amqp rows"
if [[ ${BENCH_ROWS_ONLY:-0} == 1 ]]; then
	PARTS_LIST=rows
else
	read -r -a words <<<"${BENCH_PARTS:-$ALL_PARTS}"
	PARTS_LIST="${words[*]}" # white space folded
fi
for p in $PARTS_LIST; do
	[[ " $ALL_PARTS " == *" $p "* ]] ||
		{ echo "bench: BENCH_PARTS: unknown part '$p' (parts: $ALL_PARTS)" >&2; exit 2; }
done
PARTS=" $PARTS_LIST "
# part NAME: 0 when the part NAME runs
part() {
	[[ $PARTS == *" $1 "* ]]
}
# The ceiling keeps as many entries unacknowledged as the daemon may
# (prefetch): two reads of prefetch/2 in flight.
CEIL_DEPTH=2
CEIL_COUNT=$((PREFETCH / CEIL_DEPTH > 0 ? PREFETCH / CEIL_DEPTH : 1))

DIR=$(mktemp -d "${TMPDIR:-/tmp}/taskmill-bench.XXXXXX")
R=$DIR/results # one JSON object per file
mkdir -p "$R"
REDIS_PID=
RABBIT_PID=
DAEMON_PID=
AMQP=skip
AMQP_NOTE="not in BENCH_PARTS"
RABBIT_VERSION=
BENCH_HOSTS_RUN=()
T0=$SECONDS

BENCH_LIB=$SRCDIR/scripts/bench
# shellcheck source=scripts/bench/lib.sh
. "$BENCH_LIB/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

# ------------------------------------------------------------- the parts
#
# scripts/bench/*.sh define the parts (sourced here, nothing runs yet); the
# calls below run them in order, then the table is built from $R.
# shellcheck source=scripts/bench/redis.sh
. "$BENCH_LIB/redis.sh"
# shellcheck source=scripts/bench/hosts.sh
. "$BENCH_LIB/hosts.sh"
# shellcheck source=scripts/bench/scale.sh
. "$BENCH_LIB/scale.sh"
# shellcheck source=scripts/bench/amqp.sh
. "$BENCH_LIB/amqp.sh"
# shellcheck source=scripts/bench/report.sh
. "$BENCH_LIB/report.sh"

# Extra rows. Every scripts/bench/rows/*.sh (and scripts/bench-rows/*.sh)
# is sourced here, in name order, and may register rows: it defines a
# function and appends its name to BENCH_ROWS,
#
#   bench_row_example() {
#       log "example: measuring"
#       ... runs against the private brokers, results under $R ...
#       row "figure" "value" "reference" "ratio" "target" "PASS|MISS|reported" \
#           "cpu s/M" "broker s/M" "RSS MiB" "notes"     # "-" for an empty cell
#       target_json example.ratio 0.93 ">= 0.9" PASS      # for rows with a target
#   }
#   BENCH_ROWS+=(bench_row_example)
#
# With "rows" in BENCH_PARTS, the functions run in that order after the
# built-in rows, before the table is printed, while the private brokers
# still run: redis-server on REDIS_PORT (REDIS_URL, REDIS_PID, rcli
# ARGS...), and RabbitMQ when AMQP is not "skip" (AMQP_PORT, AMQP_URL,
# RABBIT_VM; AMQP_NOTE says why it is skipped). At hand: write_cfg,
# start_daemon, stop_daemon (one daemon at a time, DAEMON_PID), redis_run,
# best/median (and med_of FILE: the median run's rate), rate_cell and
# ratio_cell (best and median in one cell), at_least, free_port, jget,
# calc, fmt_int, mib, verdict, log, proc_ticks, the programs in $BB, the
# plugins in $BUILD/plugins, scratch space in $DIR (removed at the end),
# QUICK=1 for a smoke run. A function that fails fails the bench, as a
# failed run does; a target it misses stays in the table as MISS with a
# note.
BENCH_ROWS=()
if part rows; then
	for f in "$BENCH_LIB"/rows/*.sh "$SRCDIR"/scripts/bench-rows/*.sh; do
		[[ -f $f ]] || continue
		if [[ -n ${BENCH_ROW_FILES:-} && " $BENCH_ROW_FILES " != *" $(basename "$f" .sh) "* ]]; then
			continue
		fi
		# shellcheck source=/dev/null
		. "$f"
	done
fi

bench_redis_start
if part redis; then bench_redis_throughput; fi
if part hosts; then bench_hosts; fi
if part flat; then bench_redis_flatness; fi
if part latency; then bench_redis_latency; fi
if part idle; then bench_redis_idle; fi
if part scale; then bench_scale; fi
if part amqp || part latency || part rows; then
	bench_amqp_probe
	bench_amqp_start
fi
if part amqp; then bench_amqp_runs; fi
if part latency; then bench_amqp_latency; fi
bench_report_rows
for fn in "${BENCH_ROWS[@]}"; do
	"$fn"
done
bench_report_print
bench_report_json

log "done in $((SECONDS - T0)) s"
