# After every daemon was down for three slots and more, `catch_up: once`
# publishes the latest missed slot once at start; `catch_up: skip` does
# not. Neither publishes the other missed slots.
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" log_level=info <<YAML
tasks:
  tick: { plugin: noop.so, queue: q.tick }
schedules:
  s-once: { task: tick, every: 2s, catch_up: once }
  s-skip: { task: tick, every: 2s, catch_up: skip }
YAML

# slots_of NAME: the slots published by schedule NAME, in stream order
slots_of() {
	rcall EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			local f = {}
			for i = 1, #e[2] - 1, 2 do f[e[2][i]] = e[2][i + 1] end
			if f['schedule'] == ARGV[1] then out[#out + 1] = f['slot'] end
		end
		return out" 1 q.tick "$1"
}

start_daemon "$CONF"
wait_ping
wait_until '[[ -n $(slots_of s-once) && -n $(slots_of s-skip) ]]' 30
stop_daemon
once_before=$(slots_of s-once | tail -n 1)
skip_before=$(slots_of s-skip | tail -n 1)
assert_eq "$once_before" "$(rcall GET q.tick.sched.s-once)" "last slot kept by Redis (once)"
down=$(now_ms)
note "all down at $down; last slots $once_before, $skip_before"

# down for more than three slots
wait_until "(( \$(now_ms) >= $down + 7000 ))" 20
start_daemon "$CONF"
up=$(now_ms)
wait_ping
ready=$(now_ms)
# the first slot after the start, by both
wait_until "(( \$(slots_of s-skip | tail -n 1) > $up ))" 30
wait_until "(( \$(slots_of s-once | tail -n 1) > $up ))" 30
# the slot caught up is the latest due when the firing started, which on a
# loaded machine can be a second or more after the launch ($up): the
# daemon logs it
caught=$(sed -n "s/.*schedule 's-once': catching up slot \([0-9]*\),.*/\1/p" "$DAEMON_LOG")

# missed: the slots after the last fired and up to the start
missed_once=$(slots_of s-once | awk -v a="$once_before" -v b="${caught:-$up}" '$1 > a && $1 <= b')
missed_skip=$(slots_of s-skip | awk -v a="$skip_before" -v b="$up" '$1 > a && $1 <= b')
note "launched at $up, ready at $ready; caught up $caught; published for missed slots: once [$missed_once], skip [$missed_skip]"
assert_eq "" "$missed_skip" "catch_up: skip publishes no missed slot"
[[ -n $caught ]] || fail "catch_up: once did not catch up (no log line)"
assert_eq "$caught" "$missed_once" "catch_up: once publishes one missed slot, the one it logs"
# the latest: not older than the last slot before the launch, not later
# than the first after the daemon was ready
assert_ge $((up / 2000 * 2000)) "$caught" "the caught-up slot is the latest (not older)"
assert_le $(((ready + 2000) / 2000 * 2000)) "$caught" "the caught-up slot is not a future one"
# and at least three were missed
assert_ge 3 $(((caught - once_before) / 2000)) "slots missed while down (the latest included)"
dups=$(slots_of s-once | sort | uniq -d)
assert_eq "" "$dups" "slots published twice"
stop_daemon
