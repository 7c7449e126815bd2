# A dead letter whose reply is lost is not written twice. The message
# fails (on_error: reject) after a 3 s run; meanwhile the proxy between
# daemon and Redis starts holding Redis's replies, so the dead-letter
# script runs but its reply never arrives; then the proxy resets every
# connection. The daemon reconnects and settles the message again: the
# dead-letter script finds the entry no longer pending and adds nothing.
# One dead letter, nothing pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

JOURNAL=$TEST_DIR/runs.txt
FLAKY=$TM_BUILD/test-plugins/flaky.so
[[ -f $FLAKY ]] || fail "$FLAKY not built (make test-plugins)"
fault_proxy_start r "$REDIS_PORT"
CONF=$TEST_DIR/taskmill.yaml
REAL_PORT=$REDIS_PORT
REDIS_PORT=$FAULT_PORT_r write_config "$CONF" <<YAML
tasks:
  flaky:
    plugin: $FLAKY
    queue: q.lost
    on_error: reject
    config: { path: "$JOURNAL" }
YAML
assert_eq "$REAL_PORT" "$REDIS_PORT" "tests talk to Redis directly"
start_daemon "$CONF"
wait_ping

id=$(rcall XADD q.lost '*' body '{"first_ms":3000}')
wait_until "grep -q '^$id 1\$' $JOURNAL" 20
fault_proxy r "blackhole down"
note "holding Redis's replies while attempt 1 runs"
wait_until '[[ $(xlen q.lost.dlq) == 1 ]]' 20
note "the dead-letter script ran; its reply is held"
fault_proxy r cut
wait_ping "$HTTP_PORT" 30
wait_until '[[ $(xpending q.lost) == 0 ]]' 20
hold_for 3 '[[ $(xlen q.lost.dlq) == 1 ]]'
assert_eq "$id" "$(xfield q.lost.dlq "$(xids q.lost.dlq)" origin_id)" "dead letter origin"
assert_eq 1 "$(grep -c "^$id " "$JOURNAL")" "runs"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
