# kill -9 of the daemon mid-flight on RabbitMQ: the messages it held
# unacknowledged are redelivered to the next daemon (here with the fork pool;
# the first one runs the thread pool), and every published message is
# journaled at least once: none is lost.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
N=5000
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.journal
# The first daemon runs at most 2,000 messages a second, so that the kill
# comes mid-run however fast the host is or however late the poll below
# sees the 500th line (without a limit, a fast daemon had journaled all
# 5,001 before a loaded host's poll saw 500); the second one runs flat out.
for kind in thread fork; do
	limit=
	[[ $kind == thread ]] && limit=", rate_limit: 2000/s"
	write_amqp_config "$TEST_DIR/$kind.yaml" pool_kind=$kind pool_size=2 <<YAML
tasks:
  journal: { plugin: journal.so, queue: $Q, prefetch: 8$limit, config: { path: $JOURNAL } }
YAML
done
emit_amqp "$TEST_DIR/thread.yaml" journal '{"n":0}' >"$TEST_DIR/ids"
amqptool publish "$Q" "$N" '{"n":%d}' >>"$TEST_DIR/ids"

start_daemon "$TEST_DIR/thread.yaml"
wait_until "[[ -f $JOURNAL && \$(wc -l <$JOURNAL) -ge 500 ]]" 30
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
at_kill=$(wc -l <"$JOURNAL")
note "daemon killed with $at_kill of $((N + 1)) messages journaled"
assert_le "$N" "$at_kill" "messages journaled at the kill (it must come mid-run)"

start_daemon "$TEST_DIR/fork.yaml"
wait_ping
wait_until "[[ \$(journal_unique $JOURNAL) == $((N + 1)) ]]" 60
wait_until "[[ \$(ready_count $Q) == 0 ]]" 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "second daemon's exit status after SIGTERM"

cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ids.journal"
sort -u "$TEST_DIR/ids" >"$TEST_DIR/ids.sorted"
diff -q "$TEST_DIR/ids.sorted" "$TEST_DIR/ids.journal" >/dev/null ||
	fail "journaled ids differ from published ids"
total=$(wc -l <"$JOURNAL")
note "$total runs for $((N + 1)) messages: $((total - N - 1)) redelivered after the kill"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
assert_eq 0 "$(ready_count "$Q.dlq")" "dead letters"
