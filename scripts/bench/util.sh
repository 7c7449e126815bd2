# shellcheck shell=bash
# scripts/bench/util.sh - what `make bench` (scripts/bench.sh) and `make
# bench-peers` (scripts/bench-peers.sh) share: logging and waiting, free
# ports, JSON fields, arithmetic and number formatting, the private
# redis-server and RabbitMQ node, the cleanup at exit, and the table.
# Sourced; BENCH_NAME names the caller in messages ("bench" by default),
# T0 is the caller's start ($SECONDS). The brokers' pids are the globals
# REDIS_PID and RABBIT_PID, empty while none runs.

log() {
	printf '[%s %3ds] %s\n' "${BENCH_NAME:-bench}" $((SECONDS - T0)) "$*" >&2
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

# stop_pid PID SECONDS: SIGTERM, then SIGKILL when it is still there after
# SECONDS; reaped either way.
stop_pid() {
	kill -TERM "$1" 2>/dev/null || true
	wait_gone "$1" "$2" || kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
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
	echo "${BENCH_NAME:-bench}: no free port" >&2
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

mib() {
	awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'
}

rcli() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# start_daemon CFG LOG HTTP_PORT: run the daemon ($TM) with CFG, its
# stderr appended to LOG, and wait (30 s at most) for /ping to answer 200
# on HTTP_PORT; sets DAEMON_PID. 1 when it did not become ready.
start_daemon() {
	start_server "$2" "$3" "the daemon did not become ready ($1)" "$TM" run -c "$1"
}

# start_server LOG HTTP_PORT WHY CMD...: start_daemon for any command that
# serves /ping (bench/floor/http_floor too): CMD in the background, its
# stderr appended to LOG; DAEMON_PID set (stop_daemon stops it). 1, after
# WHY and the end of LOG, when /ping did not answer 200 within 30 s.
start_server() {
	local log=$1 port=$2 why=$3 deadline=$(($(now_ms) + 30000)) code
	shift 3
	"$@" 2>>"$log" &
	DAEMON_PID=$!
	while :; do
		code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/ping" || true)
		[[ $code == 200 ]] && return 0
		if ! kill -0 "$DAEMON_PID" 2>/dev/null || (($(now_ms) > deadline)); then
			echo "${BENCH_NAME:-bench}: $why; log:" >&2
			tail -n 20 "$log" >&2
			return 1
		fi
		sleep 0.05
	done
}

# ------------------------------------------------------------- brokers

# redis_start DIR: a private redis-server on a free port, no persistence,
# its log in DIR/redis.log; sets REDIS_PORT, REDIS_PID, REDIS_URL.
redis_start() {
	local i
	REDIS_PORT=$(free_port)
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$1" --save '' \
		--appendonly no --daemonize no --logfile "$1/redis.log" &
	REDIS_PID=$!
	for ((i = 0; i < 100; i++)); do
		[[ $(rcli ping 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
	[[ $(rcli ping 2>/dev/null) == PONG ]] ||
		{ echo "${BENCH_NAME:-bench}: redis-server did not start" >&2; exit 1; }
	REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
}

# rabbit_installed: 0 when a rabbitmq-server is there to start.
rabbit_installed() {
	[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || command -v rabbitmq-server >/dev/null 2>&1
}

# rabbitctl ARGS...: rabbitmqctl against the private node.
rabbitctl() {
	env HOME="$RABBIT_DIR" RABBITMQ_CONF_ENV_FILE="$RABBIT_DIR/env.conf" \
		"$RABBITCTL" -n "$RABBIT_NODE" -q "$@"
}

# rabbit_try_start: one attempt at the node on fresh free ports; 0 once it
# is up.
rabbit_try_start() {
	AMQP_PORT=$(free_port)
	rm -rf "$RABBIT_DIR"
	mkdir -p "$RABBIT_DIR/mnesia" "$RABBIT_DIR/log"
	: >"$RABBIT_DIR/env.conf"
	echo '[].' >"$RABBIT_DIR/enabled_plugins"
	(
		cd "$RABBIT_DIR" || exit
		exec env HOME="$RABBIT_DIR" RABBITMQ_NODE_PORT="$AMQP_PORT" \
			RABBITMQ_DIST_PORT="$(free_port)" RABBITMQ_NODENAME="$RABBIT_NODE" \
			RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
			RABBITMQ_MNESIA_BASE="$RABBIT_DIR/mnesia" RABBITMQ_LOG_BASE="$RABBIT_DIR/log" \
			RABBITMQ_CONF_ENV_FILE="$RABBIT_DIR/env.conf" \
			RABBITMQ_CONFIG_FILE="$RABBIT_DIR/rabbitmq" \
			RABBITMQ_ENABLED_PLUGINS_FILE="$RABBIT_DIR/enabled_plugins" \
			RABBITMQ_PID_FILE="$RABBIT_DIR/pid" \
			"$RABBIT_SERVER"
	) >>"$RABBIT_DIR.log" 2>&1 &
	RABBIT_PID=$!
	local i
	for ((i = 0; i < 120; i++)); do
		# our node name: a broker of someone else on the port cannot answer
		rabbitctl await_startup --timeout 60 >/dev/null 2>&1 && return 0
		kill -0 "$RABBIT_PID" 2>/dev/null || break
		sleep 0.5
	done
	[[ -s $RABBIT_DIR/pid ]] && kill -KILL "$(cat "$RABBIT_DIR/pid")" 2>/dev/null
	kill -KILL "$RABBIT_PID" 2>/dev/null || true
	wait "$RABBIT_PID" 2>/dev/null || true
	RABBIT_PID=
	return 1
}

# rabbit_start DIR NODE: a private RabbitMQ node named NODE@localhost,
# its files in DIR/rabbit, its output in DIR/rabbit.log. 0 once it is up:
# AMQP_PORT, RABBIT_PID, RABBIT_VM (the Erlang VM, whose CPU is the
# broker's), RABBIT_VERSION set; 1 when it did not start (twice: a port
# taken between the check and the bind fails a start).
rabbit_start() {
	RABBIT_DIR=$1/rabbit
	RABBIT_NODE=$2@localhost
	RABBIT_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
	RABBITCTL=/usr/lib/rabbitmq/bin/rabbitmqctl
	# /usr/sbin/ wrappers switch to the rabbitmq user, who cannot write here
	[[ -x $RABBIT_SERVER ]] || RABBIT_SERVER=$(command -v rabbitmq-server)
	[[ -x $RABBITCTL ]] || RABBITCTL=$(command -v rabbitmqctl)
	# Erlang writes erl_crash.dump into its working directory (or here)
	export ERL_CRASH_DUMP="$1/erl_crash.dump"
	if rabbit_try_start || rabbit_try_start; then
		RABBIT_VM=$(cat "$RABBIT_DIR/pid")
		RABBIT_VERSION=$(rabbitctl version 2>/dev/null || true)
		return 0
	fi
	tail -n 5 "$RABBIT_DIR.log" >&2 || true
	return 1
}

# bench_cleanup RC DIR KEEP: stop the brokers, show the end of each log in
# DIR when RC is not 0, remove DIR unless KEEP is 1, exit RC. The caller's
# EXIT trap stops its own consumer first.
bench_cleanup() {
	local rc=$1 dir=$2 keep=$3 f
	if [[ -n ${REDIS_PID:-} ]]; then
		stop_pid "$REDIS_PID" 10
		REDIS_PID=
	fi
	if [[ -n ${RABBIT_PID:-} ]]; then
		rabbitctl shutdown >/dev/null 2>&1 || true
		stop_pid "$RABBIT_PID" 20
		RABBIT_PID=
	fi
	if ((rc != 0)); then
		for f in "$dir"/*.log; do
			[[ -s $f ]] || continue
			echo "--- $f (last 15 lines)" >&2
			tail -n 15 "$f" >&2
		done
	fi
	if [[ $keep == 1 ]]; then
		echo "${BENCH_NAME:-bench}: scratch dir kept: $dir" >&2
	else
		rm -rf "$dir"
	fi
	exit "$rc"
}

# print_table HEADER ROW...: tab-separated columns, aligned, a rule under
# the header; the last column is not padded.
print_table() {
	printf '%s\n' "$@" |
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
				if (r == 1) {
					sep = ""
					for (i = 1; i <= nf; i++) {
						k = i < nf ? w[i] : length(c[1, nf])
						for (j = 0; j < k; j++) sep = sep "-"
						if (i < nf) sep = sep "  "
					}
					print sep
				}
			}
		}'
}
