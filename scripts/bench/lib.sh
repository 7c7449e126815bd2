# shellcheck shell=bash
# The helpers of scripts/bench.sh (sourced by it): logging, waiting,
# free ports, JSON fields, the daemon's config and start, picking the best
# or the median run. Uses the driver's DIR, R, TM, BUILD, the broker pids.

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

# free_port, jget, calc, fmt_int, rcli
. "$BENCH_LIB/util.sh"

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
