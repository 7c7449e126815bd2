# shellcheck shell=bash
# Extra rows (issue 19): tasks that wait, not compute. The sleep task with
# {"ms":10} in a pool of 64 threads against the ideal 64 x 100 = 6,400/s
# (target >= 0.9), and in a fork pool of 32 against its 3,200/s
# (reported): what the pool's hand-off costs when the work is latency.
#
#   BENCH_SLEEP_POOLS  "thread:64 fork:32"
#   BENCH_SLEEP_S      seconds of ideal work per run (5; quick 2)
SLEEP_POOLS=${BENCH_SLEEP_POOLS:-"thread:64 fork:32"}
SLEEP_S=${BENCH_SLEEP_S:-$((QUICK == 1 ? 2 : 5))}
SLEEP_MS=10

bench_row_sleep() {
	local c kind size ideal n stream last rep http name f ratio med cells v
	for ((rep = 1; rep <= REPEAT; rep++)); do
		for c in $SLEEP_POOLS; do
			read -r kind size < <(pool_words "$c")
			ideal=$((size * 1000 / SLEEP_MS))
			n=$((ideal * SLEEP_S))
			stream=bench.sleep.$kind$size
			name=sleep.$kind$size.run$rep
			rcli DEL "$stream" >/dev/null
			last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$stream" "$n" \
				"{\"ms\":$SLEEP_MS}" 2>>"$DIR/load.log")
			reset_group "$stream"
			http=$(free_port)
			write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$kind" "$size" "$http" \
				"  sleep: { plugin: sleep.so, queue: $stream, group: $GROUP, prefetch: $((size * 4)), timeout: 0 }"
			if ! "$BB/measure" --n "$n" --redis "127.0.0.1:$REDIS_PORT" \
				--stream "$stream" --group "$GROUP" --last "$last" --from 0-0 \
				--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
				-- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json"; then
				echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
				exit 1
			fi
			rcli DEL "$stream" >/dev/null
			log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s"
		done
	done
	for c in $SLEEP_POOLS; do
		read -r kind size < <(pool_words "$c")
		best "sleep.$kind$size"
		ideal=$((size * 1000 / SLEEP_MS))
		f=$R/sleep.$kind$size.json
		ratio=$(calc "$(jget "$f" rate) / $ideal")
		med=$(calc "$(med_of "$f") / $ideal")
		cells=("$(rate_cell "$f")" "$(fmt_int "$ideal")/s ideal" "$(printf '%.2f (med %.2f)' "$ratio" "$med")")
		if [[ $kind == thread ]]; then
			v=$(verdict "$(at_least "$ratio" 0.9)")
			target_json "sleep10ms.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= 0.9" "$v" "$(printf %.3f "$med")"
			row "10 ms sleep tasks, $kind x$size" "${cells[@]}" ">= 0.9" "$v" "$(run_cols "$f")"
		else
			row "10 ms sleep tasks, $kind x$size" "${cells[@]}" - reported "$(run_cols "$f")"
		fi
	done
}
BENCH_ROWS+=(bench_row_sleep)
