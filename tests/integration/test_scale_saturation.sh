# taskmill_pool_saturation: busy workers over the pool's size, sampled
# each second by the daemon and averaged over 60 s. An idle daemon shows
# 0; one whose pool a sleep task keeps busy from its start shows about 1
# after a few seconds. The same figure is the pool's "saturation" in
# /status.
. "$TM_SRCDIR/tests/integration/lib.sh"

command -v jq >/dev/null || skip "jq not installed"
priv_redis_start
REDIS_PORT=$PRIV_REDIS_PORT
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 log_level=info <<'EOF'
tasks:
  nap: { plugin: sleep.so, queue: q.nap, prefetch: 2 }
EOF

# idle: every sample is 0
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 30
sleep 2.5
idle=$(metric taskmill_pool_saturation)
note "idle: taskmill_pool_saturation $idle"
assert_eq 0 "$idle" "taskmill_pool_saturation of an idle pool"
s=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .pool.saturation)
assert_eq 0 "$s" "/status pool.saturation of an idle pool"
stop_daemon

# busy from the start: 2 workers, 8 runs of 3 s queued before it starts
for i in 1 2 3 4 5 6 7 8; do
	priv_rcli XADD q.nap '*' body '{"ms": 3000}' >/dev/null
done
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 30
sleep 6
busy=$(metric taskmill_pool_saturation)
note "busy: taskmill_pool_saturation $busy"
busy_pct=$(awk -v v="$busy" 'BEGIN { printf "%d", v * 100 }')
assert_ge 80 "$busy_pct" "taskmill_pool_saturation (%) of a pool kept busy"
assert_le 100 "$busy_pct" "taskmill_pool_saturation (%) is at most 1"
s=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .pool.saturation)
s_pct=$(awk -v v="$s" 'BEGIN { printf "%d", v * 100 }')
assert_ge 80 "$s_pct" "/status pool.saturation (%) of a pool kept busy"
stop_daemon 20 KILL || true
true
