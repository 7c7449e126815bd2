# Operators' soak, on Redis: 3 daemons (thread pool), each behind its own
# fault proxy (lib_fault.sh), daemon 3 under a skewed clock (libfaketime:
# +1h, -30s or none, chosen again each time it restarts), run three tasks
# while a chaos loop, every second or two, does one of these at random:
#   - cuts a daemon's broker connections;
#   - kill -9s a daemon and starts it again;
#   - SIGHUPs a daemon after changing a restart-only key (pool.size): the
#     reload must be refused ("reload refused" in its log) and the daemon
#     go on; the file is then put back as the daemon runs it;
#   - SIGHUPs a daemon after changing a reloadable key (a task's timeout):
#     applied (taskmill_config_generation grows);
#   - restarts daemon 3 (SIGTERM, exit 0) with another clock skew.
# Each round also publishes a batch of messages to "work" (journal.so),
# 10 to "fail" (flaky.so, on_error: reject: its first attempt fails and
# is dead-lettered at once), and, one round in two, replays the dead
# letters of "fail" with `taskmill dlq replay` and the HTTP API replay of
# a random daemon at the same time. A schedule fires every second on
# "tick" (journal.so, dedup_ttl 120s), on all 3 daemons.
# At the end, after a calm phase:
#   - every "work" message ran at least once;
#   - replays: the entries that came back to the fail queue are exactly
#     the sum of the counts the replays reported, each of them ran, and
#     no dead letter came back twice: a message's entries form one chain
#     (entry, dead letter, replayed entry, ...), so each failing message
#     ends with at most one dead letter left, two when a replay doubled;
#   - every schedule slot from the start to the end of the chaos was
#     published once and run by one entry (a copy would be dropped by
#     dedup_ttl), none missing: the skewed daemon silenced none;
#   - the refusals in the logs are the refused reloads asked for, and
#     the applied ones raised the generation;
#   - no daemon died but those killed on purpose; no crash or sanitizer
#     lines in the logs.
# Runs of one entry more than once (redelivery after a kill -9 or a cut,
# at least once) are counted in the report, not failed.
#
# Environment: SOAK_OPS_SECONDS, the chaos phase's length (default 35);
# SOAK_SEED replays a chaos sequence (the timing still varies);
# SOAK_REPORT=FILE gets the summary, which is also in the test's log.
# `make check` runs the default; `make check-soak` runs it for 600 s.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
. "$TM_SRCDIR/tests/integration/lib_soak.sh"
need_tools jq curl

FT_LIB=
for d in /usr/lib/x86_64-linux-gnu/faketime /usr/lib/aarch64-linux-gnu/faketime \
	/usr/lib/faketime /usr/local/lib/faketime; do
	if [[ -f $d/libfaketimeMT.so.1 ]]; then
		FT_LIB=$d/libfaketimeMT.so.1
		break
	fi
done
[[ -n $FT_LIB ]] || fail "libfaketime is needed (package faketime, scripts/install-deps.sh)"

