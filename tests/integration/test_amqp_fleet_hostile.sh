# The fleet on RabbitMQ against what anyone with access to the broker can
# send to a daemon's fleet queue (docs/rabbitmq.md, The fleet): messages
# without a type, of an unknown type, or announcements without a daemon
# name are ignored with one log line, and the daemon lists what it listed.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_fleet.sh"

write_amqp_config "$TEST_DIR/d0.yaml" http_port=$(free_port) log_level=info <<YAML
instance: $AQ-0
tasks:
  ok: { plugin: noop.so, queue: $AQ.ok }
YAML
fleet_start 0 "$TEST_DIR/d0.yaml"
P=${FLEET_PORT[0]}
wait_until "fleet_agree '$AQ-0' $P" 5
# the daemon's own queue on taskmill.fleet (the only daemon of this test)
fq=
find_queue() {
	fq=$(rabbitctl list_bindings source_name destination_name 2>/dev/null |
		awk '$1 == "taskmill.fleet" { print $2 }' | head -n 1)
	[[ -n $fq ]]
}
wait_until find_queue 10
note "fleet queue $fq"
amqptool publish "$fq" 3 '{"instance":"evil-%d","pid":"x"}' >/dev/null
amqptool publish "$fq" 2 'not json %d' >/dev/null
sleep 1
for ((k = 0; k < 3; k++)); do
	assert_eq "$AQ-0" "$(fleet_names "$P")" "daemons listed"
done
n=$(grep -c 'fleet: a message on taskmill.fleet was ignored' "$TEST_DIR/daemon.1.log" || true)
assert_eq 1 "$n" "log lines for ignored fleet messages (once a minute)"
daemon_alive "${FLEET_PID[0]}" || fail "the daemon died"
fleet_stop 0
