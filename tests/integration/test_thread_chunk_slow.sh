# Thread pool chunks under sudden slowness: a worker takes queued messages
# in chunks (up to 64 under one lock), and a task whose runs turn slow
# while a worker holds a chunk must not keep the rest of that chunk
# waiting behind it while the other workers sit idle. The pool learns
# that the task is fast (WARM runs of 0 ms), then a burst lands in one
# read: SLOW runs of MS ms first, then FAST runs of 0 ms, so that the
# first worker's chunk (an eighth of the queue with 4 workers) holds
# exactly the slow ones. The worker hands back the unstarted rest of its
# chunk once a run has taken long, and the idle workers take it: from the
# plugin's own journal of start and end times, POOL slow runs were in
# progress at once (1 before: the whole chunk ran on one worker, one run
# after the other). The time is reported only.
# Then the order: one worker, a chunk whose first run is slow; what it
# hands back goes to the head of the queue, in order, so the runs follow
# the stream's order (handed back behind the queue, the rest of the
# chunk would run after the messages queued behind it).
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

POOL=4
WARM=200
SLOW=16
FAST=$((SLOW * POOL * 2 - SLOW))
MS=300
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/runs.txt

# turn_config FILE POOL QUEUE PREFETCH: the task "turn" on flowlog.so,
# journaling to $JOURNAL
turn_config() {
	write_config "$1" pool_size="$2" <<YAML
tasks:
  turn:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: $3
    prefetch: $4
    config: { path: $JOURNAL }
YAML
}

turn_config "$CONF" "$POOL" q.turn 256

start_daemon "$CONF"
wait_ping

# the pool learns that the task's runs are short
xadd_bulk q.turn "$WARM" '{"ms":0,"n":%d}'
wait_metric taskmill_tasks_total 'task="turn",outcome="success"' "$WARM" 60

# the burst waits in the stream, unread, then comes in one read
tm pause -c "$CONF" turn
assert_eq 0 "$TM_RC" "taskmill pause exit status"
wait_metric taskmill_task_paused 'task="turn"' 1 30
xadd_bulk q.turn "$SLOW" "{\"ms\":$MS,\"n\":%d}"
xadd_bulk q.turn "$FAST" '{"ms":0,"n":%d}'
t0=$(now_ms)
tm resume -c "$CONF" turn
assert_eq 0 "$TM_RC" "taskmill resume exit status"
total=$((WARM + SLOW + FAST))
wait_metric taskmill_tasks_total 'task="turn",outcome="success"' "$total" 120
took=$(($(now_ms) - t0))

assert_eq "$total" "$(wc -l <"$JOURNAL")" "runs journaled"
# the slow runs: 100 ms or more (an awk condition)
# shellcheck disable=SC2016
most=$(runs_at_once "$JOURNAL" '$4 - $3 >= 100000')
note "$SLOW runs of $MS ms among $FAST fast ones on $POOL workers took $took ms, at most $most slow runs at once"
assert_eq "$POOL" "$most" "slow runs in progress at once"
assert_eq 0 "$(xpending q.turn)" "entries left pending"
assert_eq 0 "$(metric taskmill_retries_total)" "retries"

stop_daemon 15

JOURNAL=$TEST_DIR/order.txt
CONF=$TEST_DIR/order.yaml
HTTP_PORT=
N=32
turn_config "$CONF" 1 q.order 64
# a chunk of N/2 (half the queue with one worker): 2 runs of 50 ms first
xadd_bulk q.order 2 '{"ms":50,"n":%d}'
xadd_bulk q.order $((N - 2)) '{"ms":0,"n":%d}'
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="turn",outcome="success"' "$N" 60
ran=$(awk '{ print $1 }' "$JOURNAL")
assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs journaled (one worker)"
assert_eq "$(xids q.order)" "$ran" "ids in the order they ran (one worker)"
stop_daemon 15
