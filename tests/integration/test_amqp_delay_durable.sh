# A delayed message on RabbitMQ survives kill -9 of the daemon and a
# restart of RabbitMQ: it waits in a durable delay queue as a persistent
# message, and after both come back it runs once, no earlier than its
# time.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
delay_start
ready_count "$Q" >/dev/null # builds amqptool now, not while it waits
t0=$(now_ms)
emit_amqp "$CONF" stamp '{"n":"a"}' --delay 20s >/dev/null
# parked: in the 16000 ms level (the largest not above 20 s)
wait_until "[[ \$(ready_count '$Q.delay.16000ms') == 1 ]]" 15
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
rabbitctl stop_app >/dev/null
rabbitctl start_app >/dev/null
note "daemon killed, RabbitMQ restarted"
start_daemon "$CONF"
wait_ping "" 60
wait_until "grep -q '\"a\"' '$OUT'" 60
sleep 1 # a second run would show now
assert_eq 1 "$(grep -c . "$OUT")" "ran once"
ran=$(awk '{print $1; exit}' "$OUT")
note "ran $((ran - t0)) ms after the emit"
assert_ge 20000 "$((ran - t0))" "not before its time"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
