# Redis down for a few seconds under a running daemon: the slots of the
# outage are fired late, once each, when Redis is back (they are within
# the 60-second grace), and firing goes on; the failure is logged once.
CONF=$TEST_DIR/taskmill.yaml
priv_redis_start
HTTP_PORT=$(free_port)
{
	echo "broker: { url: redis://127.0.0.1:$PRIV_REDIS_PORT/0 }"
	echo "plugin_dir: $TM_PLUGINS"
	echo "http: { listen: 127.0.0.1:$HTTP_PORT }"
	echo "log: { level: info }"
	echo "tasks:"
	echo "  tick: { plugin: noop.so, queue: q.tick }"
	echo "schedules:"
	echo "  every-second: { task: tick, every: 1s }"
} >"$CONF"

slots() {
	priv_rcli EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			for i = 1, #e[2] - 1, 2 do
				if e[2][i] == 'slot' then out[#out + 1] = e[2][i + 1] end
			end
		end
		return out" 1 q.tick
}

start_daemon "$CONF"
wait_ping
wait_until '(( $(slots | wc -l) >= 2 ))' 30
priv_redis_stop
down=$(now_ms)
wait_until "(( \$(now_ms) >= $down + 3500 ))" 20
priv_redis_start
up=$(now_ms)
note "Redis down from $down to $up"
wait_until "(( \$(slots | tail -n 1) >= $up + 2000 ))" 30

slots >"$TEST_DIR/slots.txt"
assert_eq "" "$(sort "$TEST_DIR/slots.txt" | uniq -d)" "slots fired twice"
gaps=$(sort -n "$TEST_DIR/slots.txt" |
	awk 'NR > 1 && $1 != prev + 1000 { print prev " -> " $1 } { prev = $1 }')
assert_eq "" "$gaps" "slots skipped around the outage"
# the outage's slots were among them
assert_ge 3 "$(awk -v a="$down" -v b="$up" '$1 > a && $1 < b' "$TEST_DIR/slots.txt" | wc -l)" \
	"slots of the outage fired late"
assert_eq 1 "$(grep -c 'cannot reach the broker to fire schedules\|firing schedules: ' "$DAEMON_LOG")" \
	"failure lines logged"
grep -q 'firing schedules again' "$DAEMON_LOG" || fail "no line saying firing goes on"
stop_daemon
