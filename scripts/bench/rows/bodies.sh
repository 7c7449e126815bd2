# shellcheck shell=bash
# Extra rows (issue 19): large bodies. The ceiling loop and the daemon's
# noop task (thread and fork pools) consume the same pre-loaded entries of
# 64 KiB, then of 1 MiB; the rate in MB/s of bodies, as a ratio to the
# ceiling's. 64 KiB has a target (>= 0.8), 1 MiB is reported. Fewer
# messages are kept unacknowledged than with {} bodies (prefetch 256 and
# 64; the ceiling the same), so that neither side holds gigabytes. A run
# of 64 KiB bodies takes 30,000 of them (about 2 GB in Redis, 1.5-2.5 s):
# with 10,000 a run lasted about half a second, and one scheduling hiccup
# or the first fill of the daemon's and Redis's memory weighed three times
# as much (ratios scattered by 0.3 between runs).
#
#   BENCH_BODY64_N    entries of 64 KiB (30000; quick 2000)
#   BENCH_BODY1M_N    entries of 1 MiB (500; quick 200)
#   BENCH_BODY_POOLS  daemon pools ("thread:4 fork:4")
BODY64_N=${BENCH_BODY64_N:-$((QUICK == 1 ? 2000 : 30000))}
BODY1M_N=${BENCH_BODY1M_N:-$((QUICK == 1 ? 200 : 500))}
BODY_POOLS=${BENCH_BODY_POOLS:-"thread:4 fork:4"}

# body_run NAME STREAM COUNT LAST CONFIG PREFETCH: redis_run for large
# bodies (the task's max_payload raised, prefetch given).
body_run() {
	local name=$1 stream=$2 count=$3 last=$4 what=$5 pf=$6 cmd
	reset_group "$stream"
	if [[ $what == ceiling ]]; then
		cmd=("$BB/ceiling_redis" 127.0.0.1 "$REDIS_PORT" "$stream" "$GROUP"
			$((pf / 2)) "$count" 2)
	else
		local kind size http
		read -r kind size < <(pool_words "$what")
		http=$(free_port)
		write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$kind" "$size" "$http" \
			"  noop: { plugin: noop.so, queue: $stream, group: $GROUP, prefetch: $pf, timeout: 0, max_payload: 8MiB }"
		cmd=("$TM" run -c "$DIR/$name.yaml")
	fi
	if ! "$BB/measure" --n "$count" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$stream" --group "$GROUP" --last "$last" --from 0-0 \
		--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
		-- "${cmd[@]}" >"$R/$name.json"; then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
}

bench_row_bodies() {
	local spec bytes n pf stream last rep c label cf f ceil mbs rate ratio cells v
	for spec in "65536 $BODY64_N 256 64KiB" "1048576 $BODY1M_N 64 1MiB"; do
		read -r bytes n pf label <<<"$spec"
		stream=bench.body$label
		log "bodies of $label: loading $n entries"
		last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$stream" "$n" "@$bytes" 2>>"$DIR/load.log")
		rcli XGROUP CREATE "$stream" "$GROUP" 0 >/dev/null
		for ((rep = 1; rep <= REPEAT; rep++)); do
			for c in ceiling $BODY_POOLS; do
				body_run "body$label.${c/:/}.run$rep" "$stream" "$n" "$last" "$c" "$pf"
			done
		done
		for c in ceiling $BODY_POOLS; do
			best "body$label.${c/:/}"
		done
		rcli DEL "$stream" >/dev/null
		cf=$R/body$label.ceiling.json
		ceil=$(jget "$cf" rate)
		mbs=$(calc "$ceil * $bytes / 1000000")
		row "Redis $label bodies, ceiling loop" \
			"$(printf '%.0f MB/s (med %.0f)' "$mbs" "$(calc "$(med_of "$cf") * $bytes / 1000000")")" - - - - \
			"$(run_cols "$cf"); $(fmt_int "$ceil") msgs/s"
		for c in $BODY_POOLS; do
			f=$R/body$label.${c/:/}.json
			rate=$(jget "$f" rate)
			ratio=$(calc "$rate / $ceil")
			cells=("$(printf '%.0f MB/s (med %.0f)' "$(calc "$rate * $bytes / 1000000")" \
				"$(calc "$(med_of "$f") * $bytes / 1000000")")" \
				"$(printf %.0f "$mbs") MB/s" "$(ratio_cell "$f" "$cf")")
			if [[ $label == 64KiB ]]; then
				v=$(verdict "$(at_least "$ratio" 0.8)")
				target_json "body64k.${c/:/}.ratio" "$(printf %.3f "$ratio")" ">= 0.8" "$v" \
					"$(printf %.3f "$(calc "$(med_of "$f") / $(med_of "$cf")")")"
				row "Redis $label bodies, taskmill ${c/:/ x}" "${cells[@]}" ">= 0.8" "$v" \
					"$(run_cols "$f"); $(fmt_int "$rate") msgs/s, prefetch $pf"
			else
				row "Redis $label bodies, taskmill ${c/:/ x}" "${cells[@]}" - reported \
					"$(run_cols "$f"); $(fmt_int "$rate") msgs/s, prefetch $pf"
			fi
		done
	done
}
BENCH_ROWS+=(bench_row_bodies)
