# shellcheck shell=bash
# Extra row (issue 19): "no RSS growth over 10 M messages". One thread x4
# daemon with the noop task drains BENCH_GROWTH_N messages in one run, and
# the highest VmRSS of its first half of the messages is compared with
# that of its last tenth: the same threshold as the "RSS growth, 2nd half"
# row of the 1M throughput run (<= 256 KiB). The first half holds the
# start-up and the warm-up: the C library's arenas, the reply arena's
# block cache and the connections' buffers reach their working size over
# the first few million messages (measured: about 3M on the 2-core VM),
# and the last tenth is 4/10 of the run after that half, so a leak of a
# tenth of a byte a message still shows.
#
# The messages are not all pre-loaded (10M entries would take Redis about
# a gigabyte): they go in by chunks of BENCH_GROWTH_CHUNK while the daemon
# runs. Each chunk is loaded (load_redis, in the background) once fewer
# than half a chunk is left undelivered or unacknowledged, after an XTRIM
# that keeps the last chunk of entries (more than what is left), so the
# stream never holds much more than two chunks. Consumed messages are
# counted from the group (entries-read minus pending, XINFO GROUPS; the
# group is created with ENTRIESREAD 0, and XTRIM leaves no tombstones, so
# Redis keeps the counter and the lag exact), and
# VmRSS is read from /proc every BENCH_GROWTH_SAMPLE_S seconds.
#
# Time: the daemon's rate (about 100,000/s and more on the 2-core VM) and
# the loading, which shares the CPUs: about 3 minutes for 10M on a quiet
# 2-core VM, more on a busy one (see docs/performance.md).
#
#   BENCH_GROWTH_N         messages (10000000; quick 300000)
#   BENCH_GROWTH_CHUNK     messages per load (500000; quick 50000)
#   BENCH_GROWTH_SAMPLE_S  seconds between RSS samples (0.1)
GROWTH_N=${BENCH_GROWTH_N:-$((QUICK == 1 ? 300000 : 10000000))}
GROWTH_CHUNK=${BENCH_GROWTH_CHUNK:-$((QUICK == 1 ? 50000 : 500000))}
GROWTH_SAMPLE_S=${BENCH_GROWTH_SAMPLE_S:-0.1}
GROWTH_STREAM=bench.growth

# { entries read by the group, pending, lag } of the growth stream
GROWTH_LUA="for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for j = 1, #g - 1, 2 do f[g[j]] = g[j + 1] end
  if f['name'] == ARGV[1] then
    return {tonumber(f['entries-read']) or -1, f['pending'], tonumber(f['lag']) or -1}
  end
end
return {-1, -1, -1}"

# growth_state: sets G_READ, G_PENDING, G_LAG (fails the bench when the
# group's counters are not known: then nothing here can be counted)
growth_state() {
	local out
	out=$(rcli EVAL "$GROWTH_LUA" 1 "$GROWTH_STREAM" "$GROUP" | tr '\n' ' ')
	read -r G_READ G_PENDING G_LAG <<<"$out"
	if [[ -z $G_LAG ]] || ((G_READ < 0 || G_PENDING < 0 || G_LAG < 0)); then
		echo "bench: growth: the group's counters are unknown ($out)" >&2
		exit 1
	fi
}

# growth_rss PID: VmRSS in KiB (no fork: read by the shell)
growth_rss() {
	local k v _
	while read -r k v _; do
		if [[ $k == VmRSS: ]]; then
			echo "$v"
			return 0
		fi
	done <"/proc/$1/status"
	echo 0
}

# growth_sample: one line "CONSUMED RSS_KIB" into the samples file
growth_sample() {
	growth_state
	echo "$((G_READ - G_PENDING)) $(growth_rss "$DAEMON_PID")" >>"$DIR/growth.samples"
}

