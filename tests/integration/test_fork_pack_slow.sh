# Fork pool packing: a task that has only ever been fast gets its messages
# packed into one worker process's ring, but a burst of its messages that
# arrives while that worker is in none of its usual short runs is spread
# over every worker: 8 runs of 1.5 s on 4 workers take about 3 s, not
# the 12 s they would queued behind each other in one ring.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=4
FAST=200
SLOW=8
MS=1500
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, prefetch: 64 }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"

# the pool learns that the task's runs are short
xadd_bulk q.sleep "$FAST" '{"ms":0,"n":%d}'
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' "$FAST" 60

# the slow burst waits in the stream, unread, then comes in one read
tm pause -c "$CONF" sleep
assert_eq 0 "$TM_RC" "taskmill pause exit status"
wait_metric taskmill_task_paused 'task="sleep"' 1 30
xadd_bulk q.sleep "$SLOW" "{\"ms\":$MS,\"n\":%d}"
tm resume -c "$CONF" sleep
assert_eq 0 "$TM_RC" "taskmill resume exit status"
wait_metric taskmill_task_paused 'task="sleep"' 0 30
t0=$(now_ms)
wait_metric taskmill_tasks_total 'task="sleep",outcome="success"' \
	$((FAST + SLOW)) 60
took=$(($(now_ms) - t0))
note "$SLOW runs of $MS ms on $POOL workers took $took ms"
# two rounds of POOL parallel runs: 2 * MS; one worker alone: SLOW * MS
assert_le $((MS * SLOW / 2 + 1000)) "$took" \
	"ms for the slow burst (spread over the workers)"
assert_eq 0 "$(xpending q.sleep)" "entries left pending"

stop_daemon 15
