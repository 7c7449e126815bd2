# A retry survives a crash of the daemon, and keeps its time. Attempt 1
# fails with a 4 s backoff; the daemon is killed with SIGKILL at once and
# started again under the same instance name. The waiting entry is not run
# early by the restart (its history read skips entries waiting for a
# retry), and it does run once its time has come.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" instance=w1 <<YAML
tasks:
  fail:
    plugin: fail.so
    queue: q.rk
    on_error: requeue
    max_retries: 1
    backoff: 4s
    max_backoff: 4s
YAML
start_daemon "$CONF"
wait_ping
LOG1=$DAEMON_LOG

id=$(rcall XADD q.rk '*' body '{"mode":"error"}')
wait_until "grep -aF ' id=$id attempt 1 ' $LOG1 | grep -q 'retry in'" 20
read -r _ ts1 _ d1 <<<"$(log_attempts "$LOG1" "$id" | head -n 1)"
due=$((ts1 + d1))
note "attempt 1 at $ts1, retry due at $due"
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=

start_daemon "$CONF"
wait_ping
wait_until "grep -aqF ' id=$id attempt 2 ' $DAEMON_LOG" 30
read -r n2 ts2 _ _ <<<"$(log_attempts "$DAEMON_LOG" "$id" | head -n 1)"
note "attempt $n2 at $ts2 (due $due)"
assert_eq 2 "$n2" "first attempt after the restart"
# settled no earlier than due (the log stamps the end of the run; 50 ms
# for clock granularity)
assert_ge "$((due - 50))" "$ts2" "attempt 2 not before its due time"
wait_until '[[ $(xlen q.rk.dlq) == 1 ]]' 10
wait_until '[[ $(xpending q.rk) == 0 ]]' 10
assert_eq 2 "$(xfield q.rk.dlq "$(xids q.rk.dlq)" attempts)" "DLQ attempts"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