SECONDS_CHAOS=${SOAK_OPS_SECONDS:-35}
SEED=${SOAK_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$SEED
# The time budget is run.sh's watchdog (TM_TEST_TIMEOUT, 120 s unless
# set): the chaos ends SETTLE_LIMIT + 40 s before it at the latest (its
# last round may wait 30 s for a reload), then the calm phase gets up to
# SETTLE_LIMIT to settle what the chaos left.
BUDGET=${TM_TEST_TIMEOUT:-120}
SETTLE_LIMIT=30
BATCH=200 # "work" messages a round
QW=q.ops.work
QF=q.ops.fail
QT=q.ops.tick
TOKEN=soak-ops-token
AUTH=(-H "Authorization: Bearer $TOKEN")
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
[[ -f $TM_BUILD/test-plugins/flaky.so ]] || fail "flaky.so not found: build it with make test-plugins"
cp "$TM_PLUGINS/journal.so" "$TM_BUILD/test-plugins/flaky.so" "$PLUG/"
T0=$(now_ms)
note "soak_ops: ${SECONDS_CHAOS}s of chaos, seed $SEED"

declare -a SIZE TMO SKEW
W=0 F=0 # "work" and "fail" messages published so far
KILLS=0 CUTS=0 REFUSE_ASKED=0 APPLY_ASKED=0 APPLY_SEEN=0 SKEW_RESTARTS=0
REPLAY_ROUNDS=0 REPLAYED=0 REPLAY_ERRORS=0
SKEWS=("+1h" "-30s" "")

# ops_config I [FILE]: write daemon I's config (to FILE, default its own);
# the pool's size and the work task's timeout are SIZE[I] and TMO[I].
ops_config() {
	local i=$1 file=${2:-$TEST_DIR/ops.$1.yaml} port
	port=FAULT_PORT_P$i
	cat >"$file" <<YAML
broker: { url: redis://127.0.0.1:${!port}/0 }
pool: { kind: thread, size: ${SIZE[i]} }
plugin_dir: $PLUG
instance: ops-$i
http: { listen: 127.0.0.1:${HP[i]}, token: "$TOKEN" }
shutdown_timeout: 1s
log: { level: info, format: text }
tasks:
  work:
    plugin: journal.so
    queue: $QW
    prefetch: 32
    claim_idle: 3s
    timeout: ${TMO[i]}s
    config: { path: $TEST_DIR/journal.work.$i.txt }
  fail:
    plugin: flaky.so
    queue: $QF
    on_error: reject
    claim_idle: 3s
    config: { path: $TEST_DIR/journal.fail.$i.txt }
  tick:
    plugin: journal.so
    queue: $QT
    dedup_ttl: 120s
    claim_idle: 3s
    config: { path: $TEST_DIR/journal.tick.$i.txt }
schedules:
  sec: { task: tick, every: 1s, body: { from: schedule } }
YAML
}

# soak_start I: start daemon I (again); daemon 3 with clock skew SKEW[3]
# (the monotonic clock untouched), and wait for its HTTP port.
soak_start() {
	local i=$1
	if ((i == 3)) && [[ -n ${SKEW[3]} ]]; then
		LD_PRELOAD=$FT_LIB FAKETIME=${SKEW[3]} FAKETIME_DONT_FAKE_MONOTONIC=1 \
			FAKETIME_NO_CACHE=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
			start_daemon "$TEST_DIR/ops.$i.yaml"
	else
		start_daemon "$TEST_DIR/ops.$i.yaml"
	fi
	PID[i]=$DAEMON_PID
	wait_ping "${HP[i]}" 60
}

# refusals: "reload refused" lines over every daemon log
refusals() {
	cat "$TEST_DIR"/daemon.*.log 2>/dev/null | grep -ac 'reload refused' || true
}

# generation I: daemon I's configuration generation (0 when it does not answer)
generation() {
	metric taskmill_config_generation '' "${HP[$1]}" || true
}

# wait_soft CMD SECONDS: like wait_until, but returns 1 at the timeout
wait_soft() {
	local deadline=$(($(now_ms) + $2 * 1000))
	until eval "$1" >/dev/null 2>&1; do
		(($(now_ms) < deadline)) || return 1
		sleep 0.2
	done
}

# publish: a batch of "work" messages and 10 "fail" ones, straight to Redis
publish() {
	xadd_bulk "$QW" "$BATCH" "{\"w\":$W,\"n\":%d}"
	W=$((W + BATCH))
	xadd_bulk "$QF" 10 "{\"f\":$F,\"n\":%d}"
	F=$((F + 10))
}

# replay_round: `taskmill dlq replay fail` (straight to Redis) and the
# HTTP API replay of a random daemon at once; adds what they report to
# REPLAYED. A failed call (a daemon whose broker was just cut) counts
# in REPLAY_ERRORS.
replay_round() {
	local d=$((1 + RANDOM % 3)) cli code out n
	timeout -k 2 60 "$TM_BIN" dlq -c "$CLI_CONF" replay fail \
		>"$TEST_DIR/replay.cli.out" 2>"$TEST_DIR/replay.cli.err" &
	cli=$!
	code=$(curl -s -m 30 -o "$TEST_DIR/replay.api.out" -w '%{http_code}' "${AUTH[@]}" \
		-X POST "http://127.0.0.1:${HP[d]}/api/v1/tasks/fail/dead-letters/replay" 2>/dev/null) || true
	if wait "$cli"; then
		out=$(cat "$TEST_DIR/replay.cli.out")
		if [[ $out =~ ^replayed\ ([0-9]+)\ messages?$ ]]; then
			REPLAYED=$((REPLAYED + BASH_REMATCH[1]))
		else
			fail "dlq replay printed '$out'"
		fi
	else
		REPLAY_ERRORS=$((REPLAY_ERRORS + 1))
		note "dlq replay failed: $(head -c 300 "$TEST_DIR/replay.cli.err")"
	fi
	if [[ $code == 200 ]] && n=$(jq -er .replayed "$TEST_DIR/replay.api.out"); then
		REPLAYED=$((REPLAYED + n))
	else
		REPLAY_ERRORS=$((REPLAY_ERRORS + 1))
		note "API replay on daemon $d answered $code: $(head -c 300 "$TEST_DIR/replay.api.out" 2>/dev/null)"
	fi
	REPLAY_ROUNDS=$((REPLAY_ROUNDS + 1))
}

# chaos_once: one random fault or operator action
chaos_once() {
	local i=$((1 + RANDOM % 3)) what=$((RANDOM % 5)) g n
	case $what in
	0)
		note "chaos: cut daemon $i's broker connections"
		fault_proxy "P$i" cut
		CUTS=$((CUTS + 1))
		;;
	1)
		note "chaos: kill -9 daemon $i (pid ${PID[i]}) and restart it"
		soak_kill9 "$i"
		if ((i == 3)); then SKEW[3]=${SKEWS[RANDOM % 3]}; fi
		soak_start "$i"
		KILLS=$((KILLS + 1))
		;;
	2)
		n=$(refusals)
		note "chaos: SIGHUP daemon $i with pool.size ${SIZE[i]} -> $((SIZE[i] + 1)) (restart-only)"
		SIZE[i]=$((SIZE[i] + 1))
		ops_config "$i"
		SIZE[i]=$((SIZE[i] - 1))
		kill -HUP "${PID[i]}" 2>/dev/null || true
		REFUSE_ASKED=$((REFUSE_ASKED + 1))
		wait_soft "(( \$(refusals) > $n ))" 30 || note "no refusal logged within 30 s"
		ops_config "$i"
		daemon_alive "${PID[i]}" || note "daemon $i is gone after a refused reload"
		;;
	3)
		g=$(generation "$i")
		TMO[i]=$((TMO[i] == 30 ? 31 : 30))
		note "chaos: SIGHUP daemon $i with work.timeout ${TMO[i]}s (reloadable), generation $g"
		ops_config "$i"
		kill -HUP "${PID[i]}" 2>/dev/null || true
		APPLY_ASKED=$((APPLY_ASKED + 1))
		if wait_soft "(( \$(generation $i) > $g ))" 30; then
			APPLY_SEEN=$((APPLY_SEEN + 1))
		else
			note "daemon $i's generation did not grow within 30 s"
		fi
		;;
	4)
		SKEW[3]=${SKEWS[RANDOM % 3]}
		note "chaos: restart daemon 3 with clock skew '${SKEW[3]}'"
		stop_rcs=()
		soak_stop 3
		[[ ${stop_rcs[0]} == 0 ]] || DEATHS+=("daemon 3 exited with status ${stop_rcs[0]} on a SIGTERM for a restart")
		soak_start 3
		SKEW_RESTARTS=$((SKEW_RESTARTS + 1))
		;;
	esac
}

