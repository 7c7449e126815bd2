# shellcheck shell=bash
# The table of scripts/bench.sh (sourced by it): row helpers, the
# built-in rows (issue 19's targets), printing and the JSON output.

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

# target_json NAME VALUE LIMIT RESULT [MEDIAN]: VALUE is the figure the
# verdict is on (for throughput ratios the best run's), MEDIAN the median
# run's figure where there are several runs.
target_json() {
	TARGETS_JSON+=("{\"name\":\"$1\",\"value\":$2${5:+,\"median\":$5},\"target\":\"$3\",\"result\":\"$4\"}")
}

# at_least VALUE MIN: 1 when VALUE >= MIN, else 0
at_least() {
	awk -v r="$1" -v m="$2" 'BEGIN { print (r >= m) ? 1 : 0 }'
}

# med_of FILE: the median run's rate of a picked run (its own rate when
# the file lists no runs)
med_of() {
	local m
	m=$(jget "$1" median_rate)
	[[ -n $m ]] || m=$(jget "$1" rate)
	echo "$m"
}

# rate_cell FILE: "BEST/s (med MEDIAN)" of a picked run
rate_cell() {
	echo "$(fmt_int "$(jget "$1" rate)")/s (med $(fmt_int "$(med_of "$1")"))"
}

# ratio_cell FILE REF_FILE: "BEST (med MEDIAN)": the best run's rate over
# the best reference run's, the median's over the median's
ratio_cell() {
	printf '%.2f (med %.2f)' "$(calc "$(jget "$1" rate) / $(jget "$2" rate)")" \
		"$(calc "$(med_of "$1") / $(med_of "$2")")"
}

runs_of() {
	sed -n 's/.*"runs":\[\([^]]*\)\].*/\1/p' "$1" | tr , ' '
}

# run_cols FILE: the cpu, broker, RSS and notes columns of a throughput run.
run_cols() {
	local f=$1 s other kids rss notes lowat
	s=$(jget "$f" seconds)
	other=$(calc "$(jget "$f" other_cpu_s) / ($s > 0 ? $s : 1)")
	kids=$(jget "$f" children)
	rss=$(mib "$(jget "$f" rss_peak_kib)")
	((kids > 0)) && rss="$rss+$(mib "$(jget "$f" children_rss_peak_kib)")"
	notes="$(printf '%.0f ctx switches/k msgs' "$(jget "$f" ctxt_switches_per_k)")"
	# RabbitMQ daemons: batches read with the low-water mark on (-1: not read)
	lowat=$(jget "$f" lowat_batches)
	[[ -n $lowat && $lowat != -1 ]] && notes+="; $lowat low-water batches"
	notes+=$(awk -v o="$other" 'BEGIN { if (o > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o }')
	notes+="; runs $(runs_of "$f")"
	printf '%.2f\t%.2f\t%s\t%s' "$(jget "$f" cpu_s_per_m)" \
		"$(jget "$f" broker_cpu_s_per_m)" "$rss" "$notes"
}

# tp_target BROKER KIND SIZE: the minimum ratio to the ceiling loop that
# issue 19 sets for that pool, or nothing (the row is reported)
tp_target() {
	case $1.$2$3 in
	redis.thread4 | redis.thread2) echo 0.85 ;;
	redis.fork4) echo 0.6 ;;
	amqp.fork4) echo 0.9 ;;
	amqp.thread4) echo 1.0 ;;
	esac
}

# throughput_rows BROKER LABEL: the ceiling loop, then each pool as a
# ratio to it; the verdict is on the best runs' ratio, the median runs'
# ratio is shown next to it.
throughput_rows() {
	local b=$1 label=$2 cf c kind size min name f ratio med v
	cf=$R/$b.ceiling.json
	row "$label ceiling loop" "$(rate_cell "$cf")" - - - - "$(run_cols "$cf")"
	local configs=()
	if [[ $b == redis ]]; then
		read -r -a configs <<<"$POOLS"
	else
		read -r -a configs <<<"$AMQP_POOLS"
	fi
	for c in "${configs[@]}"; do
		read -r kind size < <(pool_words "$c")
		name="$b.$kind$size"
		f=$R/$name.json
		[[ -f $f ]] || continue
		ratio=$(calc "$(jget "$f" rate) / $(jget "$cf" rate)")
		med=$(calc "$(med_of "$f") / $(med_of "$cf")")
		min=$(tp_target "$b" "$kind" "$size")
		if [[ -n $min ]]; then
			v=$(verdict "$(at_least "$ratio" "$min")")
			target_json "$name.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v" "$(printf %.3f "$med")"
			min=">= $min"
		else
			min=-
			v=reported
		fi
		row "$label taskmill $kind x$size" "$(rate_cell "$f")" "$(fmt_int "$(jget "$cf" rate)")/s" \
			"$(ratio_cell "$f" "$cf")" "$min" "$v" "$(run_cols "$f")"
	done
}

