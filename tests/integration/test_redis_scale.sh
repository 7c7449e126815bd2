# Intake that does not grow with tasks: one daemon with 500 noop tasks
# holds a bounded number of Redis connections and threads (one intake
# lane per consumer group, plus settlement, wake-ups, monitoring and the
# fleet's announcements and history),
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
# lane, settlement, wake-ups, depth reads (monitoring), the fleet thread
assert_le 5 "$conns" "Redis connections of a daemon with $NTASKS tasks"
# 8 beyond the pool, the thread pool's deadline watchdog (a task has a
# timeout: the default) and the fleet thread
assert_le $((POOL + 10)) "$threads" "threads of a daemon with $NTASKS tasks (pool of $POOL)"
# memory that does not grow with tasks either: the 500 tasks of noop.so
# share one loaded copy of it (one set of segments, not 500)
maps=$(cat "/proc/$DAEMON_PID/maps")
copies=$(grep -c 'memfd:taskmill-plugin:noop.so' <<<"$maps" || true)
note "noop.so mapped in $copies segment(s)"
assert_le 5 "$copies" "mappings of noop.so for $NTASKS tasks"
# the tasks' rate and duration windows (5 KiB each) stay zero pages
# until a task completes something (5 did): the daemon's own memory,
# anonymous pages, was 9.5 MiB for 500 tasks with a window and a plugin
# copy each, and is under 3 MiB without (a sanitizer's shadow memory
# makes the figure meaningless there)
anon=$(awk '/^Anonymous:/ { print $2 }' "/proc/$DAEMON_PID/smaps_rollup")
note "anonymous memory $anon KiB"
if ! ldd "$TM_BIN" | grep -E 'lib(a|t)san' >/dev/null; then
	assert_le 6144 "$anon" "anonymous memory (KiB) of a daemon with $NTASKS tasks"
fi
# and the commands an idle daemon sends do not grow with tasks either:
# pause reads, the delayed-message promoter and the depth reads take one
# command per chunk of tasks (the promoter sent one per task, 1,000/s
# for 500 tasks). Commands scripts run inside Redis show as "lua".
cmds=$(timeout 3 redis-cli -h 127.0.0.1 -p "$PRIV_REDIS_PORT" MONITOR 2>/dev/null |
	awk '/^[0-9.]+ \[[0-9]+ [0-9.]+:[0-9]+\]/ { n++ } END { print n + 0 }' || true)
note "$cmds commands sent to Redis in 3 s by an idle daemon with $NTASKS tasks"
assert_le 150 "$cmds" "commands in 3 s of an idle daemon with $NTASKS tasks"
stop_daemon
true
