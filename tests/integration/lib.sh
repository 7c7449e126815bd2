# shellcheck shell=bash
# Helpers for taskmill's integration tests. Sourced by run.sh into each test's
# own bash process, before the test script itself.
#
# Set by run.sh (exported):
#   TM_BUILD    absolute build dir: $TM_BUILD/taskmill, $TM_BUILD/plugins/*.so
#   TM_SRCDIR   repository root
#   REDIS_PORT  the lane's redis-server on 127.0.0.1 (flushed before each test)
#   TEST_DIR    this test's scratch dir; every *.log in it is shown when the
#               test fails and scanned for sanitizer reports
#
# Conventions: tests run under `set -eEuo pipefail`; a failing command or a
# failed assertion ends the test. Wait for conditions with wait_until /
# wait_metric / wait_ping, never with a bare sleep.

: "${TEST_DIR:?lib.sh is sourced by run.sh, which sets TEST_DIR}"
: "${REDIS_PORT:?lib.sh is sourced by run.sh, which sets REDIS_PORT}"
TM_BIN=${TM_BUILD:?TM_BUILD must be set}/taskmill
TM_PLUGINS=$TM_BUILD/plugins
HTTP_PORT=${HTTP_PORT:-}
DAEMON_PID=
DAEMON_LOG=
TM_DAEMON_SEQ=0

# ---------------------------------------------------------------- reporting

# fail MESSAGE...: print the reason and end the test.
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# skip REASON: end the test as skipped (run.sh prints "ok - name # SKIP").
skip() {
	echo "SKIP: $*" >&2
	exit 77
}

# note MESSAGE...: a progress line in the test's log.
note() {
	echo "# $*" >&2
}

# assert_eq EXPECTED ACTUAL [WHAT]
assert_eq() {
	if [[ "$1" != "$2" ]]; then
		fail "${3:-value}: expected '$1', got '$2'"
	fi
}

# assert_ne UNEXPECTED ACTUAL [WHAT]
assert_ne() {
	if [[ "$1" == "$2" ]]; then
		fail "${3:-value}: expected anything but '$1'"
	fi
}

# assert_match REGEX ACTUAL [WHAT]  (bash extended regex)
assert_match() {
	if ! [[ "$2" =~ $1 ]]; then
		fail "${3:-value}: '$2' does not match /$1/"
	fi
}

# assert_ge MIN ACTUAL [WHAT] / assert_le MAX ACTUAL [WHAT]  (integers)
assert_ge() {
	[[ "$2" =~ ^-?[0-9]+$ ]] || fail "${3:-value}: '$2' is not an integer"
	(("$2" >= "$1")) || fail "${3:-value}: expected >= $1, got $2"
}
assert_le() {
	[[ "$2" =~ ^-?[0-9]+$ ]] || fail "${3:-value}: '$2' is not an integer"
	(("$2" <= "$1")) || fail "${3:-value}: expected <= $1, got $2"
}

# ------------------------------------------------------------------- timing

# now_ms: wall clock in epoch milliseconds.
now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# wait_until CMD TIMEOUT_SECONDS: evaluate CMD (a string) every 0.1 s until it
# succeeds; fail the test when it has not within the timeout.
wait_until() {
	local cmd=$1 timeout=${2:-10}
	local deadline=$(($(now_ms) + timeout * 1000))
	note "waiting up to ${timeout}s for: $cmd"
	while :; do
		if eval "$cmd" >/dev/null 2>&1; then
			return 0
		fi
		if (($(now_ms) >= deadline)); then
			fail "timed out after ${timeout}s waiting for: $cmd"
		fi
		sleep 0.1
	done
}

# ------------------------------------------------------------------- ports

# port_is_free PORT: nothing accepts connections on 127.0.0.1:PORT.
port_is_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port: print a random free loopback port in 20000-31999, below the
# kernel's ephemeral range (32768-60999) so no outgoing connection holds it;
# in this lane's slice of it (TM_PORT_LO, TM_PORT_SPAN, set by run.sh) so
# that tests running at the same time in other lanes do not pick it too;
# never one it printed before in this test (listed in TEST_DIR/.ports): a
# test that writes several configurations before it starts their daemons
# would otherwise give two of them the same port, which is free until the
# first daemon binds it.
free_port() {
	local p i lo=${TM_PORT_LO:-20000} span=${TM_PORT_SPAN:-12000}
	local given=${TEST_DIR:-/nonexistent}/.ports
	for ((i = 0; i < 100; i++)); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % span))
		if [[ -f $given ]] && grep -qx "$p" "$given"; then
			continue
		fi
		if port_is_free "$p"; then
			[[ -d ${TEST_DIR:-} ]] && echo "$p" >>"$given"
			echo "$p"
			return 0
		fi
	done
	fail "no free port found"
}

