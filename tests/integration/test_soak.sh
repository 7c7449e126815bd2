# Soak: N messages through 2 daemons (thread pool, Redis) while a chaos
# loop, at random every few seconds, cuts or blackholes a daemon's broker
# connections (through lib_fault.sh's proxy), SIGHUPs a daemon after
# rewriting its config (a task added or removed) or replacing its plugin .so
# (a new inode), or kill -9s a daemon and restarts it at once. The task is
# the test plugin versioned.so, a journal that records every run as "v0
# <message id>" after sleeping the body's "ms", so that runs are in flight
# whenever a fault strikes. Beside it, a task on fail.so gets 10 messages
# before each fault that fail (half "error": retried twice, 1 s then 2 s
# later, then dead-lettered; half "reject": dead-lettered at once), so that
# retries are waiting whenever a fault strikes. At the end: every message id ran at
# least once, every failing one is dead-lettered exactly once, nothing is
# pending, and no daemon died but those killed on purpose (exit statuses;
# crash and sanitizer lines in the logs). The daemons are stopped once
# nothing is pending and neither holds a message.
#
# `make check` runs it with 20,000 messages; alone:
#   TM_BUILD=$PWD/build TM_TEST_TIMEOUT=300 \
#       tests/integration/run.sh soak
# (about 60-90 s on 2 cores), or `make check-soak` for the full size.
#
# Every SOAK_LONG_EVERY-th message (default 1000) runs 1.5 s, longer than
# the daemons' shutdown_timeout (1s): a reload then retires a configuration
# whose drain times out while a run is still inside the plugin.
#
# Environment: SOAK=1 for 200,000 messages (else SOAK_N, default 20,000: the size make check runs);
# SOAK_MS, each run's duration (default 5 ms: 2 daemons x 4 threads run
# at most 1,600 messages a second); SOAK_SEED to replay a chaos sequence
# (the timing still varies); SOAK_REPORT=FILE gets the summary (messages,
# runs, duplicate runs and rate, dead letters, kills, cuts, blackholes,
# reloads, time taken), which is also in the test's log.
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
. "$TM_SRCDIR/tests/integration/lib_soak.sh"

if [[ ${SOAK:-0} == 1 ]]; then
	N=200000
else
	N=${SOAK_N:-20000}
