# A connection lost while a read sent ahead is in flight: the lane drops
# it, reconnects and reads on; the entries of that read, pending on this
# consumer and held by nobody, are reclaimed once idle past claim_idle
# (2 s here). Every entry runs and nothing stays pending.
#
# Behind a proxy that delays every chunk by 100 ms, the intake connection
# is cut until a cut finds a read ahead in flight (the lane logs that
# read's failure as "XREADGROUP (read ahead)").
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

N=3000
FLOWLOG=$TM_BUILD/test-plugins/flowlog.so
J=$TEST_DIR/runs.txt
CONF=$TEST_DIR/taskmill.yaml

fault_proxy_start P "$REDIS_PORT"
fault_proxy P "delay 100"
REDIS_PORT=$FAULT_PORT_P write_config "$CONF" instance=w1 <<YAML
tasks:
  ahead: { plugin: $FLOWLOG, queue: q.ac, prefetch: 256, claim_idle: 2s, config: { path: $J } }
YAML
xadd_bulk q.ac "$N" '{"n":%d}'
xids q.ac >"$TEST_DIR/ids.txt"
start_daemon "$CONF"
wait_ping

caught=0
for ((i = 1; i <= 30; i++)); do
	wait_until "[[ -s $J ]]" 30
	fault_proxy P cut
	if grep -aq 'XREADGROUP (read ahead):' "$DAEMON_LOG"; then
		caught=1
		break
	fi
	wait_metric taskmill_broker_up '' 1 30
	sleep 0.$((RANDOM % 10))
done
note "cuts: $i; runs so far: $(wc -l <"$J")"
((caught)) || fail "no cut found a read ahead in flight"

wait_all_ran "$TEST_DIR/ids.txt" "$J" q.ac 60 "the cut"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
