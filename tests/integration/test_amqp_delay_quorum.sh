# Delayed messages with quorum queues: the delay queues are quorum queues
# (at-least-once dead-lettering back to the task queue); a 2 s delay runs
# no earlier than its time, and within 1 s after it plus margin.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.stamp
OUT=$TEST_DIR/stamps
: >"$OUT"
write_amqp_config "$CONF" amqp='{queue_type: quorum}' <<YAML
tasks:
  stamp:
    plugin: $TM_BUILD/test-plugins/stamp.so
    queue: $Q
    max_retries: 0
    config: { path: $OUT }
YAML
start_daemon "$CONF"
wait_ping "" 60
t0=$(now_ms)
emit_amqp "$CONF" stamp '{"n":"q2"}' --delay 2s >/dev/null
wait_until "grep -q '\"q2\"' '$OUT'" 60
ran=$(awk '{print $1; exit}' "$OUT")
note "ran $((ran - t0)) ms after the emit"
assert_ge 2000 "$((ran - t0))" "not before its time"
assert_le 3500 "$((ran - t0))" "within 1 s after it (plus 0.5 s margin)"
type=$(rabbitctl list_queues name type | awk -v q="$Q.delay.1000ms" '$1 == q {print $2}')
assert_eq quorum "$type" "the delay queue's type"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
assert_eq 0 "$(ready_count "$Q.dlq")" "nothing dead-lettered (parking is no attempt)"
