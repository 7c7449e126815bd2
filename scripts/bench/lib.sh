# shellcheck shell=bash
# The helpers of scripts/bench.sh (sourced by it): the daemon's config,
# start and stop, the cleanup at exit, picking the best or the median run;
# the rest comes from util.sh. Uses the driver's DIR, R, TM, BUILD, the
# broker pids.

# log, now_ms, wait_gone, stop_pid, free_port, jget, calc, fmt_int, mib,
# rcli, start_daemon, the private brokers, bench_cleanup, print_table
# shellcheck source=scripts/bench/util.sh
. "$BENCH_LIB/util.sh"

stop_daemon() {
	[[ -n $DAEMON_PID ]] || return 0
	stop_pid "$DAEMON_PID" 20
	DAEMON_PID=
}

cleanup() {
	local rc=$?
	stop_daemon
	bench_cleanup "$rc" "$DIR" "${BENCH_KEEP:-0}"
}

# ---------------------------------------------------------------- daemon

# write_cfg FILE URL POOL_KIND POOL_SIZE HTTP_PORT TASKS_YAML
write_cfg() {
	cat >"$1" <<YAML
broker: { url: "$2"${BROKER_EXTRA:-} }
pool: { kind: $3, size: $4 }
plugin_dir: $BUILD/plugins
http: { listen: "127.0.0.1:$5" }
shutdown_timeout: 10s
log: { level: warning, format: text }
tasks:
$6
YAML
}


# latency_runs NAME URL BROKER_PID TASKS_YAML PUB_RATE_ARGS...: for each
# of LAT_POOLS in turn, a daemon with TASKS_YAML on URL, and pub_rate
# PUB_RATE_ARGS... publishing to it at LAT_RATE for LAT_SECONDS; each
# result into $R/NAME.lat.KINDSIZE.json.
latency_runs() {
	local b=$1 url=$2 bpid=$3 tasks=$4 c kind size http f label=RabbitMQ
	shift 4
	[[ $b == redis ]] && label=Redis
	for c in $LAT_POOLS; do
		log "$label: latency at $LAT_RATE msgs/s for $LAT_SECONDS s, $c"
		read -r kind size < <(pool_words "$c")
		http=$(free_port)
		write_cfg "$DIR/lat-$b-$kind$size.yaml" "$url" "$kind" "$size" "$http" "$tasks"
		start_daemon "$DIR/lat-$b-$kind$size.yaml" "$DIR/lat-$b-$kind$size.log" "$http"
		f=$R/$b.lat.$kind$size.json
		BENCH_PIDS="$DAEMON_PID $bpid" "$BB/pub_rate" "$@" >"$f" ||
			{ echo "bench: latency run ($b, $c): $(cat "$f")" >&2; exit 1; }
		stop_daemon
	done
}

# pool_cfg KIND:SIZE -> "KIND SIZE"
pool_words() {
	echo "${1%%:*} ${1##*:}"
}

# pick NAME_PREFIX best|median: copy the run with the highest (or the
# median) rate to $R/NAME_PREFIX.json, with every run's rate ("runs") and
# the median rate ("median_rate": of an even count, the lower middle). Load
# from elsewhere on the host only ever slows a run down, so the best of a
# few is the least disturbed one; flatness compares medians of two sides.
pick() {
	local prefix=$1 which=$2 f sorted chosen med list
	sorted=$(for f in "$R/$prefix".run*.json; do echo "$(jget "$f" rate) $f"; done | sort -n)
	chosen=$(awk -v which="$which" '{ a[NR] = $2 }
		END { print which == "median" ? a[int((NR + 1) / 2)] : a[NR] }' <<<"$sorted")
	med=$(awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' <<<"$sorted")
	list=$(for f in "$R/$prefix".run*.json; do jget "$f" rate; done | paste -sd, -)
	sed "s/}\$/,\"runs\":[$list],\"median_rate\":$med}/" "$chosen" >"$R/$prefix.json"
}

best() { pick "$1" best; }
median() { pick "$1" median; }
