# shellcheck shell=bash
# The RabbitMQ part of scripts/bench.sh (sourced by it): probe, private
# node, throughput (classic and quorum) and latency.

# bench_amqp_probe: AMQP=skip|ceiling|full (with AMQP_NOTE): is
# rabbitmq-server installed, and does this build have the adapter?
bench_amqp_probe() {
	AMQP=skip
	AMQP_NOTE=""
	RABBIT_VERSION=""
	if [[ $AMQP_MODE == no ]]; then
		AMQP_NOTE="BENCH_AMQP=no"
	elif ! rabbit_installed; then
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
}

# bench_amqp_start: the private node, when AMQP is not skip.
bench_amqp_start() {
	if [[ $AMQP != skip ]]; then
		log "RabbitMQ: starting a private node"
		if ! rabbit_start "$DIR" "taskmill-bench-$$"; then
			AMQP=skip
			AMQP_NOTE="the private rabbitmq-server did not start (see rabbit.log)"
			log "$AMQP_NOTE"
		fi
	fi

	AMQP_URL="amqp://guest:guest@127.0.0.1:${AMQP_PORT:-0}"
}

# amqp_run NAME CONFIG [QUEUE]: load QUEUE (bench.noop, classic; or
# bench.quorum, a quorum queue), then one measured run of CONFIG (ceiling
# or KIND:SIZE) on it.
amqp_run() {
	local name=$1 what=$2 queue=${3:-bench.noop} cmd ready=() extra=
	if [[ $AMQP == ceiling ]]; then
		ready=(--declare) # no daemon declares the queue
	fi
	[[ ${BENCH_AMQP_PERSISTENT:-0} == 1 ]] && ready+=(--persistent)
	"$BB/load_amqp" "${ready[@]}" 127.0.0.1 "$AMQP_PORT" "$queue" "$AMQP_N" 2>>"$DIR/load.log"
	local end=(--done-pipe)
	if [[ $what == ceiling ]]; then
		cmd=("$BB/ceiling_amqp" 127.0.0.1 "$AMQP_PORT" "$queue" "$AMQP_PREFETCH" "$AMQP_N")
	else
		local kind size http
		read -r kind size < <(pool_words "$what")
		http=$(free_port)
		[[ $queue == bench.quorum ]] && extra=", amqp: { queue_type: quorum }"
		BROKER_EXTRA=$extra write_cfg "$DIR/$name.yaml" "$AMQP_URL" "$kind" "$size" "$http" \
			"  noop: { plugin: noop.so, queue: $queue, prefetch: $AMQP_PREFETCH, timeout: 0 }"
		cmd=("$TM" run -c "$DIR/$name.yaml")
		end=(--metrics "127.0.0.1:$http" --task noop)
	fi
	if ! "$BB/measure" --n "$AMQP_N" --amqp "127.0.0.1:$AMQP_PORT" --queue "$queue" \
		"${end[@]}" --broker-pid "$RABBIT_VM" --timeout 300 --log "$DIR/$name.log" \
		-- "${cmd[@]}" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

# amqp_declare: the daemon declares its queues (with its own arguments)
# before anything is loaded into them: bench.noop and bench.lat, and the
# quorum queue bench.quorum. Once per bench.
AMQP_DECLARED=0
amqp_declare() {
	local http
	((AMQP_DECLARED == 0)) || return 0
	AMQP_DECLARED=1
	http=$(free_port)
	write_cfg "$DIR/declare.yaml" "$AMQP_URL" thread 1 "$http" \
		"  noop: { plugin: noop.so, queue: bench.noop }
  journal: { plugin: journal.so, queue: bench.lat, config: { path: \"$DIR/lat-journal.txt\" } }"
	start_daemon "$DIR/declare.yaml" "$DIR/declare.log" "$http"
	stop_daemon
	http=$(free_port)
	BROKER_EXTRA=", amqp: { queue_type: quorum }" write_cfg \
		"$DIR/declare-quorum.yaml" "$AMQP_URL" thread 1 "$http" \
		"  noop: { plugin: noop.so, queue: bench.quorum }"
	start_daemon "$DIR/declare-quorum.yaml" "$DIR/declare.log" "$http"
	stop_daemon
}

# bench_amqp_runs: throughput of the ceiling loop and each of AMQP_POOLS,
# on the classic queue and then on the quorum queue (only with the
# adapter: a daemon declares it); REPEAT interleaved rounds.
bench_amqp_runs() {
	local c rep more
	AMQP_CONFIGS=()
	[[ $AMQP != skip ]] || return 0
	AMQP_CONFIGS=(ceiling)
	if [[ $AMQP == full ]]; then
		read -r -a more <<<"$AMQP_POOLS"
		AMQP_CONFIGS+=("${more[@]}")
		amqp_declare
	fi
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for c in "${AMQP_CONFIGS[@]}"; do
			amqp_run "amqp.${c/:/}.run$rep" "$c"
		done
		if [[ $AMQP == full ]]; then
			for c in "${AMQP_CONFIGS[@]}"; do
				amqp_run "amqp.quorum.${c/:/}.run$rep" "$c" bench.quorum
			done
		fi
	done
	for c in "${AMQP_CONFIGS[@]}"; do
		best "amqp.${c/:/}"
		[[ $AMQP == full ]] && best "amqp.quorum.${c/:/}"
	done
	return 0
}

# bench_amqp_latency: publish -> run at LAT_RATE msgs/s for LAT_SECONDS
# through a daemon of each of LAT_POOLS in turn, its journal task
# appending each message to a file that pub_rate watches (into
# $R/amqp.lat.KINDSIZE.json); the broker's round trip back to back
# ($R/amqp.rtt.json). Only with the RabbitMQ adapter (AMQP full).
bench_amqp_latency() {
	[[ $AMQP == full ]] || return 0
	amqp_declare
	"$BB/pub_rate" rtt-amqp 127.0.0.1 "$AMQP_PORT" bench.lat 10000 >"$R/amqp.rtt.json"
	latency_runs amqp "$AMQP_URL" "$RABBIT_VM" \
		"  journal: { plugin: journal.so, queue: bench.lat, prefetch: $AMQP_PREFETCH, timeout: 0, config: { path: \"$DIR/lat-journal.txt\" } }" \
		amqp 127.0.0.1 "$AMQP_PORT" bench.lat "$LAT_RATE" "$LAT_SECONDS" "$DIR/lat-journal.txt"
}