# ---- set-up: three daemons behind their proxies, the third one skewed
for i in 1 2 3; do
	fault_proxy_start "P$i" "$REDIS_PORT"
	HP[i]=$(free_port)
	SIZE[i]=3
	TMO[i]=30
	ops_config "$i"
done
SKEW[3]=${SKEWS[RANDOM % 2]}
CLI_CONF=$TEST_DIR/cli.yaml
ops_config 1 "$CLI_CONF"
sed -i "s|redis://127.0.0.1:$FAULT_PORT_P1/|redis://127.0.0.1:$REDIS_PORT/|" "$CLI_CONF"
for i in 1 2 3; do
	soak_start "$i"
done
# the slots of the window: from 2 s after all three run
SLOT_FIRST=$((($(now_ms) + 2000) / 1000 * 1000 + 1000))

# ---- chaos
T_RUN=$(now_ms)
end=$((T_RUN + SECONDS_CHAOS * 1000))
limit=$((T0 + (BUDGET - SETTLE_LIMIT - 40) * 1000))
if ((end > limit)); then
	note "chaos cut to $(((limit - T_RUN) / 1000))s by the budget of ${BUDGET}s"
	end=$limit
fi
while (($(now_ms) < end)); do
	publish
	sleep "$((1 + RANDOM % 2))"
	chaos_once
	((RANDOM % 2)) && replay_round
	for i in 1 2 3; do
		soak_check_alive "$i"
	done
	note "progress: $W work, $F failing published; $REPLAYED replayed; $(xlen "$QF.dlq") dead letters"