fi
MS=${SOAK_MS:-5}
LONG_EVERY=${SOAK_LONG_EVERY:-1000}
SEED=${SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$SEED
# The time budget is run.sh's watchdog (TM_TEST_TIMEOUT, 120 s unless
# set): chaos runs until every id ran or until SETTLE_LIMIT + 25 s before
# the budget ends (the last fault may take 8 s); then, calm, the daemons
# get up to SETTLE_LIMIT to run the rest and settle what they hold, and the
# verdict has the rest.
BUDGET=${TM_TEST_TIMEOUT:-120}
SETTLE_LIMIT=30
Q=q.soak
QF=q.soak.fail
F=0 # failing messages published so far
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
VERSIONED=$TM_BUILD/test-plugins/versioned.so
[[ -f $VERSIONED ]] || fail "$VERSIONED not found: build it with make test-plugins"
cp "$VERSIONED" "$TM_PLUGINS/noop.so" "$TM_PLUGINS/fail.so" "$PLUG/"
T0=$(now_ms)
note "soak: $N messages, seed $SEED, a budget of ${BUDGET}s"

# Per daemon i (1, 2): its proxy P<i>, config, HTTP port, pid, journal.
# (PID, HP, DEATHS, RESTARTS: lib_soak.sh)
declare -a EXTRA
KILLS=0 CUTS=0 BLACKHOLES=0 RELOADS_CONF=0 RELOADS_PLUGIN=0

# soak_config I: write daemon I's config; the task "extra" is there when
# EXTRA[I] is 1.
soak_config() {
	local i=$1 port
	port=FAULT_PORT_P$i
	{
		echo "broker: { url: redis://127.0.0.1:${!port}/0 }"
		echo "pool: { kind: thread, size: 4 }"
		echo "plugin_dir: $PLUG"
		echo "instance: soak-$i"
		echo "http: { listen: 127.0.0.1:${HP[i]} }"
		echo "shutdown_timeout: 1s"
		echo "log: { level: info, format: text }"
		echo "tasks:"
		echo "  soak:"
		echo "    plugin: versioned.so"
		echo "    queue: $Q"
		echo "    prefetch: 64"
		echo "    claim_idle: 3s"
		echo "    config: { path: $TEST_DIR/journal.$i.txt }"
		echo "  fail:"
		echo "    plugin: fail.so"
		echo "    queue: $QF"
		echo "    max_retries: 2"
		echo "    backoff: 1s"
		echo "    max_backoff: 2s"
		echo "    claim_idle: 3s"
		if ((EXTRA[i])); then
			echo "  extra: { plugin: noop.so, queue: q.soak.extra }"
		fi
	} >"$TEST_DIR/soak.$i.yaml"
}

# soak_start I: start daemon I (again) with its config.
soak_start() {
	start_daemon "$TEST_DIR/soak.$1.yaml"
	PID[$1]=$DAEMON_PID
}

# covered: how many distinct message ids the journals hold.
covered() {
	cat "$TEST_DIR"/journal.*.txt 2>/dev/null | cut -d' ' -f2 | sort -u | wc -l
}

# chaos_once: one random fault on a random daemon.
chaos_once() {
	local i=$((1 + RANDOM % 2)) what=$((RANDOM % 5))
	case $what in
	0)
		note "chaos: cut daemon $i's broker connections"
		fault_proxy "P$i" cut
		CUTS=$((CUTS + 1))
		;;
	1)
		local secs=$((2 + RANDOM % 4))
		note "chaos: blackhole daemon $i's broker for ${secs}s"
		fault_proxy "P$i" "blackhole both"
		sleep "$secs"
		fault_proxy "P$i" pass
		BLACKHOLES=$((BLACKHOLES + 1))
		;;
	2)
		EXTRA[i]=$((1 - EXTRA[i]))
		note "chaos: SIGHUP daemon $i with task extra $( ((EXTRA[i])) && echo added || echo removed)"
		soak_config "$i"
		kill -HUP "${PID[i]}" 2>/dev/null || true
		RELOADS_CONF=$((RELOADS_CONF + 1))
		;;
	3)
		note "chaos: SIGHUP daemon $i with versioned.so replaced (new inode)"
		cp "$VERSIONED" "$PLUG/.versioned.so.tmp"
		mv -f "$PLUG/.versioned.so.tmp" "$PLUG/versioned.so"
		kill -HUP "${PID[i]}" 2>/dev/null || true
		RELOADS_PLUGIN=$((RELOADS_PLUGIN + 1))
		;;
	4)
		note "chaos: kill -9 daemon $i (pid ${PID[i]}) and restart it"
		soak_kill9 "$i"
		soak_start "$i"
		KILLS=$((KILLS + 1))
		;;
	esac
}

# soak_load: XADD the N messages through one pipelined redis-cli.
soak_load() {
	local i ms out
	out=$(
		for ((i = 1; i <= N; i++)); do
			ms=$MS
			((i % LONG_EVERY)) || ms=1500
			resp XADD "$Q" '*' body "{\"n\":$i,\"ms\":$ms}"
		done | rcli --pipe 2>&1
	) || fail "redis-cli --pipe failed: $out"
	[[ $out =~ errors:\ 0,\ replies:\ $N ]] || fail "loading the soak: $out"
}

# soak_add_failing: publish 10 more failing messages (5 error, 5 reject).
soak_add_failing() {
	local i mode
	for ((i = 0; i < 10; i++)); do
		F=$((F + 1))
		mode=error
		((F % 2)) || mode=reject
		rcall XADD "$QF" '*' body "{\"n\":$F,\"mode\":\"$mode\"}" >/dev/null
	done
}

