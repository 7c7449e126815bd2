# Intake that does not grow with tasks: one daemon with 500 noop tasks
# holds a bounded number of Redis connections and threads (one intake
# lane per consumer group, plus settlement, wake-ups and monitoring),
# whatever the count of tasks, and still processes messages on tasks
# spread over the set. Bounds only, no timing: the figures (idle commands
# per second, CPU, throughput) are make bench's.
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

NTASKS=500
POOL=2
priv_redis_start
HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
{
	echo "broker: { url: redis://127.0.0.1:$PRIV_REDIS_PORT/0 }"
	echo "pool: { kind: thread, size: $POOL }"
	echo "plugin_dir: $TM_PLUGINS"
	echo "http: { listen: 127.0.0.1:$HP }"
	echo "log: { level: info }"
	echo "tasks:"
	for ((i = 0; i < NTASKS; i++)); do
		echo "  t$i: { plugin: noop.so, queue: q.scale.$i }"
	done
} >"$CONF"

start_daemon "$CONF"
wait_ping "$HP" 120

# messages on tasks across the set are processed
for i in 0 1 137 250 499; do
	priv_rcli XADD "q.scale.$i" '*' body '{}' >/dev/null
done
wait_metric taskmill_tasks_total 'outcome="success"' 5 60

# let it idle a moment, then count (monitoring reads included: /status
# opens the depth connection)
http_code /status >/dev/null
sleep 2
# CLIENT LIST itself runs on one connection, which is ours
conns=$(($(priv_rcli CLIENT LIST | wc -l) - 1))
threads=$(ls "/proc/$DAEMON_PID/task" | wc -l)
note "$NTASKS tasks, pool of $POOL: $conns Redis connections, $threads threads"
priv_rcli CLIENT LIST | sed 's/^/#   /' >&2
assert_le 4 "$conns" "Redis connections of a daemon with $NTASKS tasks"
assert_le $((POOL + 8)) "$threads" "threads of a daemon with $NTASKS tasks (pool of $POOL)"
stop_daemon
true