# ----------------------------------------------------- a private redis

# A redis-server of the test's own, for tests that stop and restart the
# broker. PRIV_REDIS_PORT (default: a free port) and PRIV_REDIS_PASS (a
# password, optional) may be set before the first start.
PRIV_REDIS_PID=
PRIV_REDIS_PORT=
PRIV_REDIS_PASS=
PRIV_REDIS_HOOKED=

# priv_rcli ARGS...: redis-cli against the private server.
priv_rcli() {
	local auth=()
	[[ -n $PRIV_REDIS_PASS ]] && auth=(--no-auth-warning -a "$PRIV_REDIS_PASS")
	redis-cli -h 127.0.0.1 -p "$PRIV_REDIS_PORT" "${auth[@]}" "$@"
}

# priv_redis_start [DIR] [PORT]: start it (again) with its data in DIR
# (default TEST_DIR/priv-redis) and an append-only file fsynced on every
# write, on PORT (default PRIV_REDIS_PORT); wait for PONG. It is stopped
# when the test exits.
priv_redis_start() {
	local dir=${1:-$TEST_DIR/priv-redis} i args=()
	[[ -n ${2:-} ]] && PRIV_REDIS_PORT=$2
	[[ -n $PRIV_REDIS_PORT ]] || PRIV_REDIS_PORT=$(free_port)
	[[ -n $PRIV_REDIS_PASS ]] && args+=(--requirepass "$PRIV_REDIS_PASS")
	mkdir -p "$dir"
	port_is_free "$PRIV_REDIS_PORT" ||
		fail "port $PRIV_REDIS_PORT for the private redis is taken"
	redis-server --bind 127.0.0.1 --port "$PRIV_REDIS_PORT" --dir "$dir" \
		--save '' --appendonly yes --appendfsync always --daemonize no \
		--enable-debug-command local \
		"${args[@]}" --logfile "$dir/redis.log" &
	PRIV_REDIS_PID=$!
	if [[ -z $PRIV_REDIS_HOOKED ]]; then
		PRIV_REDIS_HOOKED=1
		tm_on_exit 'priv_redis_kill'
	fi
	for ((i = 0; i < 100; i++)); do
		if [[ $(priv_rcli ping 2>/dev/null) == PONG ]]; then
			note "private redis-server pid $PRIV_REDIS_PID on port $PRIV_REDIS_PORT, dir $dir"
			return 0
		fi
		kill -0 "$PRIV_REDIS_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$dir/redis.log" >&2 || true
	fail "private redis-server on port $PRIV_REDIS_PORT did not start"
}

# priv_redis_stop: shut it down (it writes its append-only file) and reap
# it; fail when it does not stop within 10 s.
priv_redis_stop() {
	local i
	[[ -n $PRIV_REDIS_PID ]] || fail "priv_redis_stop: no private redis"
	priv_rcli shutdown >/dev/null 2>&1 || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$PRIV_REDIS_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$PRIV_REDIS_PID" 2>/dev/null; then
		priv_redis_kill
		fail "private redis-server did not shut down within 10 s"
	fi
	wait "$PRIV_REDIS_PID" 2>/dev/null || true
	note "private redis-server pid $PRIV_REDIS_PID stopped"
	PRIV_REDIS_PID=
}

# priv_redis_kill: end it, if it runs (test clean-up).
priv_redis_kill() {
	[[ -n $PRIV_REDIS_PID ]] || return 0
	kill -KILL "$PRIV_REDIS_PID" 2>/dev/null || true
	wait "$PRIV_REDIS_PID" 2>/dev/null || true
	PRIV_REDIS_PID=
}

# ------------------------------------------------------------------- redis

# rcli ARGS...: redis-cli against the run's redis. Note that redis-cli prints
# error replies on stdout and still exits 0.
rcli() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# rcall ARGS...: like rcli, but fail the test on an error reply.
rcall() {
	local out
	out=$(rcli "$@") || fail "redis-cli $* failed"
	if [[ "$out" =~ ^(ERR|WRONGTYPE|NOGROUP|NOSCRIPT|BUSYGROUP|[A-Z]+ERR)\  ]]; then
		fail "redis-cli $*: $out"
	fi
	printf '%s\n' "$out"
}

