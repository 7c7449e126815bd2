# A dead letter that Redis refuses is not lost: the message stays pending
# and is dead-lettered once Redis accepts it. Two refusals: the
# dead-letter key holds a string (WRONGTYPE), and Redis is out of memory
# (maxmemory with noeviction: OOM). Each time, while refused, the entry
# stays pending and no dead letter appears; once the cause is gone, exactly
# one dead letter appears and nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  fail: { plugin: fail.so, queue: q.ref, claim_idle: 2s }
YAML
start_daemon "$CONF"
wait_ping

# 1. WRONGTYPE: the dead-letter key is a string
rcall SET q.ref.dlq not-a-stream >/dev/null
id1=$(rcall XADD q.ref '*' body '{"mode":"reject"}')
wait_until "grep -aF '$id1' $DAEMON_LOG | grep -q 'WRONGTYPE'" 20
hold_for 3 "[[ \$(xpending q.ref) == 1 && \$(rcall TYPE q.ref.dlq) == string ]]"
rcall DEL q.ref.dlq >/dev/null
wait_until '[[ $(xlen q.ref.dlq) == 1 ]]' 20
wait_until '[[ $(xpending q.ref) == 0 ]]' 10
dlq1=$(xids q.ref.dlq)
assert_eq "$id1" "$(xfield q.ref.dlq "$dlq1" origin_id)" "origin of the dead letter"
assert_eq '{"mode":"reject"}' "$(xfield q.ref.dlq "$dlq1" body)" "dead letter body"

# 2. OOM: the daemon reads and runs the message, the dead letter is refused
kill -STOP "$DAEMON_PID"
id2=$(rcall XADD q.ref '*' body '{"mode":"reject","n":2}')
redis_oom "$REDIS_PORT" on
kill -CONT "$DAEMON_PID"
wait_until "grep -aF '$id2' $DAEMON_LOG | grep -q 'OOM'" 20
hold_for 3 "[[ \$(xpending q.ref) == 1 && \$(xlen q.ref.dlq) == 1 ]]"
redis_oom "$REDIS_PORT" off
wait_until '[[ $(xlen q.ref.dlq) == 2 ]]' 20
wait_until '[[ $(xpending q.ref) == 0 ]]' 10
hold_for 2 '[[ $(xlen q.ref.dlq) == 2 ]]'
dlq2=$(xids q.ref.dlq | tail -n 1)
assert_eq "$id2" "$(xfield q.ref.dlq "$dlq2" origin_id)" "origin of the second dead letter"
assert_eq 1 "$(xfield q.ref.dlq "$dlq2" attempts)" "attempts of a reject"
daemon_alive || fail "daemon died"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
