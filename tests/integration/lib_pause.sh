# shellcheck shell=bash
# The pause scenario across three daemons that test_pause_redis.sh and
# test_amqp_pause.sh both run, each on its broker. Sourced by a test
# after lib.sh (and the broker's own library); not a test itself (run.sh
# runs test_*.sh only):
#
#   . "$TM_SRCDIR/tests/integration/lib_pause.sh"
#
# The broker's part comes in as the names of functions of the test:
#   WRITE FILE I     writes daemon I's configuration to FILE, with the
#                    tasks "work" and "other" on the same lane, and sets
#                    HTTP_PORT to its port (as write_config does)
#   PUBLISH TASK K   publishes K messages ({"n": ...}) to TASK's queue
#   DEPTH            prints how many messages of task work wait unread
#   MARK             prints 1 while the broker holds the pause of task
#                    work, 0 when it holds none
#
# The daemons: CONFS[i], PORTS[i], PIDS[i], i = 1..PAUSE_N. PAUSE_AUTH
# (an array, empty by default) is added to every /status request.

PAUSE_N=3
CONFS=()
PORTS=()
PIDS=()
PAUSE_AUTH=()
# runs of task work before the pause (set by pause_held)
BEFORE=0
# successful runs of work by daemons stopped since (pause_restart_one)
GONE_RUNS=0

# pause_setup WRITE: writes the daemons' configurations.
pause_setup() {
	local i
	for ((i = 1; i <= PAUSE_N; i++)); do
		CONFS[i]=$TEST_DIR/d$i.yaml
		HTTP_PORT=
		"$1" "${CONFS[i]}" "$i"
		PORTS[i]=$HTTP_PORT
	done
}

# pause_runs TASK: the successful runs of TASK summed over the daemons,
# those of stopped daemons (GONE_RUNS, task work) included.
pause_runs() {
	local i s=0 v
	[[ $1 == work ]] && s=$GONE_RUNS
	for ((i = 1; i <= PAUSE_N; i++)); do
		v=$(metric taskmill_tasks_total "task=\"$1\",outcome=\"success\"" "${PORTS[i]}")
		s=$((s + ${v%.*}))
	done
	echo "$s"
}

# pause_paused_on I: daemon I's gauge for task work.
pause_paused_on() {
	metric taskmill_task_paused 'task="work"' "${PORTS[$1]}"
}

# pause_all_paused VALUE: every daemon's gauge is VALUE.
pause_all_paused() {
	local i
	for ((i = 1; i <= PAUSE_N; i++)); do
		[[ $(pause_paused_on "$i") == "$1" ]] || return 1
	done
}

# pause_start_all WAIT_S: starts every daemon, waits WAIT_S s at most
# for each to be ready.
pause_start_all() {
	local i
	for ((i = 1; i <= PAUSE_N; i++)); do
		start_daemon "${CONFS[i]}"
		PIDS[i]=$DAEMON_PID
	done
	for ((i = 1; i <= PAUSE_N; i++)); do
		DAEMON_PID=${PIDS[i]}
		wait_ping "${PORTS[i]}" "$1"
	done
}

# pause_stop_all: stops every daemon.
pause_stop_all() {
	local i
	for ((i = 1; i <= PAUSE_N; i++)); do
		DAEMON_PID=${PIDS[i]}
		stop_daemon
	done
}

# pause_held PUBLISH DEPTH MARK WAIT_S: the daemons run task work; then
# `taskmill pause` through daemon 1's configuration stops it on every
# daemon: 2 s after the pause what is published stays unread (whatever
# the gauges show), every gauge shows 1, the other task of the same lane
# keeps flowing, the daemons stay ready and /status shows the pause.
# Sets BEFORE. The task is left paused.
pause_held() {
	local publish=$1 depth=$2 mark=$3 wait_s=$4 t0 i
	pause_start_all "$wait_s"
	assert_eq 0 "$(pause_paused_on 1)" "not paused at start"
	"$publish" work 10
	wait_until '[[ $(pause_runs work) == 10 ]]' 60

	tm pause -c "${CONFS[1]}" work
	assert_eq 0 "$TM_RC" "taskmill pause exit status: $(cat "$TM_ERR")"
	assert_eq "paused task 'work'" "$(cat "$TM_OUT")" "taskmill pause output"
	t0=$(now_ms)
	assert_eq 1 "$("$mark")" "the broker holds the pause"
	while (($(now_ms) < t0 + 2000)); do sleep 0.1; done
	BEFORE=$(pause_runs work)
	"$publish" work 30
	wait_until 'pause_all_paused 1' 30
	note "every daemon showed the pause $(($(now_ms) - t0)) ms after it"
	"$publish" other 5
	wait_until '[[ $(pause_runs other) == 5 ]]' 60
	# two more poll periods: nothing of the paused task is read
	sleep 2
	assert_eq "$BEFORE" "$(pause_runs work)" "runs of the paused task"
	assert_eq 30 "$("$depth")" "messages of the paused task waiting unread"
	for ((i = 1; i <= PAUSE_N; i++)); do
		assert_eq 200 "$(http_code /ping "${PORTS[i]}")" "/ping of daemon $i while paused"
		assert_eq 200 "$(http_code /healthz "${PORTS[i]}")" "/healthz of daemon $i while paused"
	done
	curl -sf -m 5 "${PAUSE_AUTH[@]}" "http://127.0.0.1:${PORTS[2]}/status" \
		>"$TEST_DIR/status.json" || fail "/status of daemon 2"
	assert_eq true "$(jq '.tasks.work.paused' "$TEST_DIR/status.json")" "/status paused of work"
	assert_eq false "$(jq '.tasks.other.paused' "$TEST_DIR/status.json")" "/status paused of other"
}

# pause_restart_one DEPTH LOG_LINE WAIT_S: daemon 2, restarted during the
# pause, reads nothing of the task (the state is in the broker), and
# logs LOG_LINE (a grep pattern) saying so.
pause_restart_one() {
	local depth=$1 line=$2 wait_s=$3 v
	DAEMON_PID=${PIDS[2]}
	v=$(metric taskmill_tasks_total 'task="work",outcome="success"' "${PORTS[2]}")
	GONE_RUNS=$((GONE_RUNS + ${v%.*}))
	stop_daemon
	start_daemon "${CONFS[2]}"
	PIDS[2]=$DAEMON_PID
	wait_ping "${PORTS[2]}" "$wait_s"
	# ready means its lane looked once: it read the pause state before that
	assert_eq 1 "$(pause_paused_on 2)" "the restarted daemon's pause gauge once ready"
	sleep 2
	assert_eq "$BEFORE" "$(pause_runs work)" "runs of the paused task after a restart"
	assert_eq 30 "$("$depth")" "messages still waiting after a restart"
	grep -q "$line" "$DAEMON_LOG" || fail "the restarted daemon did not log the pause"
}

# pause_resumed DEPTH MARK: after a resume, the pause is gone from the
# broker and from every daemon, which run everything that waited, once.
pause_resumed() {
	local depth=$1 mark=$2
	assert_eq 0 "$("$mark")" "the broker holds no pause"
	wait_until 'pause_all_paused 0' 30
	wait_until '[[ $(pause_runs work) == $((BEFORE + 30)) ]]' 60
	assert_eq 0 "$("$depth")" "nothing left unread after the resume"
}
