# A RabbitMQ memory alarm while the daemon settles. The broker blocks every
# connection that publishes; taskmill publishes its retry, dead-letter and
# reply copies on a publishing connection of its own, so the block holds
# those copies back (and the originals they settle stay unacknowledged: the
# prefetch window holds intake back) while the consuming connections go on:
# successes are acknowledged, no confirm timeout turns the block into a
# reconnect loop, nothing is run twice. Once the alarm is lifted, every copy
# is confirmed: each failing message is dead-lettered exactly once and every
# other one journaled.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
QJ=$AQ.journal
QF=$AQ.fail
NJ=200
NF=20
PREFETCH=8
# how long the alarm lasts: longer than two publisher confirm timeouts
# (5 s); TM_ALARM_HOLD_S=75 also outlasts two heartbeat intervals
HOLD_S=${TM_ALARM_HOLD_S:-12}
write_amqp_config "$CONF" pool_size=4 <<YAML
tasks:
  journal: { plugin: journal.so, queue: $QJ, prefetch: 8, config: { path: $JOURNAL } }
  fail: { plugin: fail.so, queue: $QF, prefetch: $PREFETCH, max_retries: 1, backoff: 200ms, max_backoff: 200ms }
YAML

# alarm on|off: a memory alarm on the run's node (a watermark no node
# stays under), or the default watermark again; waits (bounded) until the
# node reports the change
alarm() {
	local want
	if [[ $1 == on ]]; then
		rabbitctl set_vm_memory_high_watermark 0.0001 >/dev/null || fail "cannot set the watermark"
		want=1
	else
		rabbitctl set_vm_memory_high_watermark 0.4 >/dev/null || fail "cannot reset the watermark"
		want=0
	fi
	wait_until "[[ \$(rabbitctl eval 'length(rabbit_alarm:get_alarms()).' 2>/dev/null) == $want ]]" 60
}
tm_on_exit "rabbitctl set_vm_memory_high_watermark 0.4 >/dev/null 2>&1 || true"

# a first start declares the queues
start_daemon "$CONF"
wait_ping
stop_daemon || fail "daemon exit status after SIGTERM"
amqptool publish "$QJ" "$NJ" '{"n":%d}' >"$TEST_DIR/ids.journal"
amqptool publish "$QF" "$NF" '{"mode":"error","n":%d}' >"$TEST_DIR/ids.fail"
alarm on
note "memory alarm raised"

start_daemon "$CONF"
wait_ping
# first runs of a prefetch window of failing messages: their retry copies
# are held, and so are their originals, which fill the window
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' "$PREFETCH" 60
wait_until "[[ \$(journal_unique $JOURNAL) == $NJ ]]" 60
sleep "$HOLD_S"
held_errors=$(metric taskmill_tasks_total 'task="fail",outcome="error"')
note "while blocked: all $NJ journaled, $held_errors failed runs"
assert_eq "$PREFETCH" "$held_errors" "failed runs while blocked (no redelivery, no retry, no new intake)"
assert_eq 0 "$(metric taskmill_dead_letter_total 'task="fail"')" "dead letters while blocked"
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects while blocked"
if grep -E 'reconnecting|no publisher confirm' "$DAEMON_LOG" >&2; then
	fail "the alarm made the daemon drop a connection"
fi
assert_eq 200 "$(http_code /ping)" "/ping while blocked"
grep -q 'blocks publishing' "$DAEMON_LOG" || fail "no log line for the block"

alarm off
note "memory alarm lifted"
wait_metric taskmill_dead_letter_total 'task="fail"' "$NF" 60
wait_until "[[ \$(journal_unique $JOURNAL) == $NJ ]]" 60
wait_until "[[ \$(ready_count $QF.dlq) == $NF ]]" 30
wait_until "[[ \$(ready_count $QF) == 0 && \$(ready_count $QJ) == 0 ]]" 30
assert_eq "$((2 * NF))" "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" \
	"failed runs (each failing message runs twice: max_retries 1)"
assert_eq "$NF" "$(metric taskmill_dead_letter_total 'task="fail"')" "dead letters"
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects"

cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ran"
sort -u "$TEST_DIR/ids.journal" | diff -q - "$TEST_DIR/ran" >/dev/null ||
	fail "journaled ids differ from published ids"
tm dlq -c "$CONF" list fail
assert_eq 0 "$TM_RC" "dlq list exit status"
cut -f2 "$TM_OUT" | sort -u >"$TEST_DIR/dead"
sort -u "$TEST_DIR/ids.fail" | diff -q - "$TEST_DIR/dead" >/dev/null ||
	fail "dead-lettered origins differ from the failing ids"
assert_eq "$NF" "$(grep -c . "$TM_OUT")" "dead letters listed (none twice)"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