# xlen STREAM: number of entries (0 when the key does not exist).
xlen() {
	rcall XLEN "$1"
}

# xpending STREAM [GROUP]: number of pending (delivered, unacknowledged)
# entries of the group; -1 when the stream or group does not exist.
xpending() {
	rcall EVAL "local ok, r = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1])
		if not ok then return -1 end
		return r[1]" 1 "$1" "${2:-taskmill}"
}

# xids STREAM: every entry id of the stream, oldest first, one per line.
xids() {
	rcall EVAL "local out = {}
		for i, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			out[i] = e[1]
		end
		return out" 1 "$1"
}

# xfield STREAM ID FIELD: the field's value in entry ID (empty if absent).
xfield() {
	rcall EVAL "local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
		if #r == 0 then return false end
		local f = r[1][2]
		for i = 1, #f, 2 do
			if f[i] == ARGV[2] then return f[i + 1] end
		end
		return false" 1 "$1" "$2" "$3"
}

# xfields STREAM ID: the entry's field names, one per line.
xfields() {
	rcall EVAL "local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
		if #r == 0 then return {} end
		local out = {}
		local f = r[1][2]
		for i = 1, #f, 2 do out[#out + 1] = f[i] end
		return out" 1 "$1" "$2"
}

# stream_state STREAM [GROUP]: print "acked pending undelivered" for the
# group: entries delivered and acknowledged, delivered and pending, and not
# yet delivered (after the group's last-delivered-id). "-1 -1 -1" when the
# group does not exist.
stream_state() {
	rcall EVAL "
		local function parse(id)
			local ms, seq = string.match(id, '^(%d+)-(%d+)$')
			return tonumber(ms), tonumber(seq)
		end
		local function le(a, b)
			local am, as = parse(a)
			local bm, bs = parse(b)
			return am < bm or (am == bm and as <= bs)
		end
		local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
		if not ok then return {-1, -1, -1} end
		local last = nil
		for _, g in ipairs(groups) do
			local name, ld
			for i = 1, #g, 2 do
				if g[i] == 'name' then name = g[i + 1] end
				if g[i] == 'last-delivered-id' then ld = g[i + 1] end
			end
			if name == ARGV[1] then last = ld end
		end
		if last == nil then return {-1, -1, -1} end
		local pending = {}
		local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1000000)
		for _, e in ipairs(p) do pending[e[1]] = true end
		local acked, pend, undelivered = 0, 0, 0
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			if not le(e[1], last) then
				undelivered = undelivered + 1
			elseif pending[e[1]] then
				pend = pend + 1
			else
				acked = acked + 1
			end
		end
		return {acked, pend, undelivered}" 1 "$1" "${2:-taskmill}" | paste -sd ' '
}

# resp ARGS...: print one command in the Redis protocol, for `rcli --pipe`.
resp() {
	local LC_ALL=C a
	printf '*%d\r\n' $#
	for a in "$@"; do
		printf '$%d\r\n%s\r\n' "${#a}" "$a"
	done
}

# xadd_bulk STREAM COUNT BODY_FORMAT: XADD COUNT entries with field `body`,
# the body being printf BODY_FORMAT with the entry's number (1..COUNT), all
# through one pipelined redis-cli. Fails unless every command succeeded.
xadd_bulk() {
	local stream=$1 count=$2 fmt=$3 i body out
	out=$(
		for ((i = 1; i <= count; i++)); do
			# shellcheck disable=SC2059
			printf -v body "$fmt" "$i"
			resp XADD "$stream" '*' body "$body"
		done | rcli --pipe 2>&1
	) || fail "redis-cli --pipe failed: $out"
	if ! [[ "$out" =~ errors:\ 0,\ replies:\ $count ]]; then
		fail "xadd_bulk: $out"
	fi
}

# ------------------------------------------------------------------ config

