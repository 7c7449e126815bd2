# Delayed messages with quorum queues: the delay queues are quorum queues
# (at-least-once dead-lettering back to the task queue); a 2 s delay runs
# no earlier than its time, and within 1 s after it plus margin.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
delay_start task='max_retries: 0' amqp='{queue_type: quorum}'
delay_run_after q2 2s
assert_ge 2000 "$RAN_AFTER" "not before its time"
assert_le 3500 "$RAN_AFTER" "within 1 s after it (plus 0.5 s margin)"
type=$(rabbitctl list_queues name type | awk -v q="$Q.delay.1000ms" '$1 == q {print $2}')
assert_eq quorum "$type" "the delay queue's type"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
assert_eq 0 "$(ready_count "$Q.dlq")" "nothing dead-lettered (parking is no attempt)"
