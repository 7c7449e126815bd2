# A task that keeps failing with on_error: requeue, max_retries: 2 runs
# exactly three times, the retries spaced by the backoff (300 ms, then
# 600 ms, each plus up to 20% jitter), and is then dead-lettered once with
# attempts 3, its original body and id. Retries never append copies to the
# stream, and nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
BACKOFF=300
SLACK=400 # scheduling slack on top of the jitter ("precise to ~1/4 s")

write_config "$CONF" <<YAML
tasks:
  fail:
    plugin: fail.so
    queue: q.retry
    on_error: requeue
    max_retries: 2
    backoff: ${BACKOFF}ms
    max_backoff: 5s
YAML

start_daemon "$CONF"
wait_ping

body='{"mode":"error","n":1}'
t0=$(now_ms)
id=$(rcall XADD q.retry '*' body "$body")
note "published $id"

wait_until '[[ $(xlen q.retry.dlq) -ge 1 ]]' 20
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' 3 10
wait_until '[[ $(xpending q.retry) == 0 ]]' 10
t1=$(now_ms)

assert_eq 3 "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" "error attempts"
assert_eq 2 "$(metric taskmill_retries_total 'task="fail"')" "taskmill_retries_total"
assert_eq 1 "$(metric taskmill_dead_letter_total 'task="fail"')" "taskmill_dead_letter_total"
for out in success rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"fail\",outcome=\"$out\"")" "outcome $out"
done

# The spacing, from the daemon's per-attempt log lines (stamped when each
# attempt was settled).
mapfile -t att < <(log_attempts "$DAEMON_LOG" "$id")
printf '# %s\n' "${att[@]}" >&2
assert_eq 3 "${#att[@]}" "attempt log lines for $id"
read -r n1 ts1 o1 d1 <<<"${att[0]}"
read -r n2 ts2 o2 d2 <<<"${att[1]}"
read -r n3 ts3 o3 d3 <<<"${att[2]}"
assert_eq "1 2 3" "$n1 $n2 $n3" "attempt numbers (Redis delivery count)"
assert_eq "error error error" "$o1 $o2 $o3" "attempt outcomes"
assert_eq - "$d3" "the third attempt is not retried"
grep -aF " id=$id attempt 3 " "$DAEMON_LOG" | grep -q "dead-lettered to 'q.retry.dlq'" ||
	fail "attempt 3 of $id was not logged as dead-lettered to q.retry.dlq"
# announced delays: backoff * 2^(n-1), plus up to 20% jitter, never less
assert_ge "$BACKOFF" "$d1" "announced delay before attempt 2"
assert_le "$((BACKOFF * 12 / 10))" "$d1" "announced delay before attempt 2"
assert_ge "$((BACKOFF * 2))" "$d2" "announced delay before attempt 3"
assert_le "$((BACKOFF * 2 * 12 / 10))" "$d2" "announced delay before attempt 3"
# measured gaps (10 ms allowance for the millisecond stamps)
gap1=$((ts2 - ts1))
gap2=$((ts3 - ts2))
note "gaps: ${gap1} ms, ${gap2} ms"
assert_ge "$((BACKOFF - 10))" "$gap1" "ms between attempts 1 and 2"
assert_le "$((BACKOFF * 12 / 10 + SLACK))" "$gap1" "ms between attempts 1 and 2"
assert_ge "$((BACKOFF * 2 - 10))" "$gap2" "ms between attempts 2 and 3"
assert_le "$((BACKOFF * 2 * 12 / 10 + SLACK))" "$gap2" "ms between attempts 2 and 3"

# Exactly one dead letter, with every field.
assert_eq 1 "$(xlen q.retry.dlq)" "XLEN q.retry.dlq"
dlq_id=$(xids q.retry.dlq)
fields=$(xfields q.retry.dlq "$dlq_id" | sort | paste -sd ' ')
for f in body task error attempts failed_at origin_id; do
	[[ " $fields " == *" $f "* ]] || fail "DLQ entry lacks field $f (has: $fields)"
done
assert_eq "$body" "$(xfield q.retry.dlq "$dlq_id" body)" "DLQ body"
assert_eq fail "$(xfield q.retry.dlq "$dlq_id" task)" "DLQ task"
assert_eq 3 "$(xfield q.retry.dlq "$dlq_id" attempts)" "DLQ attempts"
assert_eq "$id" "$(xfield q.retry.dlq "$dlq_id" origin_id)" "DLQ origin_id"
assert_ne "" "$(xfield q.retry.dlq "$dlq_id" error)" "DLQ error"
failed_at=$(xfield q.retry.dlq "$dlq_id" failed_at)
assert_match '^[0-9]{13}$' "$failed_at" "DLQ failed_at (epoch ms)"
assert_ge "$((t0 + BACKOFF * 3 - 20))" "$failed_at" "DLQ failed_at (after both backoffs)"
assert_le "$((t1 + 1000))" "$failed_at" "DLQ failed_at"

# The retries claimed the same entry back: no copies, nothing pending.
assert_eq 1 "$(xlen q.retry)" "XLEN q.retry (retries must not append copies)"
assert_eq 0 "$(xpending q.retry)" "XPENDING q.retry"
assert_eq "1 0 0" "$(stream_state q.retry)" "acked/pending/undelivered of q.retry"

# Settled for good: still three attempts after another backoff period.
hold_for 1 '[[ $(metric taskmill_tasks_total '\''task="fail",outcome="error"'\'') == 3 ]]'
assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
