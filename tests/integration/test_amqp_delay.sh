# Delayed messages on RabbitMQ: `emit --delay 3s` (header x-not-before)
# runs no earlier than its time and, on an idle daemon, by 4.5 s after
# the emit (DESIGN.md: within 1 s after its time, plus 0.5 s for a loaded
# test machine). A 1 h delay published first does not hold back a 2 s
# one published after it: each waits in a delay queue of its own level
# (queue-level TTL, dead-lettering back to the task queue), held by the
# broker, not by the daemon (nothing unacknowledged while they wait); a
# message back from a level before its time is parked again for the
# rest.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
delay_start

# --- 3 s
delay_run_after d3 3s
assert_ge 3000 "$RAN_AFTER" "not run before 3.0 s"
assert_le 4500 "$RAN_AFTER" "run by 4.5 s on an idle daemon"
# 3 s is a 2000 ms level, then the rest: the message came back before
# its time and was parked again
parks=$(grep -ac 'delayed message(s) parked until their time' "$DAEMON_LOG")
note "parked $parks times"
assert_ge 2 "$parks" "parked again for the rest after the first level"

# --- 1 h first, then 2 s: the short one is not held back
emit_amqp "$CONF" stamp '{"n":"h1"}' --delay 1h >/dev/null
delay_run_after s2 2s
assert_ge 2000 "$RAN_AFTER" "2 s message not early"
assert_le 3500 "$RAN_AFTER" "2 s message not held back by the 1 h one"
! grep -q '"h1"' "$OUT" || fail "the 1 h message ran"
# the 1 h message waits in the 2048 s level (the largest not above 1 h),
# in the broker: the task queue is empty and holds nothing unacked
wait_until "[[ \$(ready_count '$Q.delay.2048000ms') == 1 ]]" 30
assert_eq 0 "$(ready_count "$Q")" "task queue empty"
unacked=$(rabbitctl list_queues name messages_unacknowledged |
	awk -v q="$Q" '$1 == q {print $2}')
assert_eq 0 "$unacked" "nothing held unacknowledged by the daemon"
# 30 days at most on RabbitMQ
tm emit -c "$CONF" stamp '{}' --delay 721h
assert_eq 2 "$TM_RC" "a delay over 30 days is refused"
assert_match '30 days' "$(cat "$TM_ERR")" "the refusal says the limit"
# 30 days: the longest level (125 ms x 2^24, about 24 days) first
emit_amqp "$CONF" stamp '{"n":"d30"}' --delay 720h >/dev/null
wait_until "[[ \$(ready_count '$Q.delay.2097152000ms') == 1 ]]" 30
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
assert_eq 2 "$(grep -c . "$OUT")" "only the two due messages ran"
