# RabbitMQ: after every daemon was down for three slots and more,
# `catch_up: once` publishes the latest missed slot once at start (the
# lock queue kept the last slot fired); `catch_up: skip` does not.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml
ONCE=once$$
SKIP=skip$$
write_amqp_config "$CONF" log_level=info <<YAML
tasks:
  tick: { plugin: journal.so, queue: $AQ.tick, config: { path: $JOURNAL } }
schedules:
  $ONCE: { task: tick, every: 2s, catch_up: once }
  $SKIP: { task: tick, every: 2s, catch_up: skip }
YAML

# slots_of NAME: the slots of schedule NAME journaled (message ids
# NAME:SLOT), sorted
slots_of() {
	[[ -f $JOURNAL ]] || return 0
	awk '{ print $1 }' "$JOURNAL" | sed -n "s/^$1://p" | sort -n
}

start_daemon "$CONF"
wait_ping
wait_until '[[ -n $(slots_of $ONCE) && -n $(slots_of $SKIP) ]]' 30
stop_daemon
once_before=$(slots_of "$ONCE" | tail -n 1)
skip_before=$(slots_of "$SKIP" | tail -n 1)
down=$(now_ms)
note "all down at $down; last slots $once_before, $skip_before"
wait_until "(( \$(now_ms) >= $down + 7000 ))" 20
start_daemon "$CONF"
wait_ping
# the firing started when the daemon took the lead of the schedules: the
# slots before that were missed (a loaded machine may take a second or
# more from the launch to there, so the launch time would not do)
wait_until "grep -q \"schedule '$ONCE': this daemon leads it now\" '$DAEMON_LOG'" 30
lead=$(grep -m 1 "schedule '$ONCE': this daemon leads it now" "$DAEMON_LOG" | cut -d' ' -f1)
up=$(date -d "$lead" +%s%3N)
wait_until "(( \$(slots_of $SKIP | tail -n 1) > $up ))" 30
wait_until "(( \$(slots_of $ONCE | tail -n 1) > $up ))" 30
caught=$(sed -n "s/.*schedule '$ONCE': catching up slot \([0-9]*\),.*/\1/p" "$DAEMON_LOG")

missed_once=$(slots_of "$ONCE" | awk -v a="$once_before" -v b="$caught" '$1 > a && $1 <= b')
missed_skip=$(slots_of "$SKIP" | awk -v a="$skip_before" -v b="$up" '$1 > a && $1 <= b')
note "firing from $up; caught up $caught; published for missed slots: once [$missed_once], skip [$missed_skip]"
assert_eq "" "$missed_skip" "catch_up: skip publishes no missed slot"
[[ -n $caught ]] || fail "catch_up: once did not catch up (no log line)"
assert_eq "$caught" "$missed_once" "catch_up: once publishes one missed slot, the one it logs"
# the latest slot due when the firing started: at most one period before
# the lead was logged, and not after the next period began
assert_ge $((up - 2000)) "$caught" "the caught-up slot is the latest (not older)"
assert_le $((up + 2000)) "$caught" "the caught-up slot is not a future one"
assert_ge 3 $(((caught - once_before) / 2000)) "slots missed while down (the latest included)"
assert_eq "" "$(slots_of "$ONCE" | uniq -d)" "slots published twice"
stop_daemon
