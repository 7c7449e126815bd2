# The language hosts on RabbitMQ: a Lua task and an exec task consume
# their queues in the fork pool; success, error and reject settle as on
# Redis (errors and rejects dead-lettered with on_error: reject).
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
[[ -f $TM_PLUGINS/lua.so ]] || fail "lua.so not built (liblua5.4-dev)"
CONF=$TEST_DIR/taskmill.yaml
cp "$TM_SRCDIR/tests/hosts/task.lua" "$TEST_DIR/task.lua"

write_amqp_config "$CONF" pool_kind=fork pool_size=2 <<YAML
tasks:
  lu:
    plugin: lua.so
    queue: $AQ.lu
    on_error: reject
    config: { script: $TEST_DIR/task.lua }
  ex:
    plugin: exec.so
    queue: $AQ.ex
    on_error: reject
    config: { command: [$TM_SRCDIR/tests/hosts/task.sh] }
YAML
for task in lu ex; do
	for mode in ok error reject; do
		emit_amqp "$CONF" "$task" "{\"mode\":\"$mode\"}" >/dev/null
	done
done
start_daemon "$CONF"
wait_ping
for task in lu ex; do
	wait_metric taskmill_tasks_total "task=\"$task\",outcome=\"success\"" 1 30
	wait_metric taskmill_tasks_total "task=\"$task\",outcome=\"error\"" 1 30
	wait_metric taskmill_tasks_total "task=\"$task\",outcome=\"rejected\"" 1 30
	wait_until "[[ \$(ready_count $AQ.$task) == 0 ]]" 10
	wait_until "[[ \$(ready_count $AQ.$task.dlq) == 2 ]]" 10
done
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
