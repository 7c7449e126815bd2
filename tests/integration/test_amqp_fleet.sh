# The fleet on RabbitMQ (docs/rabbitmq.md, The fleet): three daemons on one
# queue each list all three in GET /api/v1/daemons within 5 s; the history
# from any of them is the exact sum of the three daemons' counts (each
# answers the request from its own ring); one stopped cleanly is gone at
# once, one killed with SIGKILL within 35 s.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_fleet.sh"

N_OK=20 N_ERR=3 N_REJ=2
for i in 0 1 2; do
	write_amqp_config "$TEST_DIR/d$i.yaml" http_port=$(free_port) \
		log_level=info pool_size=2 <<YAML
instance: $AQ-$i
tasks:
  ok: { plugin: noop.so, queue: $AQ.ok }
  bad: { plugin: fail.so, queue: $AQ.bad, max_retries: 1, backoff: 100ms }
YAML
done
for i in 0 1 2; do
	fleet_start "$i" "$TEST_DIR/d$i.yaml"
done
t0=$(now_ms)
all="$AQ-0 $AQ-1 $AQ-2"
wait_until "fleet_agree '$all' ${FLEET_PORT[*]}" 5
note "all three listed by each $(($(now_ms) - t0)) ms after the last start"
body=$(curl -sf "http://127.0.0.1:${FLEET_PORT[0]}/api/v1/daemons/$AQ-1")
assert_eq "${FLEET_PID[1]} amqp ok,bad" \
	"$(jq -r '"\(.pid) \(.broker) \(.tasks | join(","))"' <<<"$body")" "daemon 1's entry"

amqptool publish "$AQ.ok" "$N_OK" '{"n":%d}' >/dev/null
amqptool publish "$AQ.bad" "$N_ERR" '{"mode":"error","n":%d}' >/dev/null
amqptool publish "$AQ.bad" "$N_REJ" '{"mode":"reject","n":%d}' >/dev/null
want_all="$N_OK $((2 * N_ERR + N_REJ)) $((N_ERR + N_REJ)) $N_ERR"
want_bad="0 $((2 * N_ERR + N_REJ)) $((N_ERR + N_REJ)) $N_ERR"
wait_until "[[ \$(fleet_sum ${FLEET_PORT[0]} '') == '$want_all' ]]" 20
assert_eq "$want_all" "$(fleet_sum "${FLEET_PORT[1]}" '')" "history from daemon 1"
assert_eq "$want_bad" "$(fleet_sum "${FLEET_PORT[1]}" 'task=bad&range=24h')" "24h history of bad"
assert_eq "$want_all" "$(fleet_sum "${FLEET_PORT[2]}" 'range=7d')" "7d history"
# the work was shared: the history is the fleet's, not one daemon's
ran=0
for i in 0 1 2; do
	v=$(metric taskmill_tasks_total 'task="ok",outcome="success"' "${FLEET_PORT[i]}")
	((v > 0)) && ran=$((ran + 1))
done
note "$ran daemon(s) ran messages of ok"

# a clean stop: gone at once (its departure is a message to the others)
fleet_stop 1
t1=$(now_ms)
wait_until "[[ \$(fleet_names ${FLEET_PORT[0]}) == '$AQ-0 $AQ-2' ]]" 2
note "stopped daemon gone after $(($(now_ms) - t1)) ms"
# SIGKILL: gone within 35 s of its last announcement
fleet_stop 2 KILL
t2=$(now_ms)
wait_until "[[ \$(fleet_names ${FLEET_PORT[0]}) == '$AQ-0' ]]" 35
note "killed daemon gone after $(($(now_ms) - t2)) ms"
fleet_stop 0
