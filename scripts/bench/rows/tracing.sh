# shellcheck shell=bash
# tracing.sh - bench rows: the throughput cost of tracing on Redis
# (docs/observability.md).
#
# Sourced by scripts/bench.sh with the other extra rows (see the comment
# above its BENCH_ROWS loop); registers bench_row_tracing.
#
# A thread x4 daemon consumes TRACE_N entries with the noop task: without
# telemetry, with telemetry.sample_ratio 1 (every run a span, exported)
# and with 0.01, to a sink on loopback that answers every export 200
# without decoding it (node), so that what is measured is the daemon's
# cost: the ids, the span built on the settle thread, the queue, the
# exporter thread's encoding and posting. The runs alternate, REPEAT times
# each, and the best of each is compared with the best untraced one.
# Targets: sample 1.0 at least 0.80 of the untraced rate, 0.01 at least
# 0.97. Knob: BENCH_TRACE_N (messages per run; 200000, quick 30000).

TRACE_N=${BENCH_TRACE_N:-$((QUICK == 1 ? 30000 : 200000))}
TRACE_STREAM=bench.trace
TRACE_SINK_PID=

# trace_sink_start: the sink on a free port, TRACE_SINK_PORT
trace_sink_start() {
	TRACE_SINK_PORT=$(free_port)
	node -e '
		require("http").createServer((q, s) => {
			q.resume();
			q.on("end", () => { s.writeHead(200); s.end(); });
		}).listen(Number(process.argv[1]), "127.0.0.1");
	' "$TRACE_SINK_PORT" >"$DIR/trace-sink.log" 2>&1 &
	TRACE_SINK_PID=$!
	local i
	for ((i = 0; i < 100; i++)); do
		curl -s -o /dev/null -X POST "http://127.0.0.1:$TRACE_SINK_PORT/v1/traces" && return 0
		sleep 0.1
	done
	echo "bench: the trace sink did not start: $(cat "$DIR/trace-sink.log")" >&2
	exit 1
}

# trace_run NAME RATIO: one measured run into $R/NAME.json; RATIO is a
# sample_ratio, or "" for no telemetry.
trace_run() {
	local name=$1 ratio=$2 last http
	rcli DEL "$TRACE_STREAM" >/dev/null
	last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$TRACE_STREAM" "$TRACE_N" 2>>"$DIR/load.log")
	reset_group "$TRACE_STREAM"
	http=$(free_port)
	write_cfg "$DIR/$name.yaml" "$REDIS_URL" thread 4 "$http" \
		"  noop: { plugin: noop.so, queue: $TRACE_STREAM, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
	if [[ -n $ratio ]]; then
		printf 'telemetry: { otlp_endpoint: "http://127.0.0.1:%s", sample_ratio: %s }\n' \
			"$TRACE_SINK_PORT" "$ratio" >>"$DIR/$name.yaml"
	fi
	if ! "$BB/measure" --n "$TRACE_N" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$TRACE_STREAM" --group "$GROUP" --last "$last" --from 0-0 \
		--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
		-- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	rcli DEL "$TRACE_STREAM" >/dev/null
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s${ratio:+ (tracing, sample_ratio $ratio)}"
}

# trace_row LABEL NAME TARGET KEY: the row of one traced side against the
# untraced best
trace_row() {
	local label=$1 name=$2 target=$3 key=$4 none traced ratio ok v
	none=$(jget "$R/trace.none.json" rate)
	traced=$(jget "$R/$name.json" rate)
	ratio=$(calc "$traced / $none")
	ok=$(awk -v r="$ratio" -v t="$target" 'BEGIN { print (r >= t) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "$label" "$(fmt_int "$traced")/s" "$(fmt_int "$none")/s (untraced)" \
		"$(printf %.2f "$ratio")" ">= $target" "$v" "$(run_cols "$R/$name.json")"
	target_json "$key" "$(printf %.3f "$ratio")" ">= $target" "$v"
}

bench_row_tracing() {
	local rep
	command -v node >/dev/null 2>&1 || {
		log "tracing: skipped, no node for the trace sink"
		return 0
	}
	log "tracing: N=$TRACE_N, thread x4, untraced and traced at sample 1.0 and 0.01"
	trace_sink_start
	trace_run trace.warmup ""
	for ((rep = 1; rep <= REPEAT; rep++)); do
		trace_run "trace.none.run$rep" ""
		trace_run "trace.all.run$rep" 1
		trace_run "trace.some.run$rep" 0.01
	done
	best trace.none
	best trace.all
	best trace.some
	kill "$TRACE_SINK_PID" 2>/dev/null || true
	trace_row "Redis thread x4 with tracing at sample 1.0" trace.all 0.80 redis.tracing_ratio
	trace_row "Redis thread x4 with tracing at sample 0.01" trace.some 0.97 redis.tracing_sampled_ratio
}
BENCH_ROWS+=(bench_row_tracing)
