# A schedule of `every: 1s` on three daemons for about 20 s on RabbitMQ,
# the leader (the daemon the broker gave the lock queue's state) killed
# with SIGKILL and started again half-way: each slot of the window is
# published exactly once, with message_id "<schedule>:<slot>" (the journal
# plugin records it), and the lead passed to another daemon.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.tick
SCH=tick$$
ports=()
for i in 1 2 3; do
	write_amqp_config "$TEST_DIR/d$i.yaml" http_port="$(free_port)" log_level=info <<YAML
tasks:
  tick: { plugin: journal.so, queue: $Q, config: { path: $JOURNAL } }
schedules:
  $SCH: { task: tick, every: 1s, body: { from: schedule } }
YAML
	ports+=("$HTTP_PORT")
done

# slots: the slots journaled, one line per run
slots() {
	[[ -f $JOURNAL ]] || return 0
	awk '{ print $1 }' "$JOURNAL" | sed -n "s/^$SCH://p"
}
# leader: the index (0..2) of the daemon that leads now (the last of the
# logs to say it took the lead, among the living)
leader() {
	local i best=-1 at=0 t
	for i in 0 1 2; do
		daemon_alive "${pids[i]}" || continue
		t=$(grep -h "schedule '$SCH': this daemon leads it now" "${logs[i]}" | tail -n 1 | cut -d' ' -f1 || true)
		[[ -n $t ]] || continue
		t=$(date -u -d "$t" +%s%3N)
		if ((t > at)); then
			at=$t
			best=$i
		fi
	done
	echo "$best"
}

pids=() logs=()
for i in 1 2 3; do
	start_daemon "$TEST_DIR/d$i.yaml"
	pids+=("$DAEMON_PID")
	logs+=("$DAEMON_LOG")
done
for p in "${ports[@]}"; do wait_ping "$p" 60; done
t0=$(now_ms)
note "all three running at $t0"
wait_until '(( $(leader) >= 0 ))' 30
wait_until "(( \$(now_ms) >= $t0 + 8000 ))" 20
k=$(leader)
kill -KILL "${pids[k]}"
wait "${pids[k]}" 2>/dev/null || true
killed=$(now_ms)
note "leader, daemon $((k + 1)), killed at $killed"
wait_until "(( \$(leader) >= 0 ))" 30
note "daemon $(($(leader) + 1)) leads now"
wait_until "(( \$(now_ms) >= $t0 + 11000 ))" 20
start_daemon "$TEST_DIR/d$((k + 1)).yaml"
pids[k]=$DAEMON_PID
logs[k]=$DAEMON_LOG
wait_ping "${ports[k]}" 60
wait_until "(( \$(now_ms) >= $t0 + 20000 ))" 40
t1=$(now_ms)

first=$(((t0 / 1000 + 1) * 1000))
last=$(((t1 - 3000) / 1000 * 1000))
wait_until "[[ \$(slots | awk -v l=$last '\$1 >= l' | wc -l) -ge 1 ]]" 20
slots >"$TEST_DIR/slots.txt"
# a message the killed daemon held is delivered again (at least once):
# only the slot just before the kill may appear twice
dups=$(sort -n "$TEST_DIR/slots.txt" | uniq -d |
	awk -v k="$killed" '!($1 <= k && $1 > k - 2000)' | sed -n 1,5p | paste -sd ' ')
assert_eq "" "$dups" "slots published more than once"
for ((s = first; s <= last; s += 1000)); do
	grep -qx "$s" "$TEST_DIR/slots.txt" || fail "slot $s was not published"
done
note "slots $first .. $last each published once ($(sort -u "$TEST_DIR/slots.txt" | wc -l) in all)"
grep -q "^$SCH:$first {\"from\":\"schedule\"}\$" "$JOURNAL" || fail "body of slot $first"

# taskmill schedules reads the last slot from the last-value queue
tm schedules -c "$TEST_DIR/d1.yaml"
assert_eq 0 "$TM_RC" "schedules: $(cat "$TM_ERR")"
assert_match "^$SCH +tick +1s +- +[0-9T:.-]+Z +[0-9T:.-]+Z\$" "$(grep "^$SCH " "$TM_OUT")" "schedules row"

for i in 0 1 2; do
	DAEMON_PID=${pids[i]}
	stop_daemon
done