# dlq_origins STREAM: the origin_id of every entry, sorted ("?" if none).
dlq_origins() {
	rcall EVAL "local out = {}
		for i, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			local f = e[2]
			out[i] = '?'
			for j = 1, #f, 2 do
				if f[j] == 'origin_id' then out[i] = f[j + 1] end
			end
		end
		return out" 1 "$1" | sort
}
# ---- set-up: the load first, then two daemons behind their proxies
soak_load
xids "$Q" >"$TEST_DIR/ids.all"
assert_eq "$N" "$(wc -l <"$TEST_DIR/ids.all")" "entries loaded"
note "loaded $N messages in $(($(now_ms) - T0)) ms"
for i in 1 2; do
	fault_proxy_start "P$i" "$REDIS_PORT"
	HP[i]=$(free_port)
	EXTRA[i]=0
	soak_config "$i"
	soak_start "$i"
done
for i in 1 2; do
	wait_ping "${HP[i]}" 30
done

# ---- chaos until every id ran
T_RUN=$(now_ms)
deadline=$((T0 + (BUDGET - SETTLE_LIMIT - 25) * 1000))
got=0
while :; do
	got=$(covered)
	dl=$(xlen "$QF.dlq")
	note "progress: $got of $N ids ran, $dl of $F failing ones dead-lettered"
	# the failing messages are not waited for here: those stuck would keep
	# the chaos going to the deadline; the calm phase waits for them
	((got < N)) || break
	if (($(now_ms) >= deadline)); then
		note "state of $Q at the deadline (acked pending undelivered): $(stream_state "$Q")"
		break
	fi
	soak_add_failing
	sleep "$((1 + RANDOM % 3))"
	chaos_once
	soak_check_alive 1
	soak_check_alive 2
done
T_CHAOS=$(($(now_ms) - T_RUN))

# ---- calm: everything passes again; what is pending gets settled
for i in 1 2; do
	fault_proxy "P$i" pass
	soak_check_alive "$i"
done
settle_deadline=$(($(now_ms) + SETTLE_LIMIT * 1000))
while :; do
	got=$(covered)
	pending=$(($(xpending "$Q") + $(xpending "$QF")))
	dl=$(xlen "$QF.dlq")
	# read after pending: with nothing pending, nothing new can come
	held=$(soak_in_flight)
	((got == N && dl >= F && pending == 0 && held == 0)) && break
	((pending > 0 || held == 0)) || note "calm: nothing pending, $held held in the daemons"
	(($(now_ms) < settle_deadline)) || break
	sleep 1
done
state=$(stream_state "$Q")
for i in 1 2; do
	soak_check_alive "$i"
done
for i in 1 2; do
	soak_stop "$i"
done

