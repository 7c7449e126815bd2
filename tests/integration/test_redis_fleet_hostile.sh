# The fleet on Redis against what anyone with access to the broker can
# write (docs/http.md, The fleet): announcements that are not JSON, too
# big, or of the wrong types are left out of GET /api/v1/daemons with one
# log line, and never crash the daemon; and with 500 tasks an
# announcement costs the same few commands (INFO commandstats), and the
# history a daemon sends grows with the buckets that counted something,
# not with its tasks.
. "$TM_SRCDIR/tests/integration/lib.sh"
. "$TM_SRCDIR/tests/integration/lib_fleet.sh"

NTASKS=500
{
	echo "tasks:"
	for ((i = 0; i < NTASKS; i++)); do
		echo "  t$i: { plugin: noop.so, queue: q.fh.$i }"
	done
} >"$TEST_DIR/tasks.yaml"
write_config "$TEST_DIR/d0.yaml" instance=real-0 http_port=$(free_port) \
	log_level=info <"$TEST_DIR/tasks.yaml"

idx='{taskmill.fleet}.daemons'
key='{taskmill.fleet}.daemon.'
now=$(now_ms)
hostile() {
	rcall SET "$key$1" "$2" PX 60000 >/dev/null
	rcall ZADD "$idx" "$now" "$1" >/dev/null
}
hostile bad-json '{"instance": "bad-json", '
hostile not-object '[1, 2, 3]'
hostile wrong-types '{"instance": 7, "host": [], "pid": "x"}'
hostile neg-pid '{"instance":"neg-pid","host":"h","pid":-1,"version":"v","started":"s","config_generation":1,"broker":"redis","pool":{"kind":"thread","size":1,"busy":0},"tasks":[],"last_seen":"s"}'
hostile bad-task '{"instance":"bad-task","host":"h","pid":1,"version":"v","started":"s","config_generation":1,"broker":"redis","pool":{"kind":"thread","size":1,"busy":0},"tasks":[1],"last_seen":"s"}'
head -c 200000 /dev/zero | tr '\0' 'a' | sed 's/^/{"instance":"huge","x":"/; s/$/"}/' >"$TEST_DIR/huge.json"
rcli -x SET "${key}huge" <"$TEST_DIR/huge.json" >/dev/null
rcall ZADD "$idx" "$now" huge >/dev/null
# a well-formed one of another daemon is listed (as any daemon's would be)
hostile other-1 '{"instance":"other-1","host":"h","pid":1,"version":"v","started":"s","config_generation":1,"broker":"redis","pool":{"kind":"thread","size":1,"busy":0},"tasks":["a"],"last_seen":"s","extra":{"ignored":true}}'
rcall SET "${key}wrong-type-key" x >/dev/null
rcall DEL "${key}wrong-type-key" >/dev/null
rcall HSET "${key}a-hash" f v >/dev/null
rcall ZADD "$idx" "$now" a-hash >/dev/null

fleet_start 0 "$TEST_DIR/d0.yaml"
P=${FLEET_PORT[0]}
wait_until "[[ \$(fleet_names $P) == 'other-1 real-0' ]]" 10
for ((k = 0; k < 5; k++)); do
	assert_eq "other-1 real-0" "$(fleet_names "$P")" "daemons listed"
done
assert_eq "null" "$(curl -sf "http://127.0.0.1:$P/api/v1/daemons/other-1" | jq -c .extra)" \
	"an unknown field is not passed on"
assert_eq 404 "$(http_code /api/v1/daemons/bad-json "$P")" "a bad announcement's instance"
n=$(grep -c 'an announcement of .* was ignored' "$TEST_DIR/daemon.1.log" || true)
assert_eq 1 "$n" "log lines for ignored announcements (once a minute)"
daemon_alive "${FLEET_PID[0]}" || fail "the daemon died"

# the cost of announcing with 500 tasks: over 10 s two announcements of
# four commands each (SET, ZADD, ZREMRANGEBYSCORE, PEXPIRE)
sleep 1
rcli CONFIG RESETSTAT >/dev/null
sleep 10
stats=$(rcli INFO commandstats | tr -d '\r')
calls() {
	awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { print $3 + 0; f = 1 } END { if (!f) print 0 }' <<<"$stats"
}
note "in 10 s: set $(calls set), zadd $(calls zadd), zremrangebyscore $(calls zremrangebyscore), hincrby $(calls hincrby)"
assert_le 3 "$(calls set)" "SET in 10 s with $NTASKS tasks"
assert_le 3 "$(calls zadd)" "ZADD in 10 s with $NTASKS tasks"
assert_eq 0 "$(calls hincrby)" "HINCRBY of idle tasks"

# one message on each of two tasks: the history sent at the stop is
# 2 tasks x (task and total fields) x (minute and hour) = 8 HINCRBY at
# most, whatever the number of tasks
rcall XADD q.fh.3 '*' body '{}' >/dev/null
rcall XADD q.fh.400 '*' body '{}' >/dev/null
wait_until "[[ \$(fleet_sum $P '' | cut -d' ' -f1) == 2 ]]" 10
rcli CONFIG RESETSTAT >/dev/null
fleet_stop 0
stats=$(rcli INFO commandstats | tr -d '\r')
note "at the stop: hincrby $(calls hincrby), pexpire $(calls pexpire), del $(calls del)"
assert_le 8 "$(calls hincrby)" "HINCRBY of the last flush"
assert_ge 4 "$(calls hincrby)" "HINCRBY of the last flush"
assert_eq 0 "$(rcli EXISTS "${key}real-0")" "the announcement after a clean stop"
