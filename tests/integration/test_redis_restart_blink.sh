# Redis restarts while a daemon is idle (shut down and started again on the
# same port at once). Every connection of the daemon then holds a socket
# that the old server closed. The intake finds it first (its blocking read
# ends) and reconnects: one reconnect. The settle link finds it on its next
# use, when a message is acknowledged; that link reconnects at once and,
# since the new connection works, does not mark the broker down: /ping does
# not turn 503 again after it came back, and taskmill_broker_reconnects_total
# counts the one outage once.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
priv_redis_start "$TEST_DIR/redis"
# shellcheck disable=SC2034 # read by lib.sh: rcall, write_config, ...
REDIS_PORT=$PRIV_REDIS_PORT

write_config "$CONF" pool_size=2 <<YAML
tasks:
  ok:
    plugin: noop.so
    queue: q.blink
    prefetch: 8
YAML
start_daemon "$CONF"
wait_ping
# the settle link is open and used once before the restart
xadd_bulk q.blink 5 '{"n":%d}'
wait_metric taskmill_tasks_total 'task="ok",outcome="success"' 5 20
wait_until '[[ $(xpending q.blink) == 0 ]]' 20
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects before the restart"

for round in 1 2 3; do
	priv_redis_stop
	priv_redis_start "$TEST_DIR/redis" "$PRIV_REDIS_PORT"
	wait_metric taskmill_broker_reconnects_total '' "$round" 20
	wait_ping "$HTTP_PORT" 20
	# the daemon is idle: the settle link still holds the old socket
	xadd_bulk q.blink 5 '{"n":%d}'
	wait_metric taskmill_tasks_total 'task="ok",outcome="success"' $((5 + 5 * round)) 20
	wait_until '[[ $(xpending q.blink) == 0 ]]' 20
	assert_eq 1 "$(metric taskmill_broker_up)" "taskmill_broker_up after round $round"
	assert_eq "$round" "$(metric taskmill_broker_reconnects_total)" \
		"reconnects after $round restart(s) (the settle link's reconnect is no outage)"
done
stop_daemon
