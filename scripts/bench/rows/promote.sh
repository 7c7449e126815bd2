# shellcheck shell=bash
# Bench row: the cost of delayed messages on Redis, the rate at which a
# daemon moves due members of "<queue>.scheduled" into the stream (its
# promotion script: XADD + ZREM per member, 500 per call, by the server's
# clock), next to the plain Redis ceiling loop of the built-in rows.
# Sourced by scripts/bench.sh (see "Extra rows" there).
#
# M members, all due already, are loaded into bench.promote.scheduled;
# one daemon with a task on bench.promote starts, and the rate is M over
# the time from the first member moved to the set being empty (ZCARD
# read every 10 ms). The task sleeps 2 s per message with one worker and
# prefetch 1, so consuming the stream costs Redis next to nothing while
# the set drains. broker s/M: redis-server CPU seconds per million
# members moved.

# promote_load KEY M: M members due at epoch ms 1, through one pipe.
promote_load() {
	local out
	out=$(awk -v key="$1" -v n="$2" 'BEGIN {
		for (i = 1; i <= n; i++) {
			m = sprintf("{\"id\":\"b%d\",\"body\":{\"ms\":2000}}", i)
			printf "*4\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n$1\r\n1\r\n$%d\r\n%s\r\n",
				length(key), key, length(m), m
		}
	}' | rcli --pipe 2>&1) || { echo "bench: promote: loading failed: $out" >&2; return 1; }
	[[ $out =~ errors:\ 0,\ replies:\ $2 ]] || { echo "bench: promote: $out" >&2; return 1; }
}

# promote_cpu_ticks PID: utime + stime of a process, in clock ticks.
promote_cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

bench_row_promote() {
	local m=200000 key=bench.promote.scheduled http n t0 t1 c0 c1 rate ceil
	local ratio cpu hz
	((QUICK == 1)) && m=20000
	log "Redis delayed messages: loading $m due members"
	rcli DEL bench.promote "$key" >/dev/null
	promote_load "$key" "$m" || return 1
	http=$(free_port)
	write_cfg "$DIR/promote.yaml" "$REDIS_URL" thread 1 "$http" \
		"  sleep: { plugin: sleep.so, queue: bench.promote, prefetch: 1, timeout: 0 }"
	c0=$(promote_cpu_ticks "$REDIS_PID")
	start_daemon "$DIR/promote.yaml" "$DIR/promote.log" "$http" || return 1
	t0=
	local deadline=$(($(now_ms) + 300000))
	while :; do
		n=$(rcli ZCARD "$key")
		[[ -z $t0 ]] && ((n < m)) && t0=$(now_ms)
		((n == 0)) && break
		if (($(now_ms) > deadline)); then
			echo "bench: promote: $n members left after 300 s" >&2
			stop_daemon
			return 1
		fi
		sleep 0.01
	done
	t1=$(now_ms)
	c1=$(promote_cpu_ticks "$REDIS_PID")
	stop_daemon
	[[ $(rcli XLEN bench.promote) == "$m" ]] ||
		{ echo "bench: promote: the stream has $(rcli XLEN bench.promote) entries, not $m" >&2; return 1; }
	((t1 > t0)) || t1=$((t0 + 1))
	rate=$(calc "$m * 1000 / ($t1 - $t0)")
	hz=$(getconf CLK_TCK)
	cpu=$(calc "($c1 - $c0) / $hz / $m * 1000000")
	ceil=$(jget "$R/redis.ceiling.json" rate 2>/dev/null || true)
	if [[ -n $ceil && $ceil != 0 ]]; then
		ratio=$(printf '%.2f' "$(calc "$rate / $ceil")")
		ceil="$(fmt_int "$ceil")/s"
	else
		ratio=-
		ceil=-
	fi
	log "promote: $(fmt_int "$rate") members/s"
	row "Redis delayed: promotion" "$(fmt_int "$rate")/s" "$ceil" \
		"$ratio" - reported - \
		"$(printf '%.2f' "$cpu")" - \
		"$m due members moved from the scheduled set to the stream by one daemon; reference: the Redis ceiling loop"
	rcli DEL bench.promote "$key" >/dev/null
}
BENCH_ROWS+=(bench_row_promote)