# write_config FILE [key=value...] < TASKS_YAML: write a config for the run's
# redis with the given tasks section (read from stdin, e.g. a heredoc that
# starts with "tasks:"). Keys: pool_kind (thread), pool_size (4),
# shutdown_timeout (10s), instance (unset), log_level (debug), http_port
# (HTTP_PORT, or a free port which then becomes HTTP_PORT).
write_config() {
	local file=$1 kv
	shift
	local pool_kind=thread pool_size=4 shutdown_timeout=10s instance=
	local log_level=debug http_port=${HTTP_PORT:-}
	for kv in "$@"; do
		case $kv in
		pool_kind=*) pool_kind=${kv#*=} ;;
		pool_size=*) pool_size=${kv#*=} ;;
		shutdown_timeout=*) shutdown_timeout=${kv#*=} ;;
		instance=*) instance=${kv#*=} ;;
		log_level=*) log_level=${kv#*=} ;;
		http_port=*) http_port=${kv#*=} ;;
		*) fail "write_config: unknown option '$kv'" ;;
		esac
	done
	if [[ -z $http_port ]]; then
		http_port=$(free_port)
	fi
	HTTP_PORT=$http_port
	{
		echo "broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }"
		echo "pool: { kind: $pool_kind, size: $pool_size }"
		echo "plugin_dir: $TM_PLUGINS"
		echo "http: { listen: 127.0.0.1:$http_port }"
		echo "shutdown_timeout: $shutdown_timeout"
		echo "log: { level: $log_level, format: text }"
		if [[ -n $instance ]]; then
			echo "instance: $instance"
		fi
		cat
	} >"$file"
}

# -------------------------------------------------------------- the binary

# tm ARGS...: run taskmill in the foreground. Its stdout goes to $TM_OUT and
# stderr to $TM_ERR (files, also kept in TEST_DIR/cli.log for the failure
# report and the sanitizer scan); its exit status is in TM_RC. Never fails.
TM_OUT=$TEST_DIR/cli.out
TM_ERR=$TEST_DIR/cli.err
TM_RC=0
tm() {
	TM_RC=0
	timeout -k 5 60 "$TM_BIN" "$@" >"$TM_OUT" 2>"$TM_ERR" || TM_RC=$?
	{
		printf '$ taskmill %s  => %d\n' "$*" "$TM_RC"
		sed 's/^/  out: /' "$TM_OUT"
		sed 's/^/  err: /' "$TM_ERR"
	} >>"$TEST_DIR/cli.log"
	return 0
}

# emit CONFIG TASK JSON: `taskmill emit`, printing the new message id; fails
# the test unless it exits 0 with an id.
emit() {
	tm emit -c "$1" "$2" "$3"
	if ((TM_RC != 0)); then
		fail "taskmill emit $2 '$3' exited $TM_RC: $(head -c 500 "$TM_ERR")"
	fi
	local id
	id=$(tr -d '[:space:]' <"$TM_OUT")
	[[ $id =~ ^[0-9]+-[0-9]+$ ]] || fail "taskmill emit printed '$id', not a message id"
	echo "$id"
}

# start_daemon CONFIG: run `taskmill run -c CONFIG` in the background with
# stdout and stderr in TEST_DIR/daemon.N.log; sets DAEMON_PID and DAEMON_LOG.
start_daemon() {
	TM_DAEMON_SEQ=$((TM_DAEMON_SEQ + 1))
	DAEMON_LOG=$TEST_DIR/daemon.$TM_DAEMON_SEQ.log
	"$TM_BIN" run -c "$1" >"$DAEMON_LOG" 2>&1 &
	DAEMON_PID=$!
	echo "$DAEMON_PID" >>"$TEST_DIR/daemon.pids"
	note "daemon $TM_DAEMON_SEQ started, pid $DAEMON_PID, log $DAEMON_LOG"
}

# daemon_hwm: the daemon's peak resident set (VmHWM), in KiB.
daemon_hwm() {
	awk '/^VmHWM:/ {print $2}' "/proc/$DAEMON_PID/status"
}

