# shellcheck shell=bash
# The language hosts part of scripts/bench.sh (sourced by it).

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

# bench_hosts: each built host and the C noop, in HOST_POOLS.
bench_hosts() {
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
}
