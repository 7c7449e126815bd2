# SIGHUP picks up schedules: an added one starts firing, a removed one
# stops, a changed one fires on its new spec, and one left alone goes on
# without a slot skipped or repeated across the reload.
CONF=$TEST_DIR/taskmill.yaml
conf() {
	write_config "$CONF" http_port="$HTTP_PORT" log_level=info
}
HTTP_PORT=$(free_port)
conf <<YAML
tasks:
  tick: { plugin: noop.so, queue: q.tick }
schedules:
  kept: { task: tick, every: 1s }
  removed: { task: tick, every: 1s }
  changed: { task: tick, every: 1s }
YAML

slots_of() {
	rcall EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			local f = {}
			for i = 1, #e[2] - 1, 2 do f[e[2][i]] = e[2][i + 1] end
			if f['schedule'] == ARGV[1] then out[#out + 1] = f['slot'] end
		end
		return out" 1 q.tick "$1"
}

start_daemon "$CONF"
wait_ping
wait_until '(( $(slots_of kept | wc -l) >= 2 && $(slots_of removed | wc -l) >= 1 ))' 30
conf <<YAML
tasks:
  tick: { plugin: noop.so, queue: q.tick }
schedules:
  kept: { task: tick, every: 1s }
  changed: { task: tick, every: 3s }
  added: { task: tick, every: 1s }
YAML
kill -HUP "$DAEMON_PID"
wait_metric taskmill_config_generation '' 2 30
reloaded=$(now_ms)
wait_until '[[ -n $(slots_of added) ]]' 30
wait_until "(( \$(slots_of kept | tail -n 1) >= $reloaded + 4000 ))" 30
wait_until "(( \$(slots_of changed | tail -n 1) > $reloaded + 1000 ))" 30

late=$(slots_of removed | awk -v r="$reloaded" '$1 > r + 1000')
assert_eq "" "$late" "slots of the removed schedule after the reload"
# the changed one: every 3 s since the reload
bad=$(slots_of changed | awk -v r="$reloaded" '$1 > r + 1000 && $1 % 3000 != 0')
assert_eq "" "$bad" "slots of the changed schedule off its new spec"
# the kept one: every second, none skipped nor repeated across the reload
slots_of kept >"$TEST_DIR/kept.txt"
assert_eq "" "$(sort "$TEST_DIR/kept.txt" | uniq -d)" "kept slots repeated"
gaps=$(awk 'NR > 1 && $1 != prev + 1000 { print prev " -> " $1 } { prev = $1 }' "$TEST_DIR/kept.txt")
assert_eq "" "$gaps" "kept slots skipped"
assert_eq 0 "$(metric taskmill_schedule_fired_total 'schedule="removed"')" "removed schedule's series"
assert_ge 1 "$(metric taskmill_schedule_fired_total 'schedule="added"')" "added schedule's fires"
stop_daemon
