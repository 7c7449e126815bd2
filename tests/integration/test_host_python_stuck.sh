# The Python host in the thread pool: a run blocked in C code that does
# not look at the deadline (time.sleep(4) under a 1 s timeout: the host's
# taskmill.Stopped takes effect between two bytecodes only) is settled at
# its deadline as `timeout` all the same, its worker replaced (a new
# worker init for the Python task) while the call sleeps, and the pool
# goes on running Python runs; when the sleep ends, the call's thread
# leaves without a second settlement.
CONF=$TEST_DIR/taskmill.yaml
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
[[ -f $TM_PLUGINS/python.so ]] || fail "python.so not built (python3-dev)"
MODDIR=$TEST_DIR/pymod
mkdir -p "$MODDIR"
cat >"$MODDIR/sleeper.py" <<'PY'
import time


def run(body, ctx):
    time.sleep(body["s"])
    return {"slept": body["s"]}
PY
write_config "$CONF" pool_size=2 shutdown_timeout=5s <<YAML
tasks:
  py:
    plugin: python.so
    queue: q.py
    on_error: reject
    timeout: 1s
    config: { module: sleeper, path: [$MODDIR] }
YAML
start_daemon "$CONF"
wait_ping

t0=$(now_ms)
id=$(rcall XADD q.py '*' body '{"s":4}')
wait_metric taskmill_tasks_total 'task="py",outcome="timeout"' 1 15
t1=$(now_ms)
note "settled as timeout $((t1 - t0)) ms after publishing"
assert_le 3000 "$((t1 - t0))" "ms to the timeout (limit 1000 ms, a sleep of 4 s)"
wait_until '[[ $(xlen q.py.dlq) == 1 ]]' 10
dlq_id=$(xids q.py.dlq)
assert_eq "$id" "$(xfield q.py.dlq "$dlq_id" origin_id)" "dead letter origin_id"
assert_eq "timeout: ran past the limit of 1000 ms; still running" \
	"$(xfield q.py.dlq "$dlq_id" error)" "dead letter error"
assert_eq 1 "$(metric taskmill_runs_stuck 'task="py"')" "taskmill_runs_stuck"
wait_metric taskmill_worker_restarts_total '' 1 10

# Python runs go on beside the sleeping call
for i in 1 2 3; do
	rcall XADD q.py '*' body '{"s":0}' >/dev/null
done
wait_metric taskmill_tasks_total 'task="py",outcome="success"' 3 10

# the sleep ends: the thread leaves, nothing is settled again
wait_metric taskmill_runs_stuck 'task="py"' 0 15
wait_metric taskmill_pool_busy '' 0 10
sleep 1
assert_eq 1 "$(xlen q.py.dlq)" "dead letters"
assert_eq 1 "$(metric taskmill_tasks_total 'task="py",outcome="timeout"')" "timeouts"
assert_eq 0 "$(metric taskmill_tasks_total 'task="py",outcome="error"')" "errors"
assert_eq 3 "$(metric taskmill_tasks_total 'task="py",outcome="success"')" "successes"
assert_eq 0 "$(xpending q.py)" "pending of q.py"

rc=0
stop_daemon 15 || rc=$?
assert_eq 0 "$rc" "exit status"