# daemon_alive [PID]: the daemon process exists and is not a zombie.
daemon_alive() {
	local pid=${1:-$DAEMON_PID} state
	[[ -n $pid ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[[ $state != Z ]]
}

# stop_daemon [TIMEOUT_SECONDS] [SIGNAL]: send SIGTERM (or SIGNAL) to the
# daemon, wait for it to exit (default 20 s, then SIGKILL and fail), and
# return its exit status. Sets DAEMON_STOP_MS to how long it took.
DAEMON_STOP_MS=0
stop_daemon() {
	local timeout=${1:-20} sig=${2:-TERM} pid=$DAEMON_PID rc=0 t0
	[[ -n $pid ]] || fail "stop_daemon: no daemon started"
	t0=$(now_ms)
	kill "-$sig" "$pid" 2>/dev/null || true
	local deadline=$((t0 + timeout * 1000))
	while daemon_alive "$pid"; do
		if (($(now_ms) >= deadline)); then
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			DAEMON_PID=
			fail "daemon pid $pid did not exit within ${timeout}s of SIG$sig"
		fi
		sleep 0.05
	done
	DAEMON_STOP_MS=$(($(now_ms) - t0))
	wait "$pid" 2>/dev/null || rc=$?
	DAEMON_PID=
	note "daemon pid $pid exited with status $rc after ${DAEMON_STOP_MS} ms"
	return "$rc"
}

# ------------------------------------------------------------------- http

# http_code PATH [PORT]: the HTTP status of GET PATH ("000" if no answer).
http_code() {
	curl -s -o /dev/null -m 5 -w '%{http_code}' \
		"http://127.0.0.1:${2:-$HTTP_PORT}$1" 2>/dev/null || true
}

# wait_ping [PORT] [TIMEOUT]: wait until GET /ping answers 200 (default 20 s).
# Fails early if the daemon has exited.
wait_ping() {
	local port=${1:-$HTTP_PORT} timeout=${2:-20} code
	local deadline=$(($(now_ms) + timeout * 1000))
	while :; do
		code=$(http_code /ping "$port")
		[[ $code == 200 ]] && return 0
		if [[ -n $DAEMON_PID ]] && ! daemon_alive; then
			fail "daemon exited while waiting for /ping on port $port"
		fi
		if (($(now_ms) >= deadline)); then
			fail "/ping on port $port not 200 after ${timeout}s (last: $code)"
		fi
		sleep 0.1
	done
}

# metric NAME [LABELS] [PORT]: scrape /metrics and print the value of NAME
# with the given labels (e.g. 'task="noop",outcome="success"'), summed over
# every series carrying those labels; 0 when there is none. Returns 1 (and
# prints 0) when /metrics cannot be fetched.
metric() {
	local name=$1 labels=${2:-} port=${3:-$HTTP_PORT} body
	if ! body=$(curl -sf -m 5 "http://127.0.0.1:$port/metrics" 2>/dev/null); then
		echo 0
		return 1
	fi
	awk -v name="$name" -v want="$labels" '
		BEGIN { n = split(want, req, /,/) }
		/^#/ || NF == 0 { next }
		{
			line = $0
			b = index(line, "{")
			s = index(line, " ")
			if (b > 0 && b < s) {
				mname = substr(line, 1, b - 1)
				e = index(line, "}")
				have = "," substr(line, b + 1, e - b - 1) ","
				rest = substr(line, e + 1)
			} else {
				mname = substr(line, 1, s - 1)
				have = ",,"
				rest = substr(line, s)
			}
			if (mname != name) next
			for (k = 1; k <= n; k++)
				if (req[k] != "" && index(have, "," req[k] ",") == 0) next
			split(rest, f, " ")
			sum += f[1]
		}
		END { printf "%.15g\n", sum + 0 }' <<<"$body"
}

# wait_metric NAME LABELS VALUE [TIMEOUT]: wait until the metric equals VALUE
# (default 30 s); fails with the last value seen. Fails early if the daemon
# has exited.
wait_metric() {
	local name=$1 labels=$2 want=$3 timeout=${4:-30} v=
	local deadline=$(($(now_ms) + timeout * 1000))
	note "waiting up to ${timeout}s for $name{$labels} == $want"
	while :; do
		v=$(metric "$name" "$labels") || v="(no /metrics)"
		[[ $v == "$want" ]] && return 0
		if [[ -n $DAEMON_PID ]] && ! daemon_alive; then
			fail "daemon exited while waiting for $name{$labels} == $want (last: $v)"
		fi
		if (($(now_ms) >= deadline)); then
			fail "$name{$labels}: expected $want within ${timeout}s, last value $v"
		fi
		sleep 0.1
	done
}

# -------------------------------------------------------------- clean-up

# Kill any daemon this test left running (the test failed half-way).
# tm_on_exit CMD: evaluate CMD (a string) when the test exits, before the
# daemons are killed; commands run in reverse order of registration. Tests
# register what they start themselves (a private server, a sampler).
TM_CLEANUPS=()
tm_on_exit() {
	TM_CLEANUPS+=("$1")
}

tm_test_cleanup() {
	local pid i
	for ((i = ${#TM_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${TM_CLEANUPS[i]}" || true
	done
	if [[ -f $TEST_DIR/daemon.pids ]]; then
		while read -r pid; do
			if daemon_alive "$pid"; then
				kill -KILL "$pid" 2>/dev/null || true
				wait "$pid" 2>/dev/null || true
			fi
		done <"$TEST_DIR/daemon.pids"
	fi
}
trap tm_test_cleanup EXIT
