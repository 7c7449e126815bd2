# shellcheck shell=bash
# Extra helpers for the fork-pool integration tests (test_fork_*.sh). Each
# such test sources it after lib.sh (which run.sh has already sourced):
#
#   . "$TM_SRCDIR/tests/integration/lib_fork.sh"
#
# Processes are identified by "PID:STARTTIME" tags (STARTTIME: field 22 of
# /proc/PID/stat, in clock ticks since boot), so a recycled pid is never
# mistaken for the process that was recorded.

: "${TEST_DIR:?lib_fork.sh is sourced after lib.sh}"
declare -F start_daemon >/dev/null || {
	echo "lib_fork.sh: source lib.sh first" >&2
	exit 1
}

# ------------------------------------------------------------------ config

# set_pool_option FILE KEY VALUE: add "KEY: VALUE" to the one-line `pool:`
# mapping that write_config writes (e.g. max_tasks_per_child).
set_pool_option() {
	local file=$1 key=$2 value=$3
	grep -q '^pool: { .* }$' "$file" ||
		fail "set_pool_option: no one-line 'pool: { ... }' in $file"
	sed -i "s/^pool: { \\(.*\\) }\$/pool: { \\1, $key: $value }/" "$file"
	grep -q "^pool: { .*, $key: $value }\$" "$file" ||
		fail "set_pool_option: could not set pool.$key in $file"
}

# fork_sleep_daemon CONF POOL [PREFETCH]: write CONF for a fork pool of POOL
# workers and one task, sleep (sleep.so on q.sleep, with PREFETCH when
# given), start the daemon on it and wait until it answers /ping and has its
# POOL worker processes.
fork_sleep_daemon() {
	local conf=$1 pool=$2 prefetch=${3:-} extra=
	[[ -z $prefetch ]] || extra=", prefetch: $prefetch"
	write_config "$conf" pool_kind=fork pool_size="$pool" <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep$extra }
YAML
	start_daemon "$conf"
	wait_ping
	wait_children "$pool"
}

# ---------------------------------------------------------------- processes

# proc_field PID N: field N (1-based, as in proc(5)) of /proc/PID/stat;
# empty (status 1) when there is no such process. Fields are counted after
# the parenthesised command name, which may contain spaces.
proc_field() {
	local stat rest
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $stat ]] || return 1
	rest=${stat##*) }
	# rest starts at field 3 (state)
	local -a f
	read -r -a f <<<"$rest"
	printf '%s\n' "${f[$(($2 - 3))]}"
}

# pid_tag PID: print "PID:STARTTIME" (status 1 when the process is gone).
pid_tag() {
	local st
	st=$(proc_field "$1" 22) || return 1
	printf '%s:%s\n' "$1" "$st"
}

# tag_alive TAG: the tagged process still exists and is not a zombie (a
# zombie has finished running; only its exit status is left to collect).
tag_alive() {
	local pid=${1%%:*} start=${1#*:} st state
	st=$(proc_field "$pid" 22) || return 1
	[[ $st == "$start" ]] || return 1
	state=$(proc_field "$pid" 3) || return 1
	[[ $state != Z ]]
}

# describe_tag TAG: one line about the process (for failure messages).
describe_tag() {
	local pid=${1%%:*}
	printf '%s (state %s, ppid %s, cmd %s)' "$1" \
		"$(proc_field "$pid" 3 || echo gone)" \
		"$(proc_field "$pid" 4 || echo -)" \
		"$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | head -c 120 || true)"
}

# seed_of PID: print the pid of the daemon's zygote seed (its child named
# tm-zygote-seed, which forks every zygote); status 1 if none.
seed_of() {
	local pid
	for pid in $(pgrep -P "$1" 2>/dev/null || true); do
		if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tm-zygote-seed ]]; then
			echo "$pid"
			return 0
		fi
	done
	return 1
}

# zygote_of PID: print the pid of the daemon's worker zygote (the child
# named tm-zygote of its seed, which forks the fork pool's workers), not
# counting one that has exited and is not reaped yet; status 1 if none.
zygote_of() {
	local pid seed
	seed=$(seed_of "$1") || return 1
	for pid in $(pgrep -P "$seed" 2>/dev/null || true); do
		if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == tm-zygote &&
			$(proc_field "$pid" 3) != Z ]]; then
			echo "$pid"
			return 0
		fi
	done
	return 1
}

# daemon_children [PID]: tags of every worker process of the daemon: the
# children of its zygote (zombies included: a child not reaped yet is
# still a child), one per line, sorted. Prints nothing when there is none
# (no zygote, as while one is being restarted, or no worker).
daemon_children() {
	local ppid=${1:-$DAEMON_PID} pid zygote
	[[ -n $ppid ]] || fail "daemon_children: no daemon pid"
	zygote=$(zygote_of "$ppid") || return 0
	for pid in $(pgrep -P "$zygote" 2>/dev/null || true); do
		pid_tag "$pid" || true
	done | sort
}

# live_children [PID]: like daemon_children, without zombies.
live_children() {
	local tag
	for tag in $(daemon_children "${1:-$DAEMON_PID}"); do
		if tag_alive "$tag"; then
			echo "$tag"
		fi
	done
}

# child_count [PID]: how many children (zombies included) the daemon has.
child_count() {
	daemon_children "${1:-$DAEMON_PID}" | grep -c . || true
}