done
SLOT_LAST=$(($(now_ms) / 1000 * 1000))
T_CHAOS=$(($(now_ms) - T_RUN))
for i in 1 2 3; do
	fault_proxy "P$i" pass
	soak_check_alive "$i"
done

# ---- calm: everything published runs, the last slots of the window run
# work_ran / fail_ran / tick_runs: the entry ids the journals hold
work_ran() { cat "$TEST_DIR"/journal.work.*.txt 2>/dev/null | cut -d' ' -f1; }
fail_ran() { cat "$TEST_DIR"/journal.fail.*.txt 2>/dev/null | cut -d' ' -f1; }
tick_runs() { cat "$TEST_DIR"/journal.tick.*.txt 2>/dev/null | cut -d' ' -f1; }
settle_deadline=$(($(now_ms) + SETTLE_LIMIT * 1000))
while :; do
	got=$(work_ran | sort -u | wc -l)
	fails=$(xlen "$QF")
	fgot=$(fail_ran | sort -u | wc -l)
	pending=$(($(xpending "$QW") + $(xpending "$QF") + $(xpending "$QT")))
	held=$(soak_in_flight)
	((got >= W && fgot >= fails && pending == 0 && held == 0)) &&
		(($(now_ms) >= SLOT_LAST + 4000)) && break
	if (($(now_ms) >= settle_deadline)); then
		note "calm: gave up after ${SETTLE_LIMIT}s: $got of $W work ran, $fgot of $fails fail entries, $pending pending, $held held"
		break
	fi
	sleep 1
done
for i in 1 2 3; do
	soak_check_alive "$i"
done
stop_rcs=()
for i in 1 2 3; do
	soak_stop "$i"
done

# ---- the counts
# work: every message at least once
xids "$QW" | sort >"$TEST_DIR/ids.work"
work_ran | sort >"$TEST_DIR/runs.work"
WORK_RUNS=$(wc -l <"$TEST_DIR/runs.work")
WORK_DUP=$((WORK_RUNS - $(uniq <"$TEST_DIR/runs.work" | wc -l)))
comm -23 "$TEST_DIR/ids.work" <(uniq "$TEST_DIR/runs.work") >"$TEST_DIR/ids.work.missing"
WORK_MISSING=$(wc -l <"$TEST_DIR/ids.work.missing")
WORK_N=$(wc -l <"$TEST_DIR/ids.work")

