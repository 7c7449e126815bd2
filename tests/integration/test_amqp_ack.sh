# RabbitMQ ack path, with both pool kinds: every message published to a task
# queue (by `taskmill emit`, by a raw client with a message_id, and without
# one) runs once and is acknowledged. The queue ends empty (after the stop
# too: nothing was left unacknowledged), nothing is dead-lettered, and a
# message without a message_id gets an id assigned ("amqp-<tag>-<hex>").
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
N=300
NOID=5
TOTAL=$((N + NOID + 1))

for kind in thread fork; do
	note "---- $kind pool"
	JOURNAL=$TEST_DIR/journal.$kind.txt
	CONF=$TEST_DIR/$kind.yaml
	Q=$AQ.$kind
	HTTP_PORT=
	write_amqp_config "$CONF" pool_kind=$kind <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: $Q
    prefetch: 32
    config: { path: $JOURNAL }
YAML
	# emit declares the topology (queue, dead-letter exchange and queue)
	first=$(emit_amqp "$CONF" journal '{"n":0,"via":"emit"}')
	amqptool publish "$Q" "$N" '{"n":%d,"via":"raw"}' >"$TEST_DIR/ids.$kind"
	amqptool publish "$Q" "$NOID" '{"n":%d,"via":"noid"}' - noid
	assert_eq "$TOTAL" "$(ready_count "$Q")" "messages ready in $Q before the start"

	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="journal",outcome="success"' "$TOTAL" 30
	wait_until "[[ \$(ready_count $Q) == 0 ]]" 10
	assert_eq 1 "$(metric taskmill_broker_up)" "taskmill_broker_up"
	assert_eq 0 "$(metric taskmill_dead_letter_total 'task="journal"')" "dead letters"
	status=$(curl -sf "http://127.0.0.1:$HTTP_PORT/status" || true)
	[[ -z $status || $status == *'"kind":"amqp"'* || $status == *'"kind": "amqp"'* ]] ||
		fail "/status does not name the amqp broker: $status"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status after SIGTERM ($kind pool)"

	assert_eq "$TOTAL" "$(wc -l <"$JOURNAL")" "journal lines ($kind pool)"
	assert_eq "$TOTAL" "$(journal_unique "$JOURNAL")" "distinct journaled ids ($kind pool)"
	grep -q "^$first " "$JOURNAL" || fail "the emitted message $first was not journaled"
	cut -d' ' -f1 "$JOURNAL" | sort >"$TEST_DIR/journal.ids.$kind"
	assert_eq "$N" "$(grep -cxFf "$TEST_DIR/ids.$kind" "$TEST_DIR/journal.ids.$kind")" \
		"raw message ids journaled ($kind pool)"
	assert_eq "$NOID" "$(grep -cE '^amqp-[0-9]+-[0-9a-f]+ .*"via":"noid"' "$JOURNAL")" \
		"assigned ids of messages without one ($kind pool)"
	assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop (all acknowledged)"
	assert_eq 0 "$(ready_count "$Q.dlq")" "ready in $Q.dlq"
done
