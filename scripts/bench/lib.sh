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
