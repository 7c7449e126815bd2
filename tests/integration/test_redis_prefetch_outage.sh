# A Redis lane counts the messages whose settlement is being sent as room
# (the next read need not wait for the XACK reply). When that settlement
# fails (Redis is gone), they hold their room again until it succeeds: the
# prefetch still caps the runs at once, during and after the outage. With
# a pool of 8 and a prefetch of 3, never more than 3 runs at once (from the
# plugin's own journal), every message runs, nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=12
PREFETCH=3
JOURNAL=$TEST_DIR/runs.txt
CONF=$TEST_DIR/taskmill.yaml

priv_redis_start "$TEST_DIR/redis"
# shellcheck disable=SC2034 # read by lib.sh: rcall, write_config, ...
REDIS_PORT=$PRIV_REDIS_PORT # every helper uses the private server now

write_config "$CONF" pool_size=8 <<YAML
tasks:
  held:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.held
    prefetch: $PREFETCH
    config: { path: $JOURNAL, ms: 1500 }
YAML
: >"$JOURNAL"
xadd_bulk q.held "$N" '{"n":%d}'
xids q.held >"$TEST_DIR/ids.all"
start_daemon "$CONF"
wait_ping
wait_metric taskmill_pool_busy '' "$PREFETCH" 20

# Redis goes away while the first runs are under way: they finish, and
# their settlement fails until it comes back (tried every 500 ms).
priv_redis_stop
wait_until '[[ $(metric taskmill_broker_up) == 0 ]]' 10
wait_metric taskmill_pool_busy '' 0 20
sleep 1.5 # several failed settlements
priv_redis_start "$TEST_DIR/redis" "$PRIV_REDIS_PORT"
wait_metric taskmill_broker_up '' 1 20

wait_metric taskmill_tasks_total 'task="held",outcome="success"' "$N" 120
wait_until '[[ $(xpending q.held) == 0 ]]' 20
at_once=$(runs_at_once "$JOURNAL")
note "$(wc -l <"$JOURNAL") runs, at most $at_once at once"
assert_le "$PREFETCH" "$at_once" "most runs at once"
assert_eq "$N" "$(cut -d' ' -f1 "$JOURNAL" | sort -u | wc -l)" "messages run"
assert_eq "$N 0 0" "$(stream_state q.held)" "acked/pending/undelivered of q.held"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
