# shellcheck shell=bash
# rate_limit.sh - bench row: the throughput cost of rate_limit on Redis.
#
# Sourced by scripts/bench.sh with the other extra rows (see the comment
# above its BENCH_ROWS loop); registers bench_row_rate_limit, which runs
# once the built-in rows are measured, against the bench's redis-server.
#
# A thread x4 daemon consumes RATE_N entries with the noop task, once
# without rate_limit and once with a rate_limit ten times the rate
# measured without it in a warm-up run, at least 5,000,000/s (far above
# it: the limit never binds, so what is measured is the cost of taking
# tokens before the reads). The runs alternate, REPEAT times each, and the
# best of each side is compared. Target: with the limit at least 0.90 of the rate without.
# Knob: BENCH_RATE_N (messages per run; 200000, quick 30000).

RATE_N=${BENCH_RATE_N:-$((QUICK == 1 ? 30000 : 200000))}
RATE_STREAM=bench.rate
RATE_LIMIT=

# rate_run NAME LIMIT: one measured run into $R/NAME.json; LIMIT is a
# rate_limit value, or "" for none.
rate_run() {
	local name=$1 limit=$2 last http extra=
	rcli DEL "$RATE_STREAM" >/dev/null
	last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$RATE_STREAM" "$RATE_N" 2>>"$DIR/load.log")
	reset_group "$RATE_STREAM"
	[[ -z $limit ]] || extra=", rate_limit: $limit"
	http=$(free_port)
	write_cfg "$DIR/$name.yaml" "$REDIS_URL" thread 4 "$http" \
		"  noop: { plugin: noop.so, queue: $RATE_STREAM, group: $GROUP, prefetch: $PREFETCH, timeout: 0$extra }"
	if ! "$BB/measure" --n "$RATE_N" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$RATE_STREAM" --group "$GROUP" --last "$last" --from 0-0 \
		--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
		-- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	rcli DEL "$RATE_STREAM" "$RATE_STREAM.rate.$GROUP" >/dev/null
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s${limit:+ (rate_limit $limit)}"
}

bench_row_rate_limit() {
	local rep none limited ratio ok v
	log "rate_limit: N=$RATE_N, thread x4, without and with a limit far above the rate"
	# a first run warms the server up and sets the limit: ten times its
	# rate, and at least 5,000,000/s (a first run on a busy host is slow)
	rate_run rate.warmup ""
	RATE_LIMIT="$(awk -v r="$(jget "$R/rate.warmup.json" rate)" \
		'BEGIN { r *= 10; printf "%.0f", (r > 5000000 ? r : 5000000) }')/s"
	for ((rep = 1; rep <= REPEAT; rep++)); do
		rate_run "rate.none.run$rep" ""
		rate_run "rate.limited.run$rep" "$RATE_LIMIT"
	done
	best rate.none
	best rate.limited
	none=$(jget "$R/rate.none.json" rate)
	limited=$(jget "$R/rate.limited.json" rate)
	ratio=$(calc "$limited / $none")
	ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "Redis thread x4, rate_limit $RATE_LIMIT" "$(fmt_int "$limited")/s" \
		"$(fmt_int "$none")/s (no rate_limit)" "$(printf %.2f "$ratio")" ">= 0.90" "$v" \
		"$(run_cols "$R/rate.limited.json")"
	target_json redis.rate_limit_ratio "$(printf %.3f "$ratio")" ">= 0.90" "$v"
}
BENCH_ROWS+=(bench_row_rate_limit)
