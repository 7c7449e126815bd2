# RabbitMQ: SIGHUP adds and removes schedules; one left alone goes on
# across the reload (the lead given up and taken again) without a slot
# skipped or fired twice.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml
KEPT=kept$$ REMOVED=removed$$ ADDED=added$$
HTTP_PORT=$(free_port)
conf() {
	write_amqp_config "$CONF" http_port="$HTTP_PORT" log_level=info
}
conf <<YAML
tasks:
  tick: { plugin: journal.so, queue: $AQ.tick, config: { path: $JOURNAL } }
schedules:
  $KEPT: { task: tick, every: 1s }
  $REMOVED: { task: tick, every: 1s }
YAML

slots_of() {
	[[ -f $JOURNAL ]] || return 0
	awk '{ print $1 }' "$JOURNAL" | sed -n "s/^$1://p" | sort -n
}

start_daemon "$CONF"
wait_ping
wait_until "(( \$(slots_of $KEPT | wc -l) >= 2 && \$(slots_of $REMOVED | wc -l) >= 1 ))" 30
conf <<YAML
tasks:
  tick: { plugin: journal.so, queue: $AQ.tick, config: { path: $JOURNAL } }
schedules:
  $KEPT: { task: tick, every: 1s }
  $ADDED: { task: tick, every: 1s }
YAML
kill -HUP "$DAEMON_PID"
wait_metric taskmill_config_generation '' 2 30
reloaded=$(now_ms)
wait_until "[[ -n \$(slots_of $ADDED) ]]" 30
wait_until "(( \$(slots_of $KEPT | tail -n 1) >= $reloaded + 4000 ))" 30

late=$(slots_of "$REMOVED" | awk -v r="$reloaded" '$1 > r + 1000')
assert_eq "" "$late" "slots of the removed schedule after the reload"
slots_of "$KEPT" >"$TEST_DIR/kept.txt"
assert_eq "" "$(uniq -d "$TEST_DIR/kept.txt")" "kept slots repeated"
gaps=$(awk 'NR > 1 && $1 != prev + 1000 { print prev " -> " $1 } { prev = $1 }' "$TEST_DIR/kept.txt")
assert_eq "" "$gaps" "kept slots skipped"
stop_daemon
