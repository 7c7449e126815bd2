# Pause and resume on Redis across daemons: `taskmill pause` run against
# one daemon's configuration stops the task on three daemons (every one
# shows taskmill_task_paused 1, and messages published 2 s after the pause
# stay in the stream, unread, while the task's depth grows); another task
# of the same lane keeps flowing; /ping and /healthz stay 200; a daemon
# restarted during the pause reads nothing of the task (the state is in
# Redis); `taskmill resume` restarts all three, which then run everything
# that waited, once.
need() { command -v "$1" >/dev/null 2>&1 || skip "'$1' not found"; }
need jq

N=3
PORTS=()
CONFS=()
PIDS=()
for ((i = 1; i <= N; i++)); do
	CONFS[i]=$TEST_DIR/d$i.yaml
	HTTP_PORT=
	write_config "${CONFS[i]}" instance="pause-$i" pool_size=2 <<YAML
tasks:
  work: { plugin: noop.so, queue: q.pause.work }
  other: { plugin: noop.so, queue: q.pause.other }
YAML
	PORTS[i]=$HTTP_PORT
done

# runs TASK: the successful runs of TASK summed over the daemons, those
# of stopped daemons (GONE_RUNS) included.
GONE_RUNS=0
runs() {
	local i s=$GONE_RUNS v
	for ((i = 1; i <= N; i++)); do
		v=$(metric taskmill_tasks_total "task=\"$1\",outcome=\"success\"" "${PORTS[i]}")
		s=$((s + ${v%.*}))
	done
	echo "$s"
}

# paused_on I: daemon I's gauge for task work.
paused_on() {
	metric taskmill_task_paused 'task="work"' "${PORTS[$1]}"
}

# all_paused VALUE: every daemon's gauge is VALUE.
all_paused() {
	local i
	for ((i = 1; i <= N; i++)); do
		[[ $(paused_on "$i") == "$1" ]] || return 1
	done
}

# lag: entries of q.pause.work not yet read by the group.
lag() {
	rcli XINFO GROUPS q.pause.work | awk 'p { print; exit } $0 == "lag" { p = 1 }'
}

start_all() {
	local i
	for ((i = 1; i <= N; i++)); do
		start_daemon "${CONFS[i]}"
		PIDS[i]=$DAEMON_PID
	done
	for ((i = 1; i <= N; i++)); do
		wait_ping "${PORTS[i]}" 60
	done
}

start_all
assert_eq 0 "$(paused_on 1)" "not paused at start"

# the task runs on the daemons before the pause
for ((k = 0; k < 20; k++)); do
	rcli XADD q.pause.work '*' body '{}' >/dev/null
done
wait_until '[[ $(runs work) == 20 ]]' 30

# ---- pause through daemon 1's configuration
tm pause -c "${CONFS[1]}" work
assert_eq 0 "$TM_RC" "taskmill pause exit status: $(cat "$TM_ERR")"
assert_eq "paused task 'work'" "$(cat "$TM_OUT")" "taskmill pause output"
T0=$(now_ms)
assert_eq 1 "$(rcli EXISTS q.pause.work.paused.taskmill)" "the pause key is set"
# 2 s after the pause every daemon has stopped reading the task: what is
# published from then on stays unread (whatever the gauges show)
while (($(now_ms) < T0 + 2000)); do sleep 0.1; done
BEFORE=$(runs work)
for ((k = 0; k < 30; k++)); do
	rcli XADD q.pause.work '*' body '{}' >/dev/null
done
wait_until 'all_paused 1' 30
note "every daemon showed the pause $(($(now_ms) - T0)) ms after it"
# the other task of the same lane keeps flowing
for ((k = 0; k < 5; k++)); do
	rcli XADD q.pause.other '*' body '{}' >/dev/null
done
wait_until '[[ $(runs other) == 5 ]]' 30
# two more poll periods: nothing of the paused task is read
sleep 2
assert_eq "$BEFORE" "$(runs work)" "runs of the paused task"
assert_eq 30 "$(lag)" "entries waiting unread in the stream (depth)"
assert_eq 0 "$(rcall XPENDING q.pause.work taskmill | head -1)" "nothing pending on a paused task"
for ((i = 1; i <= N; i++)); do
	assert_eq 200 "$(http_code /ping "${PORTS[i]}")" "/ping of daemon $i while paused"
	assert_eq 200 "$(http_code /healthz "${PORTS[i]}")" "/healthz of daemon $i while paused"
done
curl -sf -m 5 "http://127.0.0.1:${PORTS[2]}/status" >"$TEST_DIR/status.json"
assert_eq true "$(jq '.tasks.work.paused' "$TEST_DIR/status.json")" "/status paused of work"
assert_eq false "$(jq '.tasks.other.paused' "$TEST_DIR/status.json")" "/status paused of other"

# ---- a daemon restarted during the pause reads nothing of the task
DAEMON_PID=${PIDS[2]}
v=$(metric taskmill_tasks_total 'task="work",outcome="success"' "${PORTS[2]}")
GONE_RUNS=${v%.*}
stop_daemon
start_daemon "${CONFS[2]}"
PIDS[2]=$DAEMON_PID
wait_ping "${PORTS[2]}" 60
# ready means its lane looked once: it read the pause state before that
assert_eq 1 "$(paused_on 2)" "the restarted daemon's pause gauge once ready"
sleep 2
assert_eq "$BEFORE" "$(runs work)" "runs of the paused task after a restart"
assert_eq 30 "$(lag)" "entries still waiting after a restart"
grep -q "paused: reading nothing from stream 'q.pause.work'" "$DAEMON_LOG" ||
	fail "the restarted daemon did not log the pause"

# ---- resume through daemon 3's configuration
tm resume -c "${CONFS[3]}" work
assert_eq 0 "$TM_RC" "taskmill resume exit status: $(cat "$TM_ERR")"
assert_eq "resumed task 'work'" "$(cat "$TM_OUT")" "taskmill resume output"
assert_eq 0 "$(rcli EXISTS q.pause.work.paused.taskmill)" "the pause key is gone"
wait_until 'all_paused 0' 30
wait_until '[[ $(runs work) == $((BEFORE + 30)) ]]' 60
assert_eq 0 "$(lag)" "nothing left unread after the resume"

# a resume without a pause is no error; usage errors exit 2
tm resume -c "${CONFS[1]}" work
assert_eq 0 "$TM_RC" "resume of a running task"
tm pause -c "${CONFS[1]}" nosuch
assert_eq 2 "$TM_RC" "pause of an unknown task"
tm pause -c "${CONFS[1]}"
assert_eq 2 "$TM_RC" "pause without a task"
tm pause -c "${CONFS[1]}" work other
assert_eq 2 "$TM_RC" "pause of two tasks"
assert_eq 0 "$(paused_on 1)" "no pause left by the refused commands"

for ((i = 1; i <= N; i++)); do
	DAEMON_PID=${PIDS[i]}
	stop_daemon
done
true
