# concurrency is a hard cap across a reload: a SIGHUP that gives the task
# a new generation (its timeout changed) while its runs are under way
# starts no run of the new generation beyond what the old one's running
# runs leave of the cap. From the plugin's journal of start and end
# times: never more than 2 runs at once, in the thread pool and in the
# fork pool, and every message runs once.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=8
for kind in thread fork; do
	note "pool kind $kind"
	JOURNAL=$TEST_DIR/runs.$kind.txt
	CONF=$TEST_DIR/$kind.yaml
	HTTP_PORT=
	# conf TIMEOUT: the config, the capped task with this timeout
	conf() {
		write_config "$CONF" pool_kind=$kind pool_size=8 http_port="$HTTP_PORT" <<YAML
tasks:
  capped:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.capped.$kind
    prefetch: 16
    concurrency: 2
    timeout: $1
    config: { path: $JOURNAL, ms: 2500 }
YAML
	}
	conf 30s
	xadd_bulk "q.capped.$kind" "$N" '{"n":%d}'
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_inflight 'task="capped"' 2 30
	# the old generation holds 2 runs of about 2.5 s: the new one may
	# start none until they end
	conf 20s
	kill -HUP "$DAEMON_PID"
	wait_metric taskmill_config_generation '' 2 30
	grep -q 'changed: capped\|1 changed' "$DAEMON_LOG" ||
		note "(the reload line does not list capped as changed)"
	wait_metric taskmill_tasks_total 'task="capped",outcome="success"' "$N" 120
	assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs journaled ($kind)"
	assert_eq "" "$(awk '$2 != 1' "$JOURNAL" | head -n 3)" "runs past their first attempt ($kind)"
	at_once=$(runs_at_once "$JOURNAL")
	note "$kind: $at_once runs at once"
	assert_eq 2 "$at_once" "most runs at once across the reload ($kind)"
	assert_eq 0 "$(metric taskmill_retries_total)" "retries ($kind)"
	stop_daemon
done
