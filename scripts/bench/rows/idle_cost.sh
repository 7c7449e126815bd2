# shellcheck shell=bash
# Bench row: what 500 idle tasks cost Redis (issue 28, item 9): the
# commands per second Redis runs for one idle daemon, counted by Redis
# itself (INFO commandstats after CONFIG RESETSTAT: the commands that
# scripts run inside Redis count, they are its work), and the daemon's
# connections (CLIENT LIST). Targets: <= 20 commands/s and <= 8
# connections. The per-command breakdown goes to the run's JSON
# (results."idle_cost").
# Sourced by scripts/bench.sh (see "Extra rows" there).

IDLE_COST_TASKS=${BENCH_IDLE_COST_TASKS:-500}
IDLE_COST_S=${BENCH_IDLE_COST_S:-$((QUICK == 1 ? 10 : 30))}

bench_row_idle_cost() {
	local http i stats total own rate conns ok_c ok_n ok breakdown
	http=$(free_port)
	write_cfg "$DIR/idle-cost.yaml" "$REDIS_URL" thread 2 "$http" \
		"$(for ((i = 0; i < IDLE_COST_TASKS; i++)); do
			echo "  t$i: { plugin: noop.so, queue: bench.idle.$i }"
		done)"
	start_daemon "$DIR/idle-cost.yaml" "$DIR/idle-cost.log" "$http" || return 1
	# past the start: the first rounds look at every task's sets
	sleep 8
	log "idle cost: $IDLE_COST_TASKS idle tasks for $IDLE_COST_S s"
	rcli CONFIG RESETSTAT >/dev/null
	sleep "$IDLE_COST_S"
	stats=$(rcli INFO commandstats | tr -d '\r')
	conns=$(($(rcli CLIENT LIST | wc -l) - 1))
	stop_daemon
	# CONFIG RESETSTAT and INFO are the bench's own
	total=$(awk -F'[:=,]' '/^cmdstat_/ && !/^cmdstat_(config|info)[:|]/ { n += $3 } END { print n + 0 }' <<<"$stats")
	rate=$(calc "$total / $IDLE_COST_S")
	breakdown=$(awk -F'[:=,]' -v s="$IDLE_COST_S" '
		/^cmdstat_/ && !/^cmdstat_(config|info)[:|]/ {
			name = substr($1, 9)
			printf "%s\"%s\":%.2f", sep, name, $3 / s
			sep = ","
		}' <<<"$stats")
	echo "{\"tasks\":$IDLE_COST_TASKS,\"seconds\":$IDLE_COST_S,\"connections\":$conns,\"cmds_per_s\":$rate,\"by_command\":{$breakdown}}" \
		>"$R/idle_cost.json"
	ok_n=$(awk -v r="$rate" 'BEGIN { print (r <= 20) ? 1 : 0 }')
	ok_c=$(awk -v c="$conns" 'BEGIN { print (c <= 8) ? 1 : 0 }')
	ok=$((ok_n && ok_c))
	log "idle cost: $(printf '%.1f' "$rate") commands/s, $conns connections"
	row "$IDLE_COST_TASKS idle tasks: Redis commands/s <= 20 and connections <= 8" \
		"$(printf '%.1f' "$rate")/s, $conns conns" - - "<= 20/s, <= 8" \
		"$(verdict "$ok")" - - - \
		"INFO commandstats over $IDLE_COST_S s (commands inside scripts count); per command in results.idle_cost"
	target_json idle_cost.cmds_per_s "$rate" "<= 20" "$(verdict "$ok_n")"
	target_json idle_cost.connections "$conns" "<= 8" "$(verdict "$ok_c")"
	for ((i = 0; i < IDLE_COST_TASKS; i++)); do
		echo "DEL bench.idle.$i"
	done | rcli >/dev/null
}
BENCH_ROWS+=(bench_row_idle_cost)