# wait_children N [TIMEOUT]: wait until the daemon has exactly N children,
# none of them a zombie (default 10 s).
wait_children() {
	local want=$1 timeout=${2:-10} all live
	local deadline=$(($(now_ms) + timeout * 1000))
	note "waiting up to ${timeout}s for the daemon to have $want children"
	while :; do
		all=$(daemon_children | grep -c . || true)
		live=$(live_children "$DAEMON_PID" | grep -c . || true)
		if [[ $all == "$want" && $live == "$want" ]]; then
			return 0
		fi
		if ! daemon_alive; then
			fail "daemon exited while waiting for $want children"
		fi
		if (($(now_ms) >= deadline)); then
			fail "daemon pid $DAEMON_PID: expected $want live children within" \
				"${timeout}s, has $all ($live alive): $(daemon_children | paste -sd ' ')"
		fi
		sleep 0.05
	done
}

# wait_tags_gone TIMEOUT_MS TAG...: poll every 10 ms until none of the tagged
# processes is alive; set TAGS_GONE_MS to how long that took. Fails listing
# the survivors when some are still alive after TIMEOUT_MS.
TAGS_GONE_MS=0
wait_tags_gone() {
	local timeout=$1 t0 tag alive
	shift
	t0=$(now_ms)
	while :; do
		alive=()
		for tag in "$@"; do
			if tag_alive "$tag"; then
				alive+=("$tag")
			fi
		done
		TAGS_GONE_MS=$(($(now_ms) - t0))
		((${#alive[@]} == 0)) && return 0
		if ((TAGS_GONE_MS >= timeout)); then
			local d=
			for tag in "${alive[@]}"; do
				d+=" $(describe_tag "$tag");"
			done
			# they are this test's leftovers: end them (by pid, checked
			# against the recorded start time) so they outlive no test
			for tag in "${alive[@]}"; do
				if tag_alive "$tag"; then
					kill -KILL "${tag%%:*}" 2>/dev/null || true
				fi
			done
			fail "${#alive[@]} of $# processes still alive ${TAGS_GONE_MS} ms later:$d"
		fi
		sleep 0.01
	done
}

# ----------------------------------------------------------------- metrics

# wait_metric_ge NAME LABELS MIN [TIMEOUT]: wait until the metric is at least
# MIN (default 30 s); prints nothing, fails with the last value seen.
wait_metric_ge() {
	local name=$1 labels=$2 min=$3 timeout=${4:-30} v=
	local deadline=$(($(now_ms) + timeout * 1000))
	note "waiting up to ${timeout}s for $name{$labels} >= $min"
	while :; do
		v=$(metric "$name" "$labels") || v="(no /metrics)"
		if [[ $v =~ ^[0-9]+$ ]] && ((v >= min)); then
			return 0
		fi
		if [[ -n $DAEMON_PID ]] && ! daemon_alive; then
			fail "daemon exited while waiting for $name{$labels} >= $min (last: $v)"
		fi
		if (($(now_ms) >= deadline)); then
			fail "$name{$labels}: expected >= $min within ${timeout}s, last value $v"
		fi
		sleep 0.1
	done
}

# wait_busy N [TIMEOUT_MS]: wait until taskmill_pool_busy is N (default
# 5000 ms); status 1 (no failure) when it was not within the time.
wait_busy() {
	local want=$1 timeout=${2:-5000} t0
	t0=$(now_ms)
	while (($(now_ms) - t0 < timeout)); do
		if [[ $(metric taskmill_pool_busy || true) == "$want" ]]; then
			return 0
		fi
		sleep 0.02
	done
	return 1
}

# -------------------------------------------------------------- /ping watch

# ping_watch_start [PORT]: sample GET /ping every 0.1 s in the background
# into TEST_DIR/ping.samples ("EPOCH_MS CODE" lines) until ping_watch_stop.
PING_WATCH_PID=
ping_watch_start() {
	local port=${1:-$HTTP_PORT}
	: >"$TEST_DIR/ping.samples"
	(
		trap - EXIT ERR
		set +eE
		while :; do
			printf '%s %s\n' "$(now_ms)" "$(http_code /ping "$port")" \
				>>"$TEST_DIR/ping.samples"
			sleep 0.1
		done
	) &
	PING_WATCH_PID=$!
	note "watching /ping on port $port (pid $PING_WATCH_PID)"
}

# ping_watch_stop: stop the sampler and fail unless every sample was 200
# (and there were some).
ping_watch_stop() {
	[[ -n $PING_WATCH_PID ]] || fail "ping_watch_stop: no watch running"
	kill "$PING_WATCH_PID" 2>/dev/null || true
	wait "$PING_WATCH_PID" 2>/dev/null || true
	PING_WATCH_PID=
	local n bad
	n=$(grep -c . "$TEST_DIR/ping.samples" || true)
	bad=$(awk '$2 != 200' "$TEST_DIR/ping.samples" | head -n 5 | paste -sd ';')
	note "/ping sampled $n times"
	assert_ge 3 "$n" "number of /ping samples"
	assert_eq "" "$bad" "/ping samples that were not 200 (epoch_ms code)"
}

# ------------------------------------------------------------------- redis

# dlq_origin_map STREAM: print "ORIGIN_ID DLQ_ID" per dead-letter entry.
dlq_origin_map() {
	local id
	for id in $(xids "$1"); do
		printf '%s %s\n' "$(xfield "$1" "$id" origin_id)" "$id"
	done
}

# stream_lines STREAM: "<id> <body>" for every entry, oldest first (the
# journal plugin's line format).
stream_lines() {
	rcall EVAL "local out = {}
		for i, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			local body = ''
			local f = e[2]
			for k = 1, #f, 2 do
				if f[k] == 'body' then body = f[k + 1] end
			end
			out[i] = e[1] .. ' ' .. body
		end
		return out" 1 "$1"
}

# ---------------------------------------------------------------- clean-up

# Stop the /ping sampler too when the test ends.
tm_on_exit '[[ -z $PING_WATCH_PID ]] || kill "$PING_WATCH_PID" 2>/dev/null'
