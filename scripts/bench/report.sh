# shellcheck shell=bash
# The table of scripts/bench.sh (sourced by it): row helpers, the
# built-in rows, printing and the JSON output.

# One row per figure, tab-separated columns (see HEADER).
HEADER="figure	value	reference	ratio	target	result	cpu s/M	broker s/M	RSS MiB	notes"
ROWS=()
TARGETS_JSON=()

# row FIGURE VALUE REFERENCE RATIO TARGET RESULT CPU BROKER RSS NOTES
row() {
	local IFS=$'\t'
	ROWS+=("$*")
}

# verdict OK: PASS or MISS
verdict() {
	if [[ $1 == 1 ]]; then echo PASS; else echo MISS; fi
}

# target_json NAME VALUE LIMIT RESULT
target_json() {
	TARGETS_JSON+=("{\"name\":\"$1\",\"value\":$2,\"target\":\"$3\",\"result\":\"$4\"}")
}

mib() {
	awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'
}

runs_of() {
	sed -n 's/.*"runs":\[\([^]]*\)\].*/\1/p' "$1" | tr , ' '
}

# run_cols FILE: the cpu, broker, RSS and notes columns of a throughput run.
run_cols() {
	local f=$1 s other kids rss notes
	s=$(jget "$f" seconds)
	other=$(calc "$(jget "$f" other_cpu_s) / ($s > 0 ? $s : 1)")
	kids=$(jget "$f" children)
	rss=$(mib "$(jget "$f" rss_peak_kib)")
	((kids > 0)) && rss="$rss+$(mib "$(jget "$f" children_rss_peak_kib)")"
	notes="$(printf '%.0f ctx switches/k msgs' "$(jget "$f" ctxt_switches_per_k)")"
	notes+=$(awk -v o="$other" 'BEGIN { if (o > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o }')
	notes+="; runs $(runs_of "$f")"
	printf '%.2f\t%.2f\t%s\t%s' "$(jget "$f" cpu_s_per_m)" \
		"$(jget "$f" broker_cpu_s_per_m)" "$rss" "$notes"
}

# throughput_rows BROKER LABEL
throughput_rows() {
	local b=$1 label=$2 ceil cf rate ratio c kind size min ok name v
	cf=$R/$b.ceiling.json
	ceil=$(jget "$cf" rate)
	row "$label ceiling loop" "$(fmt_int "$ceil")/s" - - - - "$(run_cols "$cf")"
	local configs=()
	if [[ $b == redis ]]; then
		read -r -a configs <<<"$POOLS"
	else
		read -r -a configs <<<"$AMQP_POOLS"
	fi
	for c in "${configs[@]}"; do
		read -r kind size < <(pool_words "$c")
		name="$b.$kind$size"
		[[ -f $R/$name.json ]] || continue
		rate=$(jget "$R/$name.json" rate)
		ratio=$(calc "$rate / $ceil")
		case $b.$kind in
		redis.thread) min=0.5 ;;
		redis.fork) min=0.25 ;;
		amqp.thread) min=0.8 ;;
		amqp.fork) min=0.5 ;;
		esac
		ok=$(awk -v r="$ratio" -v m="$min" 'BEGIN { print (r >= m) ? 1 : 0 }')
		v=$(verdict "$ok")
		row "$label taskmill $kind x$size" "$(fmt_int "$rate")/s" "$(fmt_int "$ceil")/s" \
			"$(printf %.2f "$ratio")" ">= $min" "$v" "$(run_cols "$R/$name.json")"
		target_json "$b.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v"
	done
}

# language hosts: each host's noop next to the C noop of the same pool
host_rows() {
	local c kind size ref h f rate ratio min ok v growth
	for c in $HOST_POOLS; do
		read -r kind size < <(pool_words "$c")
		ref=$R/host.noop.$kind$size.json
		[[ -f $ref ]] || continue
		row "host C noop $kind x$size" "$(fmt_int "$(jget "$ref" rate)")/s" - - - - "$(run_cols "$ref")"
		for h in "${BENCH_HOSTS_RUN[@]}"; do
			f=$R/host.$h.$kind$size.json
			[[ -f $f ]] || continue
			rate=$(jget "$f" rate)
			ratio=$(calc "$rate / $(jget "$ref" rate)")
			case $h.$kind in
			lua.*) min=0.5 ;;
			python.fork) min=0.2 ;;
			*) min= ;;
			esac
			growth=$(($(jget "$f" rss_half2_kib) - $(jget "$f" rss_half1_kib)))
			if [[ -n $min ]]; then
				ok=$(awk -v r="$ratio" -v m="$min" 'BEGIN { print (r >= m) ? 1 : 0 }')
				v=$(verdict "$ok")
				target_json "host.$h.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v"
			else
				min=-
				v=reported
			fi
			[[ $min == - ]] || min=">= $min"
			row "host $h noop $kind x$size" "$(fmt_int "$rate")/s" \
				"$(fmt_int "$(jget "$ref" rate)")/s" "$(printf %.2f "$ratio")" "$min" "$v" \
				"$(run_cols "$f"); RSS 2nd half $growth KiB"
		done
	done
}

