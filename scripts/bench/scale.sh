# shellcheck shell=bash
# The scale part of scripts/bench.sh (sourced by it).

# Scale (issue 14): one daemon with SCALE_TASKS noop tasks, idle: its
# Redis connections, threads, the commands per second Redis gets from it
# and its CPU; then throughput with the load spread over SCALE_SPREAD
# tasks against the same load on one task.
SCALE_TASKS=${BENCH_SCALE_TASKS:-500}
SCALE_SPREAD=${BENCH_SCALE_SPREAD:-100}
SCALE_N=${BENCH_SCALE_N:-$((QUICK == 1 ? 100000 : 300000))}
SCALE_IDLE_S=${BENCH_SCALE_IDLE_S:-$((QUICK == 1 ? 5 : 20))}
SCALE_POOL=4

# scale_tasks N PREFIX [PREFETCH]: the tasks: yaml of N noop tasks on
# PREFIX.I
scale_tasks() {
	local i
	for ((i = 0; i < $1; i++)); do
		echo "  t$i: { plugin: noop.so, queue: $2.$i, group: $GROUP, prefetch: ${3:-$PREFETCH}, timeout: 0 }"
	done
}

# proc_ticks PID: utime + stime of a process, in clock ticks
proc_ticks() {
	awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# redis_cmds_for SECONDS: the commands clients send to Redis in that
# time, as MONITOR shows them (those that scripts run inside Redis are
# shown as "lua" and not counted)
redis_cmds_for() {
	timeout "$1" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" MONITOR 2>/dev/null |
		awk '/^[0-9.]+ \[[0-9]+ [0-9.:]+\]/ { n++ } END { print n + 0 }' || true
}

scale_idle() {
	local http conns threads c0 c1 t0 t1 hz
	http=$(free_port)
	write_cfg "$DIR/scale-idle.yaml" "$REDIS_URL" thread "$SCALE_POOL" "$http" \
		"$(scale_tasks "$SCALE_TASKS" scale.idle)"
	start_daemon "$DIR/scale-idle.yaml" "$DIR/scale-idle.log" "$http"
	curl -s -o /dev/null -m 5 "http://127.0.0.1:$http/status" || true
	# past the start: the first upkeep round looks at every task
	sleep 8
	conns=$(($(rcli CLIENT LIST | wc -l) - 1))
	threads=$(ls "/proc/$DAEMON_PID/task" | wc -l)
	hz=$(getconf CLK_TCK)
	t0=$(proc_ticks "$DAEMON_PID")
	c=$(redis_cmds_for "$SCALE_IDLE_S")
	t1=$(proc_ticks "$DAEMON_PID")
	echo "{\"tasks\":$SCALE_TASKS,\"pool\":$SCALE_POOL,\"connections\":$conns,\"threads\":$threads,\"idle_cmds_per_s\":$(calc "$c / $SCALE_IDLE_S"),\"idle_cpu_pct\":$(calc "($t1 - $t0) * 100 / $hz / $SCALE_IDLE_S"),\"seconds\":$SCALE_IDLE_S}" \
		>"$R/scale.idle.json"
	stop_daemon
	local i
	for ((i = 0; i < SCALE_TASKS; i++)); do
		echo "DEL scale.idle.$i scale.idle.$i.retry.$GROUP"
	done | rcli >/dev/null
}

# scale_left NTASKS: entries of the scale.rNTASKS.* streams not yet
# delivered to the group or not yet acknowledged
SCALE_LEFT_LUA="local n = 0
for _, k in ipairs(KEYS) do
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', k)) do
    local f = {}
    for j = 1, #g - 1, 2 do f[g[j]] = g[j + 1] end
    if f['name'] == ARGV[1] then
      n = n + (tonumber(f['lag']) or 1) + f['pending']
    end
  end
end
return n"
scale_left() {
	local i keys=()
	for ((i = 0; i < $1; i++)); do
		keys+=("scale.r$1.$i")
	done
	rcli EVAL "$SCALE_LEFT_LUA" "$1" "${keys[@]}" "$GROUP"
}

# scale_rate NTASKS REP: SCALE_N entries spread over NTASKS streams,
# consumed by one thread daemon with NTASKS tasks; timed from the first
# acknowledgement seen until the last (polled every 10 ms). One task gets the bench's prefetch; NTASKS tasks share it (at
# least 16 each), so that both hold about as many messages in flight.
scale_rate() {
	local nt=$1 rep=$2 http i per t0 t1 left
	per=$((SCALE_N / nt))
	for ((i = 0; i < nt; i++)); do
		"$BB/load_redis" 127.0.0.1 "$REDIS_PORT" "scale.r$nt.$i" "$per" >/dev/null 2>>"$DIR/load.log"
		rcli XGROUP CREATE "scale.r$nt.$i" "$GROUP" 0 >/dev/null
	done
	http=$(free_port)
	local pf=$((PREFETCH / nt < 16 ? 16 : PREFETCH / nt))
	write_cfg "$DIR/scale-r$nt.yaml" "$REDIS_URL" thread "$SCALE_POOL" "$http" \
		"$(scale_tasks "$nt" "scale.r$nt" "$pf")"
	"$TM" run -c "$DIR/scale-r$nt.yaml" 2>>"$DIR/scale-r$nt.log" &
	DAEMON_PID=$!
	local deadline=$(($(now_ms) + 600000)) t0=
	while :; do
		left=$(scale_left "$nt")
		[[ -z $t0 ]] && ((left < per * nt)) && t0=$(now_ms)
		((left == 0)) && break
		(($(now_ms) > deadline)) && { echo "bench: scale run of $nt tasks stuck, $left left" >&2; exit 1; }
		sleep 0.01
	done
	t1=$(now_ms)
	((t1 > t0)) || t1=$((t0 + 1))
	stop_daemon
	echo "{\"tasks\":$nt,\"n\":$((per * nt)),\"ms\":$((t1 - t0)),\"rate\":$(calc "$per * $nt * 1000 / ($t1 - $t0)")}" \
		>"$R/scale.r$nt.run$rep.json"
	for ((i = 0; i < nt; i++)); do
		echo "DEL scale.r$nt.$i"
	done | rcli >/dev/null
	log "scale: $nt task(s): $(fmt_int "$(jget "$R/scale.r$nt.run$rep.json" rate)") msgs/s"
}

# bench_scale: the idle run, then the spread throughput runs.
bench_scale() {
	log "scale: $SCALE_TASKS idle tasks for $SCALE_IDLE_S s"
	scale_idle
	log "scale: $(fmt_int "$SCALE_N") messages on 1 task, then on $SCALE_SPREAD"
	SCALE_REPEAT=$((REPEAT < 2 ? 2 : REPEAT))
	for ((rep = 1; rep <= SCALE_REPEAT; rep++)); do
		scale_rate 1 "$rep"
		scale_rate "$SCALE_SPREAD" "$rep"
	done
	best scale.r1
	best "scale.r$SCALE_SPREAD"
}
