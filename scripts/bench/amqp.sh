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
}

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
		cd "$DIR/rabbit" || exit
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

# bench_amqp_start: the private node, when AMQP is not skip.
bench_amqp_start() {
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
}

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

# bench_amqp_runs: throughput of each configuration, quorum, latency.
bench_amqp_runs() {
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
}