# replays: what came back to the fail queue beyond what was published
FAIL_ENTRIES=$(xlen "$QF")
CAME_BACK=$((FAIL_ENTRIES - F))
xids "$QF" | sort >"$TEST_DIR/ids.fail"
fail_ran | sort >"$TEST_DIR/runs.fail"
comm -23 "$TEST_DIR/ids.fail" <(uniq "$TEST_DIR/runs.fail") >"$TEST_DIR/ids.fail.missing"
FAIL_MISSING=$(wc -l <"$TEST_DIR/ids.fail.missing")
FAIL_RUNS=$(wc -l <"$TEST_DIR/runs.fail")
FAIL_DUP=$((FAIL_RUNS - $(uniq <"$TEST_DIR/runs.fail" | wc -l)))
# each body: 1 entry published, then one more per replay of it
rcall EVAL "local n = {}
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local f = e[2]
		for i = 1, #f, 2 do
			if f[i] == 'body' then n[f[i + 1]] = (n[f[i + 1]] or 0) + 1 end
		end
	end
	local out = {}
	for b, c in pairs(n) do out[#out + 1] = c .. ' ' .. b end
	return out" 1 "$QF" >"$TEST_DIR/fail.copies"
FAIL_BODIES=$(wc -l <"$TEST_DIR/fail.copies")
REPLAYED_BODIES=$(awk '$1 > 1' "$TEST_DIR/fail.copies" | wc -l)
# Each message's entries form one chain: an entry fails once and is
# dead-lettered once, a replay moves that dead letter back as one new
# entry, and so on; the chain ends with one dead letter left (or none,
# when a redelivered attempt 2 succeeded). A dead letter replayed twice
# (two replays at once) forks the chain: its body ends with 2 or more.
rcall EVAL "local n = {}
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local f = e[2]
		for i = 1, #f, 2 do
			if f[i] == 'body' then n[f[i + 1]] = (n[f[i + 1]] or 0) + 1 end
		end
	end
	local out = {}
	for b, c in pairs(n) do out[#out + 1] = c .. ' ' .. b end
	return out" 1 "$QF.dlq" >"$TEST_DIR/fail.dlq.copies"
FORKED=$(awk '$1 > 1' "$TEST_DIR/fail.dlq.copies" | wc -l)

# slots: "entry-id slot" of every entry of the tick queue
rcall EVAL "local out = {}
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local s = '-'
		for i = 1, #e[2] - 1, 2 do if e[2][i] == 'slot' then s = e[2][i + 1] end end
		out[#out + 1] = e[1] .. ' ' .. s
	end
	return out" 1 "$QT" | sort >"$TEST_DIR/tick.entries"
tick_runs | sort >"$TEST_DIR/runs.tick"
# per slot in the window: entries published, entries run, runs
awk -v first="$SLOT_FIRST" -v last="$SLOT_LAST" '
	FILENAME == ARGV[1] { slot[$1] = $2; pub[$2]++; next }
	{ runs[slot[$1]]++; if (!(($1) in seen)) { seen[$1] = 1; ran[slot[$1]]++ } }
	END {
		for (s = first; s <= last; s += 1000)
			printf "%d %d %d %d\n", s, pub[s] + 0, ran[s] + 0, runs[s] + 0
	}' "$TEST_DIR/tick.entries" "$TEST_DIR/runs.tick" >"$TEST_DIR/slots"
SLOTS=$(wc -l <"$TEST_DIR/slots")
SLOT_MISSING=$(awk '$3 == 0' "$TEST_DIR/slots" | wc -l)
SLOT_DOUBLE=$(awk '$3 > 1' "$TEST_DIR/slots" | wc -l)
SLOT_COPIES=$(awk '$2 > 1' "$TEST_DIR/slots" | wc -l)
SLOT_RERUNS=$(awk '$4 > $3' "$TEST_DIR/slots" | wc -l)

REFUSALS=$(refusals)
CRASH_LINES=$(soak_crash_lines)
ELAPSED=$(($(now_ms) - T0))
summary="soak_ops: seed $SEED
  work            $WORK_N messages, $WORK_RUNS runs, $WORK_MISSING never ran, $WORK_DUP runs again (redelivery)
  fail            $F published, $FAIL_ENTRIES entries, $FAIL_RUNS runs ($FAIL_DUP again), $FAIL_MISSING entries never ran
  replays         $REPLAY_ROUNDS rounds (CLI + API at once), $REPLAYED replayed as reported, $CAME_BACK came back ($REPLAYED_BODIES of $FAIL_BODIES bodies replayed at least once), $REPLAY_ERRORS failed calls; $FORKED bodies with 2 or more dead letters left (a dead letter replayed twice)
  slots           $SLOTS in the window ($SLOT_FIRST .. $SLOT_LAST): $SLOT_MISSING never ran, $SLOT_DOUBLE ran from two entries, $SLOT_COPIES published twice, $SLOT_RERUNS with an entry run again (redelivery)
  reloads         $REFUSE_ASKED restart-only ($REFUSALS refusals logged), $APPLY_ASKED reloadable ($APPLY_SEEN applied)
  kills           $KILLS
  cuts            $CUTS
  skew restarts   $SKEW_RESTARTS (daemon 3 ends with skew '${SKEW[3]}')
  unexpected      ${#DEATHS[@]} daemon deaths; exit statuses at SIGTERM: ${stop_rcs[*]}
  time            $((T_CHAOS / 1000)) s of chaos, $((ELAPSED / 1000)) s in all"
printf '%s\n' "$summary" >&2
[[ -n ${SOAK_REPORT:-} ]] && printf '%s\n' "$summary" >"$SOAK_REPORT"

# ---- the verdict: every failed property, then fail once
bad=()
((WORK_MISSING == 0)) || bad+=("$WORK_MISSING work ids never ran (first: $(head -n 3 "$TEST_DIR/ids.work.missing" | paste -sd ' '))")
if ((REPLAY_ERRORS == 0)); then
	((CAME_BACK == REPLAYED)) || bad+=("$CAME_BACK entries came back to $QF, the replays reported $REPLAYED")
else
	# a call whose answer was lost may have moved entries it did not report
	((CAME_BACK >= REPLAYED)) || bad+=("$CAME_BACK entries came back to $QF, the replays reported $REPLAYED")
fi
((FORKED == 0)) || bad+=("$FORKED messages replayed twice from one dead letter (2 or more dead letters left): $(awk '$1 > 1' "$TEST_DIR/fail.dlq.copies" | head -n 3 | paste -sd ' ')")
((FAIL_MISSING == 0)) || bad+=("$FAIL_MISSING fail entries never ran (first: $(head -n 3 "$TEST_DIR/ids.fail.missing" | paste -sd ' '))")
((REPLAYED > 0)) || bad+=("no dead letter was replayed")
((SLOT_MISSING == 0)) || bad+=("$SLOT_MISSING slots never ran: $(awk '$3 == 0 { print $1 }' "$TEST_DIR/slots" | head -n 5 | paste -sd ' ')")
((SLOT_DOUBLE == 0)) || bad+=("$SLOT_DOUBLE slots ran from two entries: $(awk '$3 > 1 { print $1 }' "$TEST_DIR/slots" | head -n 5 | paste -sd ' ')")
((REFUSALS == REFUSE_ASKED)) || bad+=("$REFUSALS reload refusals logged for $REFUSE_ASKED restart-only changes")
((APPLY_SEEN == APPLY_ASKED)) || bad+=("$APPLY_SEEN of $APPLY_ASKED reloadable changes applied")
if ((${#DEATHS[@]})); then
	bad+=("daemons died unasked: $(printf '%s; ' "${DEATHS[@]}")")
fi
for i in 0 1 2; do
	[[ ${stop_rcs[i]} == 0 ]] || bad+=("daemon $((i + 1)) exited with status ${stop_rcs[i]} on SIGTERM")
done
[[ -z $CRASH_LINES ]] || bad+=("crash or sanitizer lines in the daemon logs: $(head -n 3 <<<"$CRASH_LINES")")
if ((${#bad[@]})); then
	printf 'soak_ops: %s\n' "${bad[@]}" >&2
	fail "soak_ops: ${#bad[@]} properties failed (above; seed $SEED)"
fi
