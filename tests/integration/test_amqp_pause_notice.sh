# RabbitMQ pause by notice: two daemons with 50 tasks each learn of a
# pause and a resume from the notices on the exchange taskmill.pause, not
# by reading every control queue again and again:
# - idle, a daemon's pause connection ("taskmill INSTANCE pause") sends
#   and receives fewer than 10 packets in 5 s (reading 50 control queues
#   a second would be about 250 each way);
# - `taskmill pause` stops the task on both daemons (messages published
#   stay ready in its queue) and `taskmill resume` runs them;
# - a pause issued while daemon 1's pause connection is cut
#   (rabbitmqctl close_connection), after it noticed the cut and before
#   it opened the next one, so that no notice can reach it, is honoured
#   once it reconnects: the new connection reads every task's state once;
# - after a broker restart (the notice queues gone with it) a pause
#   reaches both daemons by notice again.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

NT=50

# tasks: the tasks t0..t(NT-1), each on its own queue
tasks() {
	local i
	echo "tasks:"
	for ((i = 0; i < NT; i++)); do
		echo "  t$i: { plugin: noop.so, queue: $AQ.q$i }"
	done
}
# write_daemon FILE INSTANCE
write_daemon() {
	HTTP_PORT=
	write_amqp_config "$1" pool_size=2 < <(tasks)
	echo "instance: $2" >>"$1"
}

PN=pn$$
write_daemon "$TEST_DIR/d1.yaml" "${PN}a"
P1=$HTTP_PORT
write_daemon "$TEST_DIR/d2.yaml" "${PN}b"
P2=$HTTP_PORT
# the CLI's own configuration: its short connections are named after
# another instance than the daemons'
write_daemon "$TEST_DIR/cli.yaml" "${PN}cli"

# pause_conn INSTANCE: "PID<TAB>SEND_CNT<TAB>RECV_CNT" of the daemon's
# pause connection (PID: the connection's process, which
# close_connection takes); nothing when it has none
pause_conn() {
	rabbitctl list_connections --no-table-headers pid send_cnt recv_cnt client_properties |
		{ grep -F "\"taskmill $1 pause\"" || true; } | cut -f1-3 | head -n1
}
# runs_of TASK PORT: its successful runs
runs_of() {
	local v
	v=$(metric taskmill_tasks_total "task=\"$1\",outcome=\"success\"" "$2")
	echo "${v%.*}"
}
# paused_on TASK: "D1 D2", both daemons' gauges
paused_on() {
	echo "$(metric taskmill_task_paused "task=\"$1\"" "$P1") $(metric taskmill_task_paused "task=\"$1\"" "$P2")"
}
publish() {
	amqptool publish "$AQ.$1" "$2" '{"n":%d}' >/dev/null
}
runs_both() {
	echo $(($(runs_of "$1" "$P1") + $(runs_of "$1" "$P2")))
}

# idle_packets WHAT: 3 s for what was under way to end, then daemon 1's
# pause connection sends and receives fewer than 10 packets in 5 s (a
# heartbeat each way at most; polling 50 tasks a second made about 500
# in all)
idle_packets() {
	local c1 c2 sent recv
	sleep 3
	c1=$(pause_conn "${PN}a")
	sleep 5
	c2=$(pause_conn "${PN}a")
	[[ -n $c1 && -n $c2 ]] || fail "daemon 1 has no pause connection"
	assert_eq "$(cut -f1 <<<"$c1")" "$(cut -f1 <<<"$c2")" "the same pause connection at both readings"
	sent=$(($(cut -f2 <<<"$c2") - $(cut -f2 <<<"$c1")))
	recv=$(($(cut -f3 <<<"$c2") - $(cut -f3 <<<"$c1")))
	note "daemon 1's $1 in 5 s idle, $NT tasks: $sent packets sent, $recv received"
	assert_le 9 $((sent + recv)) "packets of the idle $1 in 5 s"
}

start_daemon "$TEST_DIR/d1.yaml"
PID1=$DAEMON_PID
LOG1=$DAEMON_LOG
start_daemon "$TEST_DIR/d2.yaml"
PID2=$DAEMON_PID
wait_ping "$P1" 90
wait_ping "$P2" 90
wait_until '[[ -n $(pause_conn ${PN}a) && -n $(pause_conn ${PN}b) ]]' 60

# ---- idle: the pause connection exchanges (almost) nothing, past the
# sweep after it opened (one declare per task)
idle_packets "pause connection"
assert_eq 1 "$(grep -c "pause state: listening for notices" "$LOG1")" "daemon 1's pause connections opened"

