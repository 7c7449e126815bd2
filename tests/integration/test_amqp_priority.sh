# RabbitMQ priorities: with the daemon stopped, three messages are emitted
# with --priority 1, one with the task's default priority (2), then three
# with --priority 5. With one worker and prefetch 1, the daemon runs the high
# ones first, then the default one, then the low ones, each group in
# publishing order. A priority above max_priority is refused by emit.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.pri
write_amqp_config "$CONF" pool_size=1 <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: $Q
    prefetch: 1
    max_priority: 5
    priority: 2
    config: { path: $JOURNAL }
YAML

low=() high=()
for i in 1 2 3; do
	low+=("$(emit_amqp "$CONF" journal "{\"n\":$i,\"p\":\"low\"}" --priority 1)")
done
default=$(emit_amqp "$CONF" journal '{"p":"default"}')
for i in 1 2 3; do
	high+=("$(emit_amqp "$CONF" journal "{\"n\":$i,\"p\":\"high\"}" --priority 5)")
done
tm emit -c "$CONF" journal '{"p":"too high"}' --priority 6
assert_eq 2 "$TM_RC" "emit --priority 6 exit status (max_priority 5)"
grep -q "max_priority" "$TM_ERR" || fail "emit --priority 6: no reason given: $(cat "$TM_ERR")"
assert_eq 7 "$(ready_count "$Q")" "messages ready before the start"

start_daemon "$CONF"
wait_metric taskmill_tasks_total 'task="journal",outcome="success"' 7 30
order=$(cut -d' ' -f1 "$JOURNAL" | paste -sd ' ')
assert_eq "${high[*]} $default ${low[*]}" "$order" "order of the runs (high, default, low)"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
