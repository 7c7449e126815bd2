# A RabbitMQ message far over max_payload (20 MiB against 1 MiB) among
# small ones. The daemon never holds its body: it drops the body frames as
# they arrive and rejects the message unread, so RabbitMQ's dead-letter
# exchange moves it, body intact, to the dead-letter queue, where `dlq list`
# names the cause. The small messages around it all run, and the daemon's
# peak RSS grows by far less than the body's size.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.journal
BIG=$((20 * 1024 * 1024))
write_amqp_config "$CONF" <<YAML
tasks:
  journal: { plugin: journal.so, queue: $Q, max_payload: 1MiB, config: { path: $JOURNAL } }
YAML

start_daemon "$CONF"
wait_ping
amqptool publish "$Q" 10 '{"n":%d}' >"$TEST_DIR/ids"
wait_until "[[ \$(journal_unique $JOURNAL) == 10 ]]" 30
before=$(daemon_hwm)

amqptool big "$Q" "$BIG" "big-$$"
amqptool publish "$Q" 10 '{"m":%d}' >>"$TEST_DIR/ids"
wait_until "[[ \$(journal_unique $JOURNAL) == 20 ]]" 60
wait_until "[[ \$(ready_count $Q.dlq) == 1 ]]" 60
after=$(daemon_hwm)
note "peak RSS: $before KiB before the large message, $after KiB after"
# the body is 20480 KiB; holding it once would add at least that much
assert_le $((before + 8192)) "$after" "peak RSS (KiB) after a $BIG-byte message"
cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ran"
sort -u "$TEST_DIR/ids" | diff -q - "$TEST_DIR/ran" >/dev/null ||
	fail "journaled ids differ from the small messages' ids"
grep -q "big-$$" "$JOURNAL" && fail "the oversized message ran"
grep -q "id=big-$$ .*invalid: body of $BIG bytes exceeds max_payload" "$DAEMON_LOG" ||
	fail "no log line for the oversized message"
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects"

# the dead letter: the original message, its cause named
tm dlq -c "$CONF" list journal
assert_eq 0 "$TM_RC" "dlq list exit status"
assert_eq 1 "$(grep -c . "$TM_OUT")" "dlq entries"
IFS=$'\t' read -r dlid origin attempts _ error <"$TM_OUT"
assert_eq "big-$$" "$dlid" "dead letter id (the original message id)"
assert_eq "big-$$" "$origin" "dead letter origin"
assert_eq 0 "$attempts" "attempts (never run)"
assert_match "invalid: body of $BIG bytes exceeds max_payload" "$error" "dead letter error"
assert_eq 1 "$(ready_count "$Q.dlq")" "messages in $Q.dlq (listing gave it back)"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
