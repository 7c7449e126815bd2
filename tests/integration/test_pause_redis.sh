# Pause and resume on Redis across daemons: `taskmill pause` run against
# one daemon's configuration stops the task on three daemons (every one
# shows taskmill_task_paused 1, and messages published 2 s after the pause
# stay in the stream, unread, while the task's depth grows); another task
# of the same lane keeps flowing; /ping and /healthz stay 200; a daemon
# restarted during the pause reads nothing of the task (the state is in
# Redis); `taskmill resume` restarts all three, which then run everything
# that waited, once.
. "$TM_SRCDIR/tests/integration/lib_pause.sh"
need() { command -v "$1" >/dev/null 2>&1 || skip "'$1' not found"; }
need jq

# the broker's part of the scenario (lib_pause.sh)
write_daemon() {
	write_config "$1" instance="pause-$2" pool_size=2 <<YAML
tasks:
  work: { plugin: noop.so, queue: q.pause.work }
  other: { plugin: noop.so, queue: q.pause.other }
YAML
}
publish() {
	local k
	for ((k = 0; k < $2; k++)); do
		rcli XADD "q.pause.$1" '*' body "{\"n\":$k}" >/dev/null
	done
}
# lag: entries of q.pause.work not yet read by the group.
lag() {
	rcli XINFO GROUPS q.pause.work | awk 'p { print; exit } $0 == "lag" { p = 1 }'
}
pause_key() {
	rcli EXISTS q.pause.work.paused.taskmill
}

pause_setup write_daemon
pause_held publish lag pause_key 60
assert_eq 0 "$(rcall XPENDING q.pause.work taskmill | head -1)" "nothing pending on a paused task"
pause_restart_one lag "paused: reading nothing from stream 'q.pause.work'" 60

# ---- resume through daemon 3's configuration
tm resume -c "${CONFS[3]}" work
assert_eq 0 "$TM_RC" "taskmill resume exit status: $(cat "$TM_ERR")"
assert_eq "resumed task 'work'" "$(cat "$TM_OUT")" "taskmill resume output"
pause_resumed lag pause_key

# a resume without a pause is no error; usage errors exit 2
tm resume -c "${CONFS[1]}" work
assert_eq 0 "$TM_RC" "resume of a running task"
tm pause -c "${CONFS[1]}" nosuch
assert_eq 2 "$TM_RC" "pause of an unknown task"
tm pause -c "${CONFS[1]}"
assert_eq 2 "$TM_RC" "pause without a task"
tm pause -c "${CONFS[1]}" work other
assert_eq 2 "$TM_RC" "pause of two tasks"
assert_eq 0 "$(pause_paused_on 1)" "no pause left by the refused commands"

pause_stop_all
true
