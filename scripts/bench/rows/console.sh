# shellcheck shell=bash
# console.sh - bench rows: what an open console costs the daemon, on Redis.
#
# Sourced by scripts/bench.sh with the other extra rows (see the comment
# above its BENCH_ROWS loop); registers bench_row_console, which runs once
# the built-in rows are measured, against the bench's redis-server.
#
# A thread x4 daemon consumes CONSOLE_N entries with the noop task (and a
# schedule, so that /api/v1/schedules reads the broker), once with nobody
# polling and once with a console open: a loop making the page's requests
# every 2 s (/api/v1/tasks, /api/v1/schedules, and the dead letters the
# page lists, ?limit=100: an upper bound, the page reads those only when
# asked). In both runs /metrics is scraped every 0.5 s, its time kept.
# The runs alternate, REPEAT times each; the best of each side is
# compared. Targets: throughput with the console at least 0.97 of without;
# the median /metrics scrape time is reported beside the one without.
# Knob: BENCH_CONSOLE_N (messages per run; 2000000, quick 300000: runs
# of several seconds, so that the console polls a few times in each).

CONSOLE_N=${BENCH_CONSOLE_N:-$((QUICK == 1 ? 300000 : 2000000))}
CONSOLE_STREAM=bench.console
CONSOLE_POLL_S=2
CONSOLE_SCRAPE_S=0.5

# console_poll PORT OUT: the page's requests every CONSOLE_POLL_S, one
# "STATUS PATH SECONDS" line per request in OUT; until killed.
console_poll() {
	local base="http://127.0.0.1:$1" p
	while :; do
		for p in /api/v1/tasks /api/v1/schedules \
			'/api/v1/tasks/noop/dead-letters?limit=100'; do
			curl -s -o /dev/null -m 10 -w "%{http_code} $p %{time_total}\n" "$base$p" \
				>>"$2" 2>/dev/null || true
		done
		sleep "$CONSOLE_POLL_S"
	done
}

# console_scrape PORT OUT: GET /metrics every CONSOLE_SCRAPE_S, one line of
# seconds per answered scrape in OUT; until killed.
console_scrape() {
	local line
	while :; do
		line=$(curl -s -o /dev/null -m 10 -w '%{http_code} %{time_total}' \
			"http://127.0.0.1:$1/metrics" 2>/dev/null) || true
		[[ $line != 200\ * ]] || echo "${line#200 }" >>"$2"
		sleep "$CONSOLE_SCRAPE_S"
	done
}

# console_run NAME POLL: one measured run into $R/NAME.json, its scrape
# times appended to $DIR/NAME_PREFIX.scrape (NAME up to ".run"); POLL 1
# runs the console loop meanwhile.
console_run() {
	local name=$1 poll=$2 last http scraper poller='' rc=0
	rcli DEL "$CONSOLE_STREAM" >/dev/null
	last=$("$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "$CONSOLE_STREAM" "$CONSOLE_N" 2>>"$DIR/load.log")
	reset_group "$CONSOLE_STREAM"
	http=$(free_port)
	write_cfg "$DIR/$name.yaml" "$REDIS_URL" thread 4 "$http" \
		"  noop: { plugin: noop.so, queue: $CONSOLE_STREAM, group: $GROUP, prefetch: $PREFETCH, timeout: 0 }
schedules:
  yearly: { task: noop, cron: \"0 3 1 1 *\" }"
	console_scrape "$http" "$DIR/${name%.run*}.scrape" &
	scraper=$!
	if ((poll == 1)); then
		console_poll "$http" "$DIR/$name.poll" &
		poller=$!
	fi
	"$BB/measure" --n "$CONSOLE_N" --redis "127.0.0.1:$REDIS_PORT" \
		--stream "$CONSOLE_STREAM" --group "$GROUP" --last "$last" --from 0-0 \
		--broker-pid "$REDIS_PID" --timeout 300 --log "$DIR/$name.log" \
		-- "$TM" run -c "$DIR/$name.yaml" >"$R/$name.json" || rc=$?
	kill "$scraper" ${poller:+"$poller"} 2>/dev/null || true
	wait "$scraper" ${poller:+"$poller"} 2>/dev/null || true
	if ((rc != 0)); then
		echo "bench: run $name failed: $(cat "$R/$name.json")" >&2
		exit 1
	fi
	if ((poll == 1)) && ! grep -q '^200 /api/v1/schedules' "$DIR/$name.poll"; then
		echo "bench: run $name: the console loop got no answer: $(tail -n 3 "$DIR/$name.poll" 2>/dev/null)" >&2
		exit 1
	fi
	rcli DEL "$CONSOLE_STREAM" >/dev/null
	log "$name: $(fmt_int "$(jget "$R/$name.json" rate)") msgs/s in $(jget "$R/$name.json" seconds) s${poller:+, console polling ($(grep -c . "$DIR/$name.poll") requests)}"
}

# console_scrape_ms FILE: the median of the scrape times in FILE, in ms.
console_scrape_ms() {
	sort -g "$1" | awk '{ a[NR] = $1 } END { if (NR == 0) print 0;
		else printf "%.2f", a[int((NR + 1) / 2)] * 1000 }'
}

bench_row_console() {
	local rep none polled ratio ok v ms_none ms_polled n_none n_polled
	# a first run warms the server up (not counted)
	console_run console.warmup 0
	log "console: N=$CONSOLE_N, thread x4, without and with a console polling every ${CONSOLE_POLL_S} s"
	rm -f "$DIR"/console.none.scrape "$DIR"/console.polled.scrape
	for ((rep = 1; rep <= REPEAT; rep++)); do
		console_run "console.none.run$rep" 0
		console_run "console.polled.run$rep" 1
	done
	best console.none
	best console.polled
	none=$(jget "$R/console.none.json" rate)
	polled=$(jget "$R/console.polled.json" rate)
	ratio=$(calc "$polled / $none")
	ok=$(awk -v r="$ratio" 'BEGIN { print (r >= 0.97) ? 1 : 0 }')
	v=$(verdict "$ok")
	row "Redis thread x4, console polling every ${CONSOLE_POLL_S} s" "$(fmt_int "$polled")/s" \
		"$(fmt_int "$none")/s (no console)" "$(printf %.3f "$ratio")" ">= 0.97" "$v" \
		"$(run_cols "$R/console.polled.json")"
	target_json redis.console_ratio "$(printf %.3f "$ratio")" ">= 0.97" "$v"
	ms_none=$(console_scrape_ms "$DIR/console.none.scrape")
	ms_polled=$(console_scrape_ms "$DIR/console.polled.scrape")
	n_none=$(grep -c . "$DIR/console.none.scrape" || true)
	n_polled=$(grep -c . "$DIR/console.polled.scrape" || true)
	row "/metrics scrape during those runs, console polling" "${ms_polled} ms" \
		"${ms_none} ms (no console)" \
		"$(awk -v a="$ms_polled" -v b="$ms_none" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
		"-" reported - - - "median of $n_polled and $n_none scrapes, one every ${CONSOLE_SCRAPE_S} s"
}
BENCH_ROWS+=(bench_row_console)