# language hosts: each host's noop next to the C noop of the same pool
host_rows() {
	local c kind size ref h f ratio med min v growth
	for c in $HOST_POOLS; do
		read -r kind size < <(pool_words "$c")
		ref=$R/host.noop.$kind$size.json
		[[ -f $ref ]] || continue
		row "host C noop $kind x$size" "$(rate_cell "$ref")" - - - - "$(run_cols "$ref")"
		for h in "${BENCH_HOSTS_RUN[@]}"; do
			f=$R/host.$h.$kind$size.json
			[[ -f $f ]] || continue
			ratio=$(calc "$(jget "$f" rate) / $(jget "$ref" rate)")
			med=$(calc "$(med_of "$f") / $(med_of "$ref")")
			case $h.$kind in
			lua.*) min=0.5 ;;
			python.fork) min=0.2 ;;
			*) min= ;;
			esac
			growth=$(($(jget "$f" rss_half2_kib) - $(jget "$f" rss_half1_kib)))
			if [[ -n $min ]]; then
				v=$(verdict "$(at_least "$ratio" "$min")")
				target_json "host.$h.$kind$size.ratio" "$(printf %.3f "$ratio")" ">= $min" "$v" \
					"$(printf %.3f "$med")"
				min=">= $min"
			else
				min=-
				v=reported
			fi
			row "host $h noop $kind x$size" "$(rate_cell "$f")" \
				"$(fmt_int "$(jget "$ref" rate)")/s" "$(ratio_cell "$f" "$ref")" "$min" "$v" \
				"$(run_cols "$f"); RSS 2nd half $growth KiB"
		done
	done
}

# latency_row BROKER LABEL WHAT KIND:SIZE: publish->ack (run) p99 at
# LAT_RATE msgs/s over the broker's round-trip p99 in the same window
# (issue 19: <= 2x, on both brokers, thread and fork pool).
latency_row() {
	local b=$1 label=$2 what=$3 pool=${4/:/} lf rf=$R/$1.rtt.json
	local p50 p99 max rtt99 rtt50 idle99 ratio v kind size
	lf=$R/$b.lat.$pool.json
	[[ -f $lf ]] || return 0
	read -r kind size < <(pool_words "$4")
	p50=$(jget "$lf" lat_p50_us)
	p99=$(jget "$lf" lat_p99_us)
	max=$(jget "$lf" lat_max_us)
	rtt50=$(jget "$lf" rtt_p50_us)
	rtt99=$(jget "$lf" rtt_p99_us)
	idle99=$(jget "$rf" rtt_p99_us)
	ratio=$(calc "$p99 / $rtt99")
	v=$(verdict "$(awk -v r="$ratio" 'BEGIN { print (r <= 2) ? 1 : 0 }')")
	row "$label $kind x$size $what p50/p99/max" "$(printf '%.0f/%.0f/%.0f us' "$p50" "$p99" "$max")" \
		"rtt p99 $(printf %.0f "$rtt99") us" "$(printf %.1f "$ratio")x" "<= 2x" "$v" - - - \
		"$(jget "$lf" observed)/$(jget "$lf" published) msgs at $LAT_RATE/s; broker rtt in the same window p50 $(printf %.0f "$rtt50") us; back-to-back idle rtt p99 $(printf %.0f "$idle99") us (p99 = $(printf %.1f "$(calc "$p99 / $idle99")")x)$(awk -v o="$(jget "$lf" other_cpu_s)" -v w="$(jget "$lf" window_s)" 'BEGIN { if (w > 0 && o / w > 0.25) printf "; BUSY HOST: %.1f cores used elsewhere", o / w }')"
	target_json "$b.$pool.latency_p99_over_rtt_p99" "$(printf %.2f "$ratio")" "<= 2" "$v"
}