# latency_row BROKER LABEL WHAT
latency_row() {
	local b=$1 label=$2 what=$3 lf=$R/$1.lat.json rf=$R/$1.rtt.json
	local p50 p99 max rtt99 rtt50 idle99 ratio ok v
	p50=$(jget "$lf" lat_p50_us)
	p99=$(jget "$lf" lat_p99_us)
	max=$(jget "$lf" lat_max_us)
	rtt50=$(jget "$lf" rtt_p50_us)
	rtt99=$(jget "$lf" rtt_p99_us)
	idle99=$(jget "$rf" rtt_p99_us)
	ratio=$(calc "$p99 / $rtt99")
	ok=$(awk -v r="$ratio" 'BEGIN { print (r <= 5) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "$label $what p50/p99/max" "$(printf '%.0f/%.0f/%.0f us' "$p50" "$p99" "$max")" \
		"rtt p99 $(printf %.0f "$rtt99") us" "$(printf %.1f "$ratio")x" "<= 5x" "$v" - - - \
		"$(jget "$lf" observed)/$(jget "$lf" published) msgs at $LAT_RATE/s; broker rtt in the same window p50 $(printf %.0f "$rtt50") us; back-to-back idle rtt p99 $(printf %.0f "$idle99") us (p99 = $(printf %.1f "$(calc "$p99 / $idle99")")x)$(awk -v o="$(jget "$lf" other_cpu_s)" -v w="$(jget "$lf" window_s)" 'BEGIN { if (w > 0 && o / w > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o / w }')"
	target_json "$b.latency_p99_over_rtt_p99" "$(printf %.2f "$ratio")" "<= 5" "$v"
}

# bench_report_rows: the built-in rows, from the runs in $R.
bench_report_rows() {
	throughput_rows redis "Redis"

	# RSS of the thread x4 run, and its growth between the halves
	f=$R/redis.thread4.json
	if [[ -f $f ]]; then
		peak=$(jget "$f" rss_peak_kib)
		ok=$(awk -v k="$peak" 'BEGIN { print (k <= 32 * 1024) ? 1 : 0 }')
		v=$(verdict "$ok")
		row "Redis thread x4 peak RSS in the run" "$(mib "$peak") MiB" - - "<= 32 MiB" "$v" - - - \
			"VmHWM at the last ack of $(fmt_int "$N")"
		target_json redis.thread4.rss_peak_mib "$(mib "$peak")" "<= 32" "$v"
		h1=$(jget "$f" rss_half1_kib)
		h2=$(jget "$f" rss_half2_kib)
		growth=$((h2 - h1))
		ok=$(((growth <= 256) ? 1 : 0))
		v=$(verdict "$ok")
		row "Redis thread x4 RSS growth, 2nd half" "$growth KiB" "$(mib "$h1") -> $(mib "$h2") MiB" - \
			"<= 256 KiB" "$v" - - - "highest VmRSS of each half (sampled every 10 ms)"
		target_json redis.thread4.rss_growth_kib "$growth" "<= 256" "$v"
	fi

	((${#BENCH_HOSTS_RUN[@]} == 0)) || host_rows

	# flatness
	fs=$R/redis.flat$FLAT_SMALL.json
	fb=$R/redis.flat$FLAT_BIG.json
	rs=$(jget "$fs" rate)
	rb=$(jget "$fb" rate)
	ratio=$(calc "$rb / $rs")
	ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "Redis thread x4, stream of $(fmt_int "$FLAT_BIG")" "$(fmt_int "$rb")/s" \
		"$(fmt_int "$rs")/s (of $(fmt_int "$FLAT_SMALL"))" "$(printf %.2f "$ratio")" "0.90-1.10" "$v" \
		"$(printf %.2f "$(jget "$fb" cpu_s_per_m)")" "$(printf %.2f "$(jget "$fb" broker_cpu_s_per_m)")" \
		"$(mib "$(jget "$fb" rss_peak_kib)")" \
		"the same $(fmt_int "$FLAT_SMALL") new entries consumed; runs $(runs_of "$fb") vs $(runs_of "$fs")"
	target_json redis.flat_ratio "$(printf %.3f "$ratio")" "0.90-1.10" "$v"

	latency_row redis "Redis thread x4" "publish->ack"

	# idle RSS
	irss=$(jget "$R/idle.thread.json" rss_kib)
	ok=$(awk -v k="$irss" 'BEGIN { print (k <= 5 * 1024) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "idle RSS, thread x4, 5 example tasks" "$(mib "$irss") MiB" - - "<= 5 MiB" "$v" - - - \
		"VmRSS 2 s after ready: $(mib "$(jget "$R/idle.thread.json" anon_kib)") anon + $(mib "$(jget "$R/idle.thread.json" file_kib)") file (shared libs); fork x4: $(mib "$(jget "$R/idle.fork.json" rss_kib)") + $(mib "$(jget "$R/idle.fork.json" children_rss_kib)") in children"
	target_json idle_rss_mib "$(mib "$irss")" "<= 5" "$v"

	# scale (issue 14; "before": the one-thread, one-connection-per-task
	# intake, as measured for the issue with 200 noop tasks)
	sf=$R/scale.idle.json
	sc=$(jget "$sf" connections)
	st=$(($(jget "$sf" threads) - $(jget "$sf" pool)))
	sq=$(jget "$sf" idle_cmds_per_s)
	su=$(jget "$sf" idle_cpu_pct)
	v=$(verdict $((sc <= 4 ? 1 : 0)))
	row "scale: $SCALE_TASKS idle tasks, Redis connections" "$sc" "203 before (200 tasks)" - "<= 4" "$v" - - - \
		"CLIENT LIST, monitoring connection open"
	target_json scale.connections "$sc" "<= 4" "$v"
	v=$(verdict $((st <= 8 ? 1 : 0)))
	row "scale: $SCALE_TASKS idle tasks, threads beyond the pool" "$st" "209 threads before (200 tasks)" - "<= 8" "$v" - - - \
		"$(jget "$sf" threads) threads in /proc/PID/task, pool of $(jget "$sf" pool)"
	target_json scale.threads_beyond_pool "$st" "<= 8" "$v"
	v=$(verdict "$(awk -v q="$sq" 'BEGIN { print (q < 20) ? 1 : 0 }')")
	row "scale: $SCALE_TASKS idle tasks, Redis commands" "$(printf %.1f "$sq")/s" "840/s before (200 tasks)" - "< 20/s" "$v" - - - \
		"sent to Redis (MONITOR) over $SCALE_IDLE_S s, 8 s after ready"
	target_json scale.idle_cmds_per_s "$(printf %.2f "$sq")" "< 20" "$v"
	v=$(verdict "$(awk -v u="$su" 'BEGIN { print (u < 0.2) ? 1 : 0 }')")
	row "scale: $SCALE_TASKS idle tasks, daemon CPU" "$(printf %.2f "$su")%" "1.7% before (200 tasks)" - "< 0.2%" "$v" - - - \
		"utime + stime over $SCALE_IDLE_S s, of one core"
	target_json scale.idle_cpu_pct "$(printf %.3f "$su")" "< 0.2" "$v"
	r1=$(jget "$R/scale.r1.json" rate)
	rs=$(jget "$R/scale.r$SCALE_SPREAD.json" rate)
	ratio=$(calc "$rs / $r1")
	v=$(verdict "$(awk -v r="$ratio" 'BEGIN { print (r >= 0.8) ? 1 : 0 }')")
	row "scale: load over $SCALE_SPREAD tasks, thread x$SCALE_POOL" "$(fmt_int "$rs")/s" "$(fmt_int "$r1")/s (1 task)" \
		"$(printf %.2f "$ratio")" ">= 0.8" "$v" - - - "$(fmt_int "$SCALE_N") msgs, first ack to last ack; prefetch $PREFETCH on 1 task, $((PREFETCH / SCALE_SPREAD < 16 ? 16 : PREFETCH / SCALE_SPREAD)) each on $SCALE_SPREAD; runs $(runs_of "$R/scale.r$SCALE_SPREAD.json") vs $(runs_of "$R/scale.r1.json")"
	target_json scale.spread_ratio "$(printf %.3f "$ratio")" ">= 0.8" "$v"

	if [[ $AMQP != skip ]]; then
		throughput_rows amqp "RabbitMQ"
		if [[ $AMQP == full ]]; then
			# a quorum queue is slower by design (every message replicated
			# through Raft, here on one node): the ratio is reported, no target
			if [[ -f $R/amqp.quorum.thread4.json && -f $R/amqp.thread4.json ]]; then
				qrate=$(jget "$R/amqp.quorum.thread4.json" rate)
				crate=$(jget "$R/amqp.thread4.json" rate)
				row "RabbitMQ taskmill thread x4, quorum queue" "$(fmt_int "$qrate")/s" \
					"$(fmt_int "$crate")/s classic" "$(printf %.2f "$(calc "$qrate / $crate")")" \
					- - "$(run_cols "$R/amqp.quorum.thread4.json")"
			fi
			latency_row amqp "RabbitMQ thread x4" "publish->run"
		else
			row "RabbitMQ taskmill" skipped - - - - - - - "$AMQP_NOTE"
		fi
	else
		row "RabbitMQ" skipped - - - - - - - "$AMQP_NOTE"
	fi
}

# bench_report_print: the table on stdout and in $DIR/table.txt.
bench_report_print() {
	PASSES=0
	MISSES=0
	for row in "${ROWS[@]}"; do
		IFS=$'\t' read -r -a cols <<<"$row"
		case ${cols[5]} in
		PASS) PASSES=$((PASSES + 1)) ;;
		MISS) MISSES=$((MISSES + 1)) ;;
		esac
	done
	{
		echo
		echo "taskmill benchmark, $DATE: $TM_VERSION ($COMMIT)"
		echo "host: $CPU_MODEL, $NCPU CPUs, $MEM_GIB GiB, Linux $KERNEL; redis $REDIS_VERSION${RABBIT_VERSION:+, rabbitmq $RABBIT_VERSION}"
		echo "Redis N=$(fmt_int "$N"), RabbitMQ N=$(fmt_int "$AMQP_N"), prefetch $PREFETCH/$AMQP_PREFETCH, noop task; best of $REPEAT interleaved runs (all listed)"
		echo "msgs/s: first delivery to last ack; ratio: to the ceiling loop; cpu s/M: CPU seconds per million messages of the consumer"
		echo "(daemon and fork children); broker s/M: of the broker; RSS: peak (+ fork children); BUSY HOST: CPU used by other processes"
		echo
		printf '%s\n' "$HEADER" "${ROWS[@]}" |
			awk -F'\t' '
			{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; if (NF > nf) nf = NF }
			END {
				for (r = 1; r <= n; r++) {
					line = ""
					for (i = 1; i <= nf; i++) {
						s = c[r, i]
						if (i < nf) s = sprintf("%-" w[i] "s  ", s)
						line = line s
					}
					print line
					if (r == 1) { sep = ""; for (i = 1; i < nf; i++) { for (k = 0; k < w[i]; k++) sep = sep "-"; sep = sep "  " } print sep "-----" }
				}
			}'
		echo
		echo "$PASSES target(s) met, $MISSES missed. JSON: $OUT"
	} | tee "$DIR/table.txt"
}

# JSON
json_runs() {
	local first=1 f name
	for f in "$R"/*.json; do
		name=$(basename "$f" .json)
		[[ $name == *.run[0-9]* ]] && continue
		((first)) || printf ','
		first=0
		printf '"%s":%s' "$name" "$(cat "$f")"
	done
}

# bench_report_json: everything as JSON into $OUT.
bench_report_json() {
	mkdir -p "$(dirname "$OUT")"
	{
		printf '{"date":"%s","taskmill":"%s","commit":"%s",' "$DATE" "$TM_VERSION" "$COMMIT"
		printf '"host":{"cpu":"%s","cpus":%s,"mem_gib":%s,"kernel":"%s","redis":"%s","rabbitmq":"%s"},' \
			"$CPU_MODEL" "$NCPU" "$MEM_GIB" "$KERNEL" "$REDIS_VERSION" "$RABBIT_VERSION"
		printf '"params":{"n":%s,"amqp_n":%s,"repeat":%s,"prefetch":%s,"amqp_prefetch":%s,"ceiling_redis":"%s x %s in flight","flat":[%s],"latency_rate":%s,"latency_seconds":%s,"quick":%s},' \
			"$N" "$AMQP_N" "$REPEAT" "$PREFETCH" "$AMQP_PREFETCH" "$CEIL_DEPTH" "$CEIL_COUNT" \
			"${FLAT// /,}" "$LAT_RATE" "$LAT_SECONDS" "$QUICK"
		printf '"amqp":"%s","amqp_note":"%s",' "$AMQP" "${AMQP_NOTE//\"/\'}"
		printf '"results":{%s},' "$(json_runs)"
		printf '"targets":[%s],' "$(IFS=,; echo "${TARGETS_JSON[*]}")"
		printf '"table":"%s"}\n' "$(sed 's/\\/\\\\/g; s/"/\\"/g' "$DIR/table.txt" | awk '{ printf "%s\\n", $0 }')"
	} >"$OUT"
}
