# A read sent ahead and still in flight at a reload is taken in, and its
# entries run at once: none is left pending, held by nobody, until
# claim_idle (60 s here) lets a reclaim round take it.
#
# A lane whose last read came back full sends the next XREADGROUP before
# it hands the entries of that one to the pool, and reads its reply at its
# next fetch. Behind a proxy that delays every chunk by 100 ms, that reply
# is on its way much of the time; the daemon is reloaded (SIGHUP) until a
# stop finds a read ahead in flight (its debug line). Every published
# entry must then run within 30 s, and nothing stay pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

N=3000
FLOWLOG=$TM_BUILD/test-plugins/flowlog.so
J=$TEST_DIR/runs.txt
CONF=$TEST_DIR/taskmill.yaml

fault_proxy_start P "$REDIS_PORT"
fault_proxy P "delay 100"
conf() {
	REDIS_PORT=$FAULT_PORT_P write_config "$CONF" instance=w1 \
		"http_port=${HTTP_PORT:-}" <<YAML
tasks:
  ahead: { plugin: $FLOWLOG, queue: q.ahead, prefetch: 256, claim_idle: 60s, config: { path: $J, tag: "$1" } }
YAML
}
conf 1
xadd_bulk q.ahead "$N" '{"n":%d}'
xids q.ahead >"$TEST_DIR/ids.txt"
start_daemon "$CONF"
wait_ping

caught=0
for ((gen = 2; gen <= 30; gen++)); do
	wait_until "[[ -s $J ]]" 30
	conf "$gen"
	kill -HUP "$DAEMON_PID"
	wait_until "grep -q 'as configuration $gen' $DAEMON_LOG" 30
	if grep -aq 'a read ahead was in flight at the stop' "$DAEMON_LOG"; then
		caught=1
		break
	fi
	(($(xlen q.ahead) > 0)) || break
done
note "reloads: $((gen - 1)); runs so far: $(wc -l <"$J")"
((caught)) || fail "no reload found a read ahead in flight"

# every entry runs well before claim_idle, and nothing stays pending
wait_all_ran "$TEST_DIR/ids.txt" "$J" q.ahead 30 "the reload"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
