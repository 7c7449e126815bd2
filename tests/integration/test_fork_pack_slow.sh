# Fork pool packing: a task that has only ever been fast gets its messages
# packed into one worker process's ring, but a burst of its messages that
# arrives while that worker is in none of its usual short runs is spread
# over every worker: 8 runs of 1.5 s run side by side on 4 workers (about
# 3 s), not queued behind each other in one ring (12 s).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=4
FAST=200
SLOW=8
MS=1500
CONF=$TEST_DIR/taskmill.yaml

fork_sleep_daemon "$CONF" "$POOL" 64

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
# how many workers hold messages at once while the burst runs (a worker
# with messages out counts as busy): all 8 in one ring would show 1
most=0
while (($(metric taskmill_tasks_total 'task="sleep",outcome="success"') < FAST + SLOW)); do
	b=$(metric taskmill_pool_busy) || b=0
	((b > most)) && most=$b
	daemon_alive || fail "the daemon exited during the burst"
	(($(now_ms) - t0 < 60000)) || fail "the slow burst did not finish within 60 s"
	sleep 0.1
done
took=$(($(now_ms) - t0))
note "$SLOW runs of $MS ms on $POOL workers took $took ms, at most $most workers busy at once"
# the time is reported only (shared machine); what proves the spread is
# that the workers held the burst's messages side by side
assert_ge $((POOL - 1)) "$most" "workers busy at once with the slow burst"
assert_eq 0 "$(xpending q.sleep)" "entries left pending"

stop_daemon 15