bench_row_growth() {
	local http loaded=0 c loader='' t0='' t1 k0='' k1 hz deadline out first last growth v ticks nfirst nlast peak
	log "growth: $(fmt_int "$GROWTH_N") messages through one thread x4 daemon, loaded by $(fmt_int "$GROWTH_CHUNK")"
	rcli DEL "$GROWTH_STREAM" >/dev/null
	rcli XGROUP CREATE "$GROWTH_STREAM" "$GROUP" '$' MKSTREAM ENTRIESREAD 0 >/dev/null
	http=$(free_port)
	write_cfg "$DIR/growth.yaml" "$REDIS_URL" thread 4 "$http" \
		"  noop: { plugin: noop.so, queue: $GROWTH_STREAM, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }"
	start_daemon "$DIR/growth.yaml" "$DIR/growth.log" "$http"
	: >"$DIR/growth.samples"
	hz=$(getconf CLK_TCK)
	# an hour at the most (10M at under 3,000/s would be a failure anyway)
	deadline=$(($(now_ms) + 3600 * 1000))
	while :; do
		growth_sample
		if [[ -z $t0 ]] && ((G_READ > 0)); then
			t0=$(now_ms)
			k0=$(proc_ticks "$DAEMON_PID")
		fi
		# the loader of the last chunk has finished: its messages count
		if [[ -n $loader ]] && ! kill -0 "$loader" 2>/dev/null; then
			wait "$loader" || { echo "bench: growth: loading failed" >&2; exit 1; }
			loader=
		fi
		if [[ -z $loader ]]; then
			if ((loaded == GROWTH_N && G_LAG == 0 && G_PENDING == 0)); then
				break
			fi
			if ((loaded < GROWTH_N && G_LAG + G_PENDING < GROWTH_CHUNK / 2)); then
				# what is left is within the last chunk of entries
				rcli XTRIM "$GROWTH_STREAM" MAXLEN '~' "$GROWTH_CHUNK" >/dev/null
				c=$((GROWTH_N - loaded < GROWTH_CHUNK ? GROWTH_N - loaded : GROWTH_CHUNK))
				"$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$GROWTH_STREAM" "$c" \
					>/dev/null 2>>"$DIR/load.log" &
				loader=$!
				loaded=$((loaded + c))
			fi
		fi
		if (($(now_ms) > deadline)); then
			echo "bench: growth: not done after an hour ($((G_READ - G_PENDING)) consumed)" >&2
			exit 1
		fi
		sleep "$GROWTH_SAMPLE_S"
	done
	t1=$(now_ms)
	k1=$(proc_ticks "$DAEMON_PID")
	((t1 > t0)) || t1=$((t0 + 1))
	stop_daemon
	rcli DEL "$GROWTH_STREAM" >/dev/null
	# first half: samples up to N/2 consumed (at least the first sample
	# past the start); last tenth: from 9N/10 on (at least the last one,
	# taken once everything was acknowledged)
	out=$(awk -v n="$GROWTH_N" '
		$1 > 0 && (nf == 0 || $1 <= n / 2) { if ($2 > f) f = $2; nf++ }
		$1 >= n - n / 10 { if ($2 > l) l = $2; nl++ }
		{ if ($2 > p) p = $2 }
		END { printf "%d %d %d %d %d\n", f, l, nf, nl, p }' "$DIR/growth.samples")
	read -r first last nfirst nlast peak <<<"$out"
	growth=$((last - first))
	ticks=$((k1 - k0))
	echo "{\"n\":$GROWTH_N,\"chunk\":$GROWTH_CHUNK,\"ms\":$((t1 - t0)),\"rate\":$(calc "$GROWTH_N * 1000 / ($t1 - $t0)"),\"cpu_s_per_m\":$(calc "$ticks / $hz * 1000000 / $GROWTH_N"),\"rss_first_half_kib\":$first,\"rss_last_tenth_kib\":$last,\"samples_first\":$nfirst,\"samples_last\":$nlast,\"rss_peak_kib\":$peak,\"growth_kib\":$growth}" \
		>"$R/growth.json"
	log "growth: $(fmt_int "$(jget "$R/growth.json" rate)") msgs/s, RSS $(mib "$first") -> $(mib "$last") MiB"
	v=$(verdict $((growth <= 256 ? 1 : 0)))
	row "Redis thread x4 RSS growth over $(fmt_int "$GROWTH_N") msgs" "$growth KiB" \
		"$(mib "$first") -> $(mib "$last") MiB" - "<= 256 KiB" "$v" \
		"$(printf %.2f "$(jget "$R/growth.json" cpu_s_per_m)")" - "$(mib "$peak")" \
		"highest VmRSS of the first half and of the last tenth of the messages ($nfirst and $nlast samples, every $GROWTH_SAMPLE_S s); $(fmt_int "$(jget "$R/growth.json" rate)") msgs/s while loaded by $(fmt_int "$GROWTH_CHUNK")"
	target_json redis.thread4.rss_growth_10m_kib "$growth" "<= 256" "$v"
}
BENCH_ROWS+=(bench_row_growth)
