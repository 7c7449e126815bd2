# shellcheck shell=bash
# The Redis part of scripts/bench.sh (sourced by it): the private
# redis-server, the throughput runs of the ceiling loop and the pools,
# flatness, latency and idle RSS.

# bench_redis_start: the private redis-server on a free port (REDIS_PORT,
# REDIS_PID, REDIS_URL).
bench_redis_start() {
	redis_start "$DIR"
	GROUP=taskmill
}

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

# bench_redis_throughput: N entries, each configuration REPEAT times.
bench_redis_throughput() {
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
}

bench_redis_flatness() {
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
	declare -gA FLAT_FROM FLAT_LAST
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
}

# bench_redis_latency: publish -> ack at LAT_RATE msgs/s for LAT_SECONDS,
# through a daemon of each of LAT_POOLS in turn (into
# $R/redis.lat.KINDSIZE.json), and the broker's own round trip, back to
# back on the idle broker ($R/redis.rtt.json; pub_rate also measures it in
# the same window as the latencies).
bench_redis_latency() {
	"$BB/pub_rate" rtt-redis 127.0.0.1 "$REDIS_PORT" 10000 >"$R/redis.rtt.json"
	rcli DEL bench.lat >/dev/null
	latency_runs redis "$REDIS_URL" "$REDIS_PID" \
		"  noop: { plugin: noop.so, queue: bench.lat, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }" \
		redis 127.0.0.1 "$REDIS_PORT" bench.lat "$LAT_RATE" "$LAT_SECONDS"
	rcli DEL bench.lat >/dev/null
}

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

# bench_redis_idle: idle RSS of the thread and the fork pool.
bench_redis_idle() {
	log "idle RSS"
	idle_rss thread idle.thread
	idle_rss fork idle.fork
}