# redis_rss_rows: peak RSS of the thread x4 throughput run, and its growth
# between the halves
redis_rss_rows() {
	local f=$R/redis.thread4.json peak h1 h2 growth v
	[[ -f $f ]] || return 0
	peak=$(jget "$f" rss_peak_kib)
	v=$(verdict "$(awk -v k="$peak" 'BEGIN { print (k <= 32 * 1024) ? 1 : 0 }')")
	row "Redis thread x4 peak RSS in the run" "$(mib "$peak") MiB" - - "<= 32 MiB" "$v" - - - \
		"VmHWM at the last ack of $(fmt_int "$N")"
	target_json redis.thread4.rss_peak_mib "$(mib "$peak")" "<= 32" "$v"
	h1=$(jget "$f" rss_half1_kib)
	h2=$(jget "$f" rss_half2_kib)
	growth=$((h2 - h1))
	v=$(verdict $((growth <= 256 ? 1 : 0)))
	row "Redis thread x4 RSS growth, 2nd half" "$growth KiB" "$(mib "$h1") -> $(mib "$h2") MiB" - \
		"<= 256 KiB" "$v" - - - "highest VmRSS of each half (sampled every 10 ms)"
	target_json redis.thread4.rss_growth_kib "$growth" "<= 256" "$v"
}

flat_row() {
	local fs=$R/redis.flat$FLAT_SMALL.json fb=$R/redis.flat$FLAT_BIG.json rs rb ratio v
	rs=$(jget "$fs" rate)
	rb=$(jget "$fb" rate)
	ratio=$(calc "$rb / $rs")
	v=$(verdict "$(awk -v r="$ratio" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? 1 : 0 }')")
	row "Redis thread x4, stream of $(fmt_int "$FLAT_BIG")" "$(fmt_int "$rb")/s" \
		"$(fmt_int "$rs")/s (of $(fmt_int "$FLAT_SMALL"))" "$(printf %.2f "$ratio")" "0.90-1.10" "$v" \
		"$(printf %.2f "$(jget "$fb" cpu_s_per_m)")" "$(printf %.2f "$(jget "$fb" broker_cpu_s_per_m)")" \
		"$(mib "$(jget "$fb" rss_peak_kib)")" \
		"medians of $FLAT_REPEAT alternating runs: the same $(fmt_int "$FLAT_SMALL") new entries consumed; runs $(runs_of "$fb") vs $(runs_of "$fs")"
	target_json redis.flat_ratio "$(printf %.3f "$ratio")" "0.90-1.10" "$v"
}

idle_row() {
	local f=$R/idle.thread.json irss v
	irss=$(jget "$f" rss_kib)
	v=$(verdict "$(awk -v k="$irss" 'BEGIN { print (k <= 5 * 1024) ? 1 : 0 }')")
	row "idle RSS, thread x4, 5 example tasks" "$(mib "$irss") MiB" - - "<= 5 MiB" "$v" - - - \
		"VmRSS 2 s after ready: $(mib "$(jget "$f" anon_kib)") anon + $(mib "$(jget "$f" file_kib)") file (shared libs); fork x4: $(mib "$(jget "$R/idle.fork.json" rss_kib)") + $(mib "$(jget "$R/idle.fork.json" children_rss_kib)") in children"
	target_json idle_rss_mib "$(mib "$irss")" "<= 5" "$v"
}

# scale (issue 14; "before": the one-thread, one-connection-per-task
# intake, as measured for the issue with 200 noop tasks)
scale_rows() {
	local sf=$R/scale.idle.json sc st sq su v r1 rs ratio
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
	v=$(verdict "$(at_least "$ratio" 0.8)")
	row "scale: load over $SCALE_SPREAD tasks, thread x$SCALE_POOL" "$(fmt_int "$rs")/s" "$(fmt_int "$r1")/s (1 task)" \
		"$(printf %.2f "$ratio")" ">= 0.8" "$v" - - - "$(fmt_int "$SCALE_N") msgs, first ack to last ack; prefetch $PREFETCH on 1 task, $((PREFETCH / SCALE_SPREAD < 16 ? 16 : PREFETCH / SCALE_SPREAD)) each on $SCALE_SPREAD; runs $(runs_of "$R/scale.r$SCALE_SPREAD.json") vs $(runs_of "$R/scale.r1.json")"
	target_json scale.spread_ratio "$(printf %.3f "$ratio")" ">= 0.8" "$v"
}

