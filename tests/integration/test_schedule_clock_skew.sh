# A daemon whose clock runs a day ahead cannot silence a Redis schedule:
# daemon A (true clock) and daemon B (libfaketime, FAKETIME=+1d) fire an
# `every: 1s` schedule on one Redis; B runs for 3 s and is stopped. The
# schedule's fired marker never holds a slot past the broker's clock, and
# every slot from A's start to the end is published exactly once (B
# decides slots on the broker's clock too, so it fires true slots). B
# logs the skew warning and its /metrics shows taskmill_clock_skew_seconds
# about 86400; A's about 0. Every entry carries dedup_key
# schedule:<name>:<slot>.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

FT_LIB=
for d in /usr/lib/x86_64-linux-gnu/faketime /usr/lib/aarch64-linux-gnu/faketime \
	/usr/lib/faketime /usr/local/lib/faketime; do
	if [[ -f $d/libfaketimeMT.so.1 ]]; then
		FT_LIB=$d/libfaketimeMT.so.1
		break
	fi
done
[[ -n $FT_LIB ]] || fail "libfaketime is needed (package faketime, scripts/install-deps.sh)"

JOURNAL=$TEST_DIR/journal.txt
MARK=q.tick.sched.every-second
write_config "$TEST_DIR/a.yaml" http_port="$(free_port)" instance=a log_level=info <<YAML
tasks:
  tick: { plugin: journal.so, queue: q.tick, config: { path: $JOURNAL } }
schedules:
  every-second: { task: tick, every: 1s, body: { from: schedule } }
YAML
PORT_A=$HTTP_PORT
write_config "$TEST_DIR/b.yaml" http_port="$(free_port)" instance=b log_level=info <<YAML
tasks:
  tick: { plugin: journal.so, queue: q.tick, config: { path: $JOURNAL } }
schedules:
  every-second: { task: tick, every: 1s, body: { from: schedule } }
YAML
PORT_B=$HTTP_PORT

# entries: "slot dedup_key" of every entry of the stream, in stream order
entries() {
	rcall EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			local f = {}
			for i = 1, #e[2] - 1, 2 do f[e[2][i]] = e[2][i + 1] end
			out[#out + 1] = (f.slot or '-') .. ' ' .. (f.dedup_key or '-')
		end
		return out" 1 q.tick
}
# marker_ahead: how far the fired marker is past the broker's clock (ms;
# negative when behind, "none" when there is no marker)
marker_ahead() {
	rcall EVAL "local v = redis.call('GET', KEYS[1])
		if not v then return 'none' end
		local t = redis.call('TIME')
		return tostring(tonumber(v) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))" 1 "$MARK"
}

start_daemon "$TEST_DIR/a.yaml"
PID_A=$DAEMON_PID
LOG_A=$DAEMON_LOG
wait_ping "$PORT_A" 60
t0=$(now_ms)
note "daemon A running at $t0"

# B's clock a day ahead (the monotonic clock untouched: timeouts and
# sleeps are as usual, only the wall clock is off)
LD_PRELOAD=$FT_LIB FAKETIME=+1d FAKETIME_DONT_FAKE_MONOTONIC=1 \
	FAKETIME_NO_CACHE=1 ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
	start_daemon "$TEST_DIR/b.yaml"
PID_B=$DAEMON_PID
LOG_B=$DAEMON_LOG
wait_ping "$PORT_B" 60
tb=$(now_ms)
wait_until "(( \$(now_ms) >= $tb + 3000 ))" 20
ahead_b=$(marker_ahead)
note "with B running, the marker is $ahead_b ms past the broker's clock"
# B measures its skew when its schedule session opens
skew_b=$(metric taskmill_clock_skew_seconds '' "$PORT_B")
note "daemon B: taskmill_clock_skew_seconds $skew_b"
DAEMON_PID=$PID_B
stop_daemon
tstop=$(now_ms)

# A goes on firing every slot
wait_until "(( \$(now_ms) >= $tstop + 6000 ))" 20
first=$(((t0 / 1000 + 1) * 1000))
last=$(((tstop + 4000) / 1000 * 1000))
wait_until "[[ \$(entries | awk -v l=$last '\$1 >= l' | wc -l) -ge 1 ]]" 20 ||
	fail "no slot at or after $last was published (A was silenced)"
entries >"$TEST_DIR/entries.txt"
awk '{ print $1 }' "$TEST_DIR/entries.txt" >"$TEST_DIR/slots.txt"
dups=$(sort "$TEST_DIR/slots.txt" | uniq -d | sed -n 1,5p | paste -sd ' ')
assert_eq "" "$dups" "slots published more than once"
for ((s = first; s <= last; s += 1000)); do
	grep -qx "$s" "$TEST_DIR/slots.txt" || fail "slot $s was not published"
done
note "slots $first .. $last each published once"
ahead=$(marker_ahead)
((ahead <= 2000)) || fail "fired marker $ahead ms ahead of the broker's clock"
late=$(awk -v l=$((tstop + 3 * 86400000 / 4)) '$1 > l' "$TEST_DIR/slots.txt" | sed -n 1,3p | paste -sd ' ')
assert_eq "" "$late" "slots from the fast clock's future"

# every entry's dedup key names its schedule and slot
bad=$(awk '$2 != "schedule:every-second:" $1' "$TEST_DIR/entries.txt" | sed -n 1,3p | paste -sd ' ')
assert_eq "" "$bad" "entries whose dedup_key is not schedule:every-second:<slot>"

[[ $ahead_b != none ]] || fail "no slot fired while both daemons ran"
((ahead_b <= 2000)) || fail "daemon B marked a future slot fired: marker $ahead_b ms ahead of the broker"

# B exported its skew, and warned
awk -v s="$skew_b" 'BEGIN { exit !(s > 86390 && s < 86410) }' ||
	fail "daemon B's taskmill_clock_skew_seconds is $skew_b, not about 86400"
grep -q "this daemon's clock is +86[34][0-9][0-9]\\.[0-9]* s off the broker's" "$LOG_B" ||
	fail "daemon B logged no clock skew warning: $(grep -i 'schedule' "$LOG_B" | tail -n 5)"
skew=$(metric taskmill_clock_skew_seconds '' "$PORT_A")
awk -v s="$skew" 'BEGIN { exit !(s > -2 && s < 2) }' ||
	fail "daemon A's taskmill_clock_skew_seconds is $skew, not about 0"
if grep -q "off the broker's" "$LOG_A"; then
	fail "daemon A logged a clock skew warning: $(grep "off the broker's" "$LOG_A" | head -n 1)"
fi
DAEMON_PID=$PID_A
stop_daemon
