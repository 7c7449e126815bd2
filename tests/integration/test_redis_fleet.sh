# The fleet on Redis (docs/http.md, The fleet): three daemons on one queue
# each list all three in GET /api/v1/daemons within 5 s of starting; one
# stopped cleanly is gone from the others' lists at once, one killed with
# SIGKILL within 35 s (its announcement expires 30 s after it was last
# seen).
. "$TM_SRCDIR/tests/integration/lib.sh"
. "$TM_SRCDIR/tests/integration/lib_fleet.sh"

for i in 0 1 2; do
	write_config "$TEST_DIR/d$i.yaml" instance=fleet-$i http_port=$(free_port) \
		log_level=info <<YAML
tasks:
  ok: { plugin: noop.so, queue: q.fleet }
YAML
done
t0=$(now_ms)
for i in 0 1 2; do
	fleet_start "$i" "$TEST_DIR/d$i.yaml"
done
wait_until "fleet_agree 'fleet-0 fleet-1 fleet-2' ${FLEET_PORT[*]}" 5
note "all three listed by each after $(($(now_ms) - t0)) ms"

# one daemon's entry, with the documented fields
body=$(curl -sf "http://127.0.0.1:${FLEET_PORT[0]}/api/v1/daemons/fleet-2")
assert_eq "fleet-2 ${FLEET_PID[2]} thread 4 ok redis" \
	"$(jq -r '"\(.instance) \(.pid) \(.pool.kind) \(.pool.size) \(.tasks | join(",")) \(.broker)"' <<<"$body")" \
	"GET /api/v1/daemons/fleet-2"
jq -e '.host != "" and (.version | length) > 0 and
	(.started | test("^[0-9-]+T[0-9:.]+Z$")) and
	(.last_seen | test("^[0-9-]+T[0-9:.]+Z$")) and .config_generation == 1 and
	.pool.busy >= 0' <<<"$body" >/dev/null || fail "fields of $body"
assert_eq 404 "$(http_code /api/v1/daemons/nobody "${FLEET_PORT[0]}")" "unknown instance"
assert_eq 405 "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
	"http://127.0.0.1:${FLEET_PORT[0]}/api/v1/daemons")" "POST /api/v1/daemons"

# a clean stop removes it at once
fleet_stop 1
t1=$(now_ms)
wait_until "[[ \$(fleet_names ${FLEET_PORT[0]}) == 'fleet-0 fleet-2' ]]" 2
note "stopped daemon gone after $(($(now_ms) - t1)) ms"

# SIGKILL: gone within 35 s, never before 20 s (it was seen less than 5 s ago)
fleet_stop 2 KILL
t2=$(now_ms)
wait_until "[[ \$(fleet_names ${FLEET_PORT[0]}) == 'fleet-0' ]]" 35
gone=$(($(now_ms) - t2))
note "killed daemon gone after $gone ms"
assert_ge 20000 "$gone" "ms until a killed daemon is gone"
assert_eq 0 "$(rcli EXISTS '{taskmill.fleet}.daemon.fleet-2')" \
	"the killed daemon's key, expired"
fleet_stop 0
