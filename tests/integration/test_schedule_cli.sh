# `taskmill schedules` lists each schedule (name, task, spec, zone, last
# fired slot read from the broker, next slot) as a table, and GET
# /api/v1/schedules answers the same as JSON.
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" log_level=info <<YAML
tasks:
  tick: { plugin: noop.so, queue: q.tick }
schedules:
  fast: { task: tick, every: 1s }
  nightly: { task: tick, cron: "30 2 * * *", timezone: Europe/Berlin, catch_up: once }
YAML

# never fired: no last slot; the next slots from the configuration
before=$(now_ms)
tm schedules -c "$CONF"
assert_eq 0 "$TM_RC" "exit status of schedules: $(cat "$TM_ERR")"
assert_eq 3 "$(wc -l <"$TM_OUT")" "lines of the table"
read -r -a head <"$TM_OUT"
assert_eq "NAME TASK SPEC ZONE LAST NEXT" "${head[*]}" "heading"
fast=$(grep '^fast ' "$TM_OUT")
nightly=$(grep '^nightly ' "$TM_OUT")
assert_match '^fast +tick +1s +- +- +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$' "$fast" "fast row"
assert_match '^nightly +tick +30 2 \* \* \* +Europe/Berlin +- +[0-9-]+T(00|01):30:00.000Z$' \
	"$nightly" "nightly row (02:30 Berlin is 00:30 or 01:30 UTC)"
next=$(awk '{ print $NF }' <<<"$fast")
next_ms=$(date -u -d "$next" +%s%3N)
assert_le $((before + 1000 + 2000)) "$next_ms" "next slot of fast"
assert_ge $((before + 1)) "$next_ms" "next slot of fast"

# fired by a daemon: the last slot is the broker's
start_daemon "$CONF"
wait_ping
wait_until '[[ -n $(rcli GET q.tick.sched.fast) ]]' 30
stop_daemon
last_ms=$(rcall GET q.tick.sched.fast)
tm schedules -c "$CONF"
assert_eq 0 "$TM_RC" "exit status of schedules"
last=$(grep '^fast ' "$TM_OUT" | awk '{ print $5 }')
assert_eq "$last_ms" "$(date -u -d "$last" +%s%3N)" "last slot of fast"
assert_eq - "$(grep '^nightly ' "$TM_OUT" | awk '{ print $9 }')" "last slot of nightly"

# usage: no argument taken
tm schedules -c "$CONF" extra
assert_eq 2 "$TM_RC" "exit status with an argument"
# an unreachable broker: exit 1, said on stderr
sed "s|redis://127.0.0.1:$REDIS_PORT/0|redis://127.0.0.1:$(free_port)/0|" "$CONF" >"$TEST_DIR/down.yaml"
tm schedules -c "$TEST_DIR/down.yaml"
assert_eq 1 "$TM_RC" "exit status with the broker down"
assert_match 'cannot read the last slots' "$(cat "$TM_ERR")" "message with the broker down"

# the API
start_daemon "$CONF"
wait_ping
json=$(curl -sf -m 10 "http://127.0.0.1:$HTTP_PORT/api/v1/schedules")
note "GET /api/v1/schedules: $json"
assert_eq '["fast","nightly"]' "$(jq -c '[.[].name]' <<<"$json")" "names"
assert_eq '{"name":"nightly","task":"tick","spec":"30 2 * * *","timezone":"Europe/Berlin","catch_up":"once","last_slot":null,"last_slot_ms":null}' \
	"$(jq -c '.[1] | del(.next_slot, .next_slot_ms)' <<<"$json")" "nightly"
assert_eq null "$(jq -c '.[0].timezone' <<<"$json")" "timezone of an every schedule"
got=$(jq '.[0].last_slot_ms' <<<"$json")
assert_ge "$last_ms" "$got" "last slot of fast in the API"
assert_eq "$(jq -r '.[0].next_slot_ms' <<<"$json")" \
	"$(date -u -d "$(jq -r '.[0].next_slot' <<<"$json")" +%s%3N)" "next slot, both forms"
assert_eq 405 "$(curl -s -o /dev/null -w '%{http_code}' -X POST -m 5 "http://127.0.0.1:$HTTP_PORT/api/v1/schedules")" \
	"POST /api/v1/schedules"
stop_daemon
