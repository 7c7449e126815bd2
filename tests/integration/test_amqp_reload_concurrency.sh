# RabbitMQ: concurrency is a hard cap across a reload. A SIGHUP that
# gives the task a new generation (its timeout changed) while 2 runs of
# concurrency 2 are under way starts no third run: from the plugin's
# journal of start and end times, never more than 2 at once.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
N=8
Q=$AQ.capped
JOURNAL=$TEST_DIR/runs.txt
CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
conf() { # TIMEOUT
	write_amqp_config "$CONF" pool_size=8 http_port="$HTTP_PORT" <<YAML
tasks:
  capped:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: $Q
    prefetch: 16
    concurrency: 2
    timeout: $1
    config: { path: $JOURNAL, ms: 2500 }
YAML
}
# runs_at_once JOURNAL: the most runs in progress at once ("<id>
# <attempt> <start_us> <end_us> <task>" lines)
runs_at_once() {
	awk '{ print $3, 1; print $4, 0 }' "$1" | sort -k1,1n -k2,2n | awk '
		{ if ($2 == 1) { n++; if (n > best) best = n } else n-- }
		END { print best + 0 }'
}
conf 30s
# emit declares the topology
emit_amqp "$CONF" capped '{"n":0}' >/dev/null
amqptool publish "$Q" $((N - 1)) '{"n":%d}' >/dev/null
start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_inflight 'task="capped"' 2 30
conf 20s
kill -HUP "$DAEMON_PID"
wait_metric taskmill_config_generation '' 2 30
wait_metric taskmill_tasks_total 'task="capped",outcome="success"' "$N" 120
assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs journaled"
at_once=$(runs_at_once "$JOURNAL")
note "$at_once runs at once"
assert_eq 2 "$at_once" "most runs at once across the reload"
stop_daemon
