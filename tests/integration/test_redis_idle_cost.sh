# What an idle daemon costs Redis: 500 idle tasks (each with a retry set
# and a scheduled set it must watch, a pause key and depth gauges) send
# at most 20 commands a second and hold at most 8 connections, a cost
# that does not grow with tasks (docs/redis.md, Idle cost). Counted by
# Redis itself, INFO commandstats over 10 s: commands that scripts run
# inside Redis count, they are the server's work. Counts, not timings:
# the contract figure is asserted as it is.
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
	echo "log: { level: info }"
	echo "tasks:"
	for ((i = 0; i < NTASKS; i++)); do
		echo "  t$i: { plugin: noop.so, queue: q.idle.$i }"
	done
} >"$CONF"

# one delayed message far in the future: the index holds a member that
# is not due, as a busy deployment's would
priv_rcli ZADD q.idle.7.scheduled $(($(date +%s%3N) + 3600000)) \
	'{"id":"later","body":{}}' >/dev/null

start_daemon "$CONF"
wait_ping "$HP" 120
# a message on a task of the set runs: the daemon reads them all
priv_rcli XADD q.idle.250 '*' body '{}' >/dev/null
wait_metric taskmill_tasks_total 'outcome="success"' 1 60
# settled: the first rounds (a look at every set) are over
sleep 3

priv_rcli CONFIG RESETSTAT >/dev/null
sleep 10
stats=$(priv_rcli INFO commandstats | tr -d '\r')
total=$(awk -F'[:=,]' '/^cmdstat_/ { n += $3 } END { print n + 0 }' <<<"$stats")
# CONFIG RESETSTAT and INFO are this test's own
own=$(awk -F'[:=,]' '/^cmdstat_(config|info)[:|]/ { n += $3 } END { print n + 0 }' <<<"$stats")
total=$((total - own))
note "$NTASKS idle tasks: $total commands to Redis in 10 s:"
grep '^cmdstat_' <<<"$stats" | sed 's/^/#   /' >&2
conns=$(($(priv_rcli CLIENT LIST | wc -l) - 1))
note "$conns Redis connections"
assert_le 200 "$total" "Redis commands in 10 s of $NTASKS idle tasks (20/s)"
assert_le 8 "$conns" "Redis connections of $NTASKS idle tasks"
stop_daemon
true