# ---- the counts
cat "$TEST_DIR"/journal.*.txt | cut -d' ' -f2 | sort >"$TEST_DIR/ids.runs"
RUNS=$(wc -l <"$TEST_DIR/ids.runs")
DISTINCT=$(uniq <"$TEST_DIR/ids.runs" | wc -l)
DUP_RUNS=$((RUNS - DISTINCT))
DUP_IDS=$(uniq -d <"$TEST_DIR/ids.runs" | wc -l)
DLQ=$(xlen "$Q.dlq")
dlq_origins "$Q.dlq" >"$TEST_DIR/ids.dlq"
DLQ_DUPS=$(uniq -d <"$TEST_DIR/ids.dlq" | grep -c . || true)
xids "$QF" | sort >"$TEST_DIR/ids.fail"
DLQF=$(xlen "$QF.dlq")
dlq_origins "$QF.dlq" >"$TEST_DIR/ids.dlq.fail"
DLQF_DUPS=$(uniq -d <"$TEST_DIR/ids.dlq.fail" | grep -c . || true)
comm -23 "$TEST_DIR/ids.fail" <(uniq "$TEST_DIR/ids.dlq.fail") >"$TEST_DIR/ids.fail.missing"
DLQF_MISSING=$(wc -l <"$TEST_DIR/ids.fail.missing")
PENDING_F=$(xpending "$QF")
sort -o "$TEST_DIR/ids.all.sorted" "$TEST_DIR/ids.all"
comm -23 "$TEST_DIR/ids.all.sorted" <(uniq "$TEST_DIR/ids.runs") >"$TEST_DIR/ids.missing"
MISSING=$(wc -l <"$TEST_DIR/ids.missing")
ELAPSED=$(($(now_ms) - T0))
CRASH_LINES=$(soak_crash_lines)
rate=$(awk -v d="$DUP_RUNS" -v n="$N" 'BEGIN { printf "%.4f%%", n ? 100 * d / n : 0 }')
summary="soak: seed $SEED
  messages        $N
  runs            $RUNS
  distinct ran    $DISTINCT (missing $MISSING)
  duplicate runs  $DUP_RUNS ($rate of messages; $DUP_IDS ids ran more than once)
  dead letters    $DLQ ($DLQ_DUPS duplicated)
  failing         $F: $DLQF dead letters ($DLQF_DUPS duplicated, $DLQF_MISSING missing), $PENDING_F pending
  pending at end  $(xpending "$Q") (acked pending undelivered: $state); $held held in the daemons
  kills           $KILLS
  cuts            $CUTS
  blackholes      $BLACKHOLES
  reloads         $((RELOADS_CONF + RELOADS_PLUGIN)) ($RELOADS_CONF config, $RELOADS_PLUGIN plugin)
  unexpected      ${#DEATHS[@]} daemon deaths; exit statuses at SIGTERM: ${stop_rcs[*]}
  time            $((T_CHAOS / 1000)) s of chaos, $((ELAPSED / 1000)) s in all"
printf '%s\n' "$summary" >&2
[[ -n ${SOAK_REPORT:-} ]] && printf '%s\n' "$summary" >"$SOAK_REPORT"

# ---- the verdict: every failed property, then fail once
bad=()
((MISSING == 0)) || bad+=("$MISSING ids never ran (first: $(head -n 3 "$TEST_DIR/ids.missing" | paste -sd ' '))")
[[ $(xpending "$Q") == 0 ]] || bad+=("$(xpending "$Q") entries still pending after ${SETTLE_LIMIT}s of calm")
((DLQ_DUPS == 0)) || bad+=("$DLQ_DUPS ids dead-lettered more than once: $(uniq -d "$TEST_DIR/ids.dlq" | head -n 3 | paste -sd ' ')")
((DLQF_DUPS == 0)) || bad+=("$DLQF_DUPS failing ids dead-lettered more than once: $(uniq -d "$TEST_DIR/ids.dlq.fail" | head -n 3 | paste -sd ' ')")
((DLQF_MISSING == 0)) || bad+=("$DLQF_MISSING failing ids never dead-lettered (first: $(head -n 3 "$TEST_DIR/ids.fail.missing" | paste -sd ' '))")
((PENDING_F == 0)) || bad+=("$PENDING_F failing entries still pending after ${SETTLE_LIMIT}s of calm")
if ((${#DEATHS[@]})); then
	bad+=("daemons died unasked: $(printf '%s; ' "${DEATHS[@]}")")
fi
for i in 0 1; do
	[[ ${stop_rcs[i]} == 0 ]] || bad+=("daemon $((i + 1)) exited with status ${stop_rcs[i]} on SIGTERM")
done
[[ -z $CRASH_LINES ]] || bad+=("crash or sanitizer lines in the daemon logs: $(head -n 3 <<<"$CRASH_LINES")")
if ((${#bad[@]})); then
	printf 'soak: %s\n' "${bad[@]}" >&2
	fail "soak: ${#bad[@]} properties failed (above; seed $SEED)"
fi
