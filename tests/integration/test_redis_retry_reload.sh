# A retry scheduled before a reload still runs after it. A task fails its
# first attempt with a 3 s backoff; a SIGHUP that adds a task arrives while
# the retry waits. The retry schedule lives in Redis (the sorted set
# <queue>.retry.<group>), so the reloaded daemon claims the entry back when
# it is due: attempt 2 runs about 3 s after attempt 1, then attempt 3, then
# the entry is dead-lettered and nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
task_fail() {
	cat <<YAML
tasks:
  fail:
    plugin: fail.so
    queue: q.rr
    on_error: requeue
    max_retries: 2
    backoff: 3s
    max_backoff: 3s
YAML
}
write_config "$CONF" instance=w1 < <(task_fail)
start_daemon "$CONF"
wait_ping

id=$(rcall XADD q.rr '*' body '{"mode":"error"}')
note "published $id"
wait_until "grep -aF ' id=$id attempt 1 ' $DAEMON_LOG | grep -q 'retry in'" 20

# reload with one task added while the retry waits
write_config "$CONF" instance=w1 "http_port=$HTTP_PORT" < <(
	task_fail
	echo "  noop: { plugin: noop.so, queue: q.rr.other }"
)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
note "reloaded"

# attempt 2 runs (3 s backoff, up to 20% jitter, generous slack)
wait_until "grep -aqF ' id=$id attempt 2 ' $DAEMON_LOG" 20
wait_until "grep -aqF ' id=$id attempt 3 ' $DAEMON_LOG" 20
wait_until '[[ $(xlen q.rr.dlq) == 1 ]]' 10
wait_until '[[ $(xpending q.rr) == 0 ]]' 10
assert_eq 3 "$(xfield q.rr.dlq "$(xids q.rr.dlq)" attempts)" "DLQ attempts"
assert_eq 0 "$(rcall ZCARD q.rr.retry.taskmill)" "retry set left empty"

# the spacing holds across the reload
mapfile -t att < <(log_attempts "$DAEMON_LOG" "$id")
printf '# %s\n' "${att[@]}" >&2
read -r _ ts1 _ d1 <<<"${att[0]}"
read -r _ ts2 _ _ <<<"${att[1]}"
assert_ge "$((d1 - 10))" "$((ts2 - ts1))" "ms between attempts 1 and 2"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
