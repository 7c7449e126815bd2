# An idle daemon with 500 tasks watches its sets through the due-time
# index (docs/redis.md, Idle cost) and is still on time: a message
# emitted with --delay 2s runs no earlier than due and within 1 s after,
# so does one a producer adds with ZADD and its index entry; a retry 2 s
# off runs no earlier and within 1 s after its time (plus the backoff
# jitter); a pause by another process is noticed within the documented
# bound (two pause-read periods, 2 s); and the depth gauges are right on
# the first scrape after a change (read on scrape, not every 5 s).
# Bounds from the contract, measured from Redis' own entry ids.
. "$TM_SRCDIR/tests/integration/lib.sh"

NTASKS=500
priv_redis_start
HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
{
	echo "broker: { url: redis://127.0.0.1:$PRIV_REDIS_PORT/0 }"
	echo "pool: { kind: thread, size: 2 }"
	echo "plugin_dir: $TM_PLUGINS"
	echo "http: { listen: 127.0.0.1:$HP }"
	echo "log: { level: debug }"
	echo "tasks:"
	echo "  fail: { plugin: fail.so, queue: q.idle.fail, on_error: requeue, max_retries: 1, backoff: 2s }"
	for ((i = 0; i < NTASKS - 1; i++)); do
		echo "  t$i: { plugin: noop.so, queue: q.idle.$i }"
	done
} >"$CONF"

start_daemon "$CONF"
wait_ping "$HP" 120
wait_until "grep -q 'ready: every task is subscribed' '$DAEMON_LOG'" 60
sleep 2 # the first rounds (every set looked at once) are over

# the ms time of the first entry of stream $1
first_ms() {
	priv_rcli XRANGE "$1" - + COUNT 1 | sed -n 1p | cut -d- -f1
}

# --- emit --delay 2s: promoted within [due, due + 1 s]
before=$(now_ms)
tm emit -c "$CONF" t137 '{"n":1}' --delay 2s
assert_eq 0 "$TM_RC" "emit --delay 2s"
after=$(now_ms)
wait_until "[[ \$(priv_rcli XLEN q.idle.137) -ge 1 ]]" 10
at=$(first_ms q.idle.137)
note "emit --delay 2s: due in [$((before + 2000)), $((after + 2000))], entry at $at"
assert_le "$at" $((before + 2000)) "delayed message not before its time"
assert_le $((after + 3000)) "$at" "delayed message within 1 s of its time"

# --- a producer's ZADD with the set's index entry (docs/producers.md)
due=$(($(now_ms) + 2000))
priv_rcli ZADD q.idle.300.scheduled "$due" '{"id":"p1","body":{}}' >/dev/null
priv_rcli ZADD taskmill.due LT "$due" q.idle.300.scheduled >/dev/null
wait_until "[[ \$(priv_rcli XLEN q.idle.300) -ge 1 ]]" 10
at=$(first_ms q.idle.300)
note "producer ZADD due $due, entry at $at"
assert_le "$at" "$due" "producer's delayed message not before its time"
assert_le $((due + 1000)) "$at" "producer's delayed message within 1 s of its time"

# --- a retry 2 s (+ up to 20% jitter) after the failed first attempt
id=$(priv_rcli XADD q.idle.fail '*' body '{"mode":"error"}')
wait_until "[[ \$(priv_rcli XLEN q.idle.fail.dlq) -ge 1 ]]" 15
dl=$(priv_rcli XRANGE q.idle.fail.dlq - + COUNT 1 | sed -n 1p)
failed=$(priv_rcli XRANGE q.idle.fail.dlq - + COUNT 1 | tr -d '\r' |
	awk 'f { print; exit } $0 == "failed_at" { f = 1 }')
added=${id%%-*}
note "retry: first delivered at $added, second attempt failed at $failed (dlq $dl)"
assert_le "$failed" $((added + 2000)) "retry not before its time"
assert_le $((added + 2400 + 1000)) "$failed" "retry within 1 s of its time (jitter 20%)"

# --- a pause by another process (the CLI) is noticed within 2 s
tm pause -c "$CONF" t5
assert_eq 0 "$TM_RC" "pause t5"
# (2 s, plus the CLI's own start as slack)
wait_until "grep -q 'broker:redis:t5\] paused' '$DAEMON_LOG'" 3
priv_rcli XADD q.idle.5 '*' body '{}' >/dev/null
priv_rcli XADD q.idle.5 '*' body '{}' >/dev/null
priv_rcli XADD q.idle.5 '*' body '{}' >/dev/null

# --- the depth gauges on the first scrape after the change
assert_eq 3 "$(metric taskmill_queue_depth 'task="t5"')" "taskmill_queue_depth of the paused task, first scrape"
assert_eq 0 "$(metric taskmill_queue_depth 'task="t137"')" "taskmill_queue_depth of a drained task"
tm emit -c "$CONF" t7 '{"n":1}' --delay 1h
tm emit -c "$CONF" t7 '{"n":2}' --delay 2h
sleep 5 # past the read floor: the next scrape reads again
assert_eq 2 "$(metric taskmill_scheduled_depth 'task="t7"')" "taskmill_scheduled_depth, first scrape after two emits"
assert_eq 2 "$(curl -s "http://127.0.0.1:$HP/status" | jq '.tasks.t7.scheduled')" "/status scheduled"
tm resume -c "$CONF" t5
wait_until "[[ \$(priv_rcli XPENDING q.idle.5 taskmill | head -1) == 0 && \$(metric taskmill_tasks_total 'task=\"t5\",outcome=\"success\"') == 3 ]]" 10
stop_daemon
true