# ---- pause and resume from the CLI
publish q3 4
wait_until '[[ $(runs_both t3) == 4 ]]' 60
tm pause -c "$TEST_DIR/cli.yaml" t7
assert_eq 0 "$TM_RC" "taskmill pause t7: $(cat "$TM_ERR")"
wait_until '[[ $(paused_on t7) == "1 1" ]]' 30
assert_eq "0 0" "$(paused_on t8)" "the other tasks' gauges"
publish q7 5
publish q8 5
wait_until '[[ $(runs_both t8) == 5 ]]' 60
sleep 2
assert_eq 0 "$(runs_both t7)" "runs of the paused task"
assert_eq 5 "$(ready_count "$AQ.q7")" "its messages wait in its queue"
tm resume -c "$TEST_DIR/cli.yaml" t7
assert_eq 0 "$TM_RC" "taskmill resume t7: $(cat "$TM_ERR")"
wait_until '[[ $(paused_on t7) == "0 0" ]]' 30
wait_until '[[ $(runs_both t7) == 5 ]]' 60

# ---- a pause while daemon 1's pause connection is cut: the notice cannot
# reach it (its notice queue went with the connection), the sweep of the
# next connection reads it. The pause must fall between the cut noticed
# (the failure logged) and the next connection (its "listening" line,
# logged before it binds): tried again, resumed first, when it did not.
ok=0
for attempt in 1 2 3; do
	opened=$(grep -c "pause state: listening for notices" "$LOG1")
	failed=$(grep -c "reading the pause state: .*; trying again" "$LOG1" || true)
	cpid=$(pause_conn "${PN}a" | cut -f1)
	[[ -n $cpid ]] || fail "daemon 1 has no pause connection to cut"
	rabbitctl close_connection "$cpid" "test: pause connection cut" >/dev/null
	wait_until "[[ \$(grep -c 'reading the pause state: .*; trying again' '$LOG1') -gt $failed ]]" 30
	tm pause -c "$TEST_DIR/cli.yaml" t9
	assert_eq 0 "$TM_RC" "taskmill pause t9: $(cat "$TM_ERR")"
	if [[ $(grep -c "pause state: listening for notices" "$LOG1") == "$opened" ]]; then
		ok=1
		break
	fi
	note "attempt $attempt: daemon 1 reconnected before the pause was written; again"
	tm resume -c "$TEST_DIR/cli.yaml" t9
	assert_eq 0 "$TM_RC" "taskmill resume t9: $(cat "$TM_ERR")"
	wait_until '[[ $(paused_on t9) == "0 0" ]]' 30
done
assert_eq 1 "$ok" "a pause written while daemon 1 had no pause connection"
wait_until "[[ \$(grep -c 'pause state: listening for notices' '$LOG1') -gt $opened ]]" 60
wait_until '[[ $(paused_on t9) == "1 1" ]]' 30
grep -q "paused: consumer of queue '$AQ.q9' cancelled" "$LOG1" ||
	fail "daemon 1 did not log the pause of t9"
publish q9 3
sleep 2
assert_eq 0 "$(runs_both t9)" "runs of t9, paused while daemon 1's pause connection was cut"
assert_eq 3 "$(ready_count "$AQ.q9")" "its messages wait in its queue"
tm resume -c "$TEST_DIR/cli.yaml" t9
assert_eq 0 "$TM_RC" "taskmill resume t9: $(cat "$TM_ERR")"
wait_until '[[ $(paused_on t9) == "0 0" ]]' 30
wait_until '[[ $(runs_both t9) == 3 ]]' 60

# ---- a broker restart takes the notice queues with it: once the daemons
# are back, each with a new pause connection, a pause reaches them by
# notice again (their task connections, open before it, read no state)
opened=$(grep -c "pause state: listening for notices" "$LOG1")
rabbitctl stop_app >/dev/null
rabbitctl start_app >/dev/null
wait_ping "$P1" 90
wait_ping "$P2" 90
wait_until "[[ \$(grep -c 'pause state: listening for notices' '$LOG1') -gt $opened ]]" 90
wait_until '[[ -n $(pause_conn ${PN}a) && -n $(pause_conn ${PN}b) ]]' 60
tm pause -c "$TEST_DIR/cli.yaml" t11
assert_eq 0 "$TM_RC" "taskmill pause t11: $(cat "$TM_ERR")"
wait_until '[[ $(paused_on t11) == "1 1" ]]' 30
publish q11 2
sleep 2
assert_eq 0 "$(runs_both t11)" "runs of t11, paused after the broker restart"
assert_eq 2 "$(ready_count "$AQ.q11")" "its messages wait in its queue"
tm resume -c "$TEST_DIR/cli.yaml" t11
assert_eq 0 "$TM_RC" "taskmill resume t11: $(cat "$TM_ERR")"
wait_until '[[ $(paused_on t11) == "0 0" ]]' 30
wait_until '[[ $(runs_both t11) == 2 ]]' 60

# ---- the new connection, past its sweep, is idle again
idle_packets "new pause connection"

DAEMON_PID=$PID2
stop_daemon
DAEMON_PID=$PID1
stop_daemon
true
