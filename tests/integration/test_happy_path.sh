# 2000 entries published before the daemon starts are all processed by the
# noop task and acknowledged; nothing is dead-lettered.
N=2000

xadd_bulk q.noop "$N" '{"n":%d}'
assert_eq "$N" "$(xlen q.noop)" "XLEN q.noop after XADD"

write_config "$TEST_DIR/taskmill.yaml" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.noop, prefetch: 64 }
YAML
start_daemon "$TEST_DIR/taskmill.yaml"
wait_ping

wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N" 30
wait_until '[[ $(xpending q.noop) == 0 ]]' 10

assert_eq 0 "$(xpending q.noop)" "XPENDING q.noop taskmill"
assert_eq "$N 0 0" "$(stream_state q.noop)" "acked/pending/undelivered of q.noop"
assert_eq 0 "$(xlen q.noop.dlq)" "XLEN q.noop.dlq"
for outcome in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"noop\",outcome=\"$outcome\"")" \
		"taskmill_tasks_total{outcome=$outcome}"
done

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