amqp_rows() {
	if [[ $AMQP == skip ]]; then
		row "RabbitMQ" skipped - - - - - - - "$AMQP_NOTE"
		return 0
	fi
	throughput_rows amqp "RabbitMQ"
	if [[ $AMQP != full ]]; then
		row "RabbitMQ taskmill" skipped - - - - - - - "$AMQP_NOTE"
		return 0
	fi
	# the same consumers on a quorum queue, each against its own ceiling
	# loop there: reported, no target (issue 19's targets are set on the
	# classic queue)
	[[ -f $R/amqp.quorum.ceiling.json ]] && throughput_rows amqp.quorum "RabbitMQ quorum queue,"
	return 0
}

latency_rows() {
	local c
	for c in $LAT_POOLS; do
		latency_row redis "Redis" "publish->ack" "$c"
	done
	if [[ $AMQP == full ]]; then
		for c in $LAT_POOLS; do
			latency_row amqp "RabbitMQ" "publish->run" "$c"
		done
	else
		row "RabbitMQ latency" skipped - - - - - - - "$AMQP_NOTE"
	fi
}

# bench_report_rows: the built-in rows of the parts that ran (BENCH_PARTS),
# from the runs in $R.
bench_report_rows() {
	local p
	for p in $ALL_PARTS; do
		part "$p" || continue
		case $p in
		redis)
			throughput_rows redis "Redis"
			redis_rss_rows
			;;
		hosts) ((${#BENCH_HOSTS_RUN[@]} == 0)) || host_rows ;;
		flat) flat_row ;;
		latency) latency_rows ;;
		idle) idle_row ;;
		scale) scale_rows ;;
		amqp) amqp_rows ;;
		esac
	done
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
		echo "parts: $PARTS_LIST; Redis N=$(fmt_int "$N"), RabbitMQ N=$(fmt_int "$AMQP_N"), prefetch $PREFETCH/$AMQP_PREFETCH, noop task; $REPEAT interleaved runs per configuration"
		echo "msgs/s: first delivery to last ack, of the best run (med: of the median run; every run's rate in the notes); ratio: best run"
		echo "over the best ceiling run (med: median over median); the verdict is on the best ratio: load from elsewhere only slows a run down"
		echo "cpu s/M: CPU seconds per million messages of the consumer (daemon and fork children); broker s/M: of the broker;"
		echo "RSS: peak (+ fork children); BUSY HOST: CPU used by other processes; latency: p99 over the broker's round-trip p99"
		echo
		print_table "$HEADER" "${ROWS[@]}"
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
		printf '"params":{"n":%s,"amqp_n":%s,"repeat":%s,"prefetch":%s,"amqp_prefetch":%s,"ceiling_redis":"%s x %s in flight","flat":[%s],"latency_rate":%s,"latency_seconds":%s,"latency_pools":"%s","parts":"%s","quick":%s},' \
			"$N" "$AMQP_N" "$REPEAT" "$PREFETCH" "$AMQP_PREFETCH" "$CEIL_DEPTH" "$CEIL_COUNT" \
			"${FLAT// /,}" "$LAT_RATE" "$LAT_SECONDS" "$LAT_POOLS" "$PARTS_LIST" "$QUICK"
		printf '"amqp":"%s","amqp_note":"%s",' "$AMQP" "${AMQP_NOTE//\"/\'}"
		printf '"results":{%s},' "$(json_runs)"
		printf '"targets":[%s],' "$(IFS=,; echo "${TARGETS_JSON[*]}")"
		printf '"table":"%s"}\n' "$(sed 's/\\/\\\\/g; s/"/\\"/g' "$DIR/table.txt" | awk '{ printf "%s\\n", $0 }')"
	} >"$OUT"
}
