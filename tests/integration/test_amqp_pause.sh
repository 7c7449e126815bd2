# Pause and resume on RabbitMQ across daemons: `taskmill pause` run
# against one daemon's configuration puts one message in the task's
# control queue "<queue>.paused" and stops the task on three daemons
# (each shows taskmill_task_paused 1; messages published 2 s after the
# pause stay ready in the queue while another task keeps flowing; /ping
# stays 200); a daemon restarted during the pause consumes nothing of the
# task; the API's resume on another daemon (with its token) restarts all
# three, which run everything that waited; the API's pause acts on its
# own daemon and on the others. A task whose every message is running
# (its intake waiting for room) receives nothing more once paused.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-pause-token
AUTH=(-H "Authorization: Bearer $TOKEN")
N=3
PORTS=()
CONFS=()
PIDS=()
for ((i = 1; i <= N; i++)); do
	CONFS[i]=$TEST_DIR/d$i.yaml
	HTTP_PORT=
	write_amqp_config "${CONFS[i]}" pool_size=2 <<YAML
tasks:
  work: { plugin: noop.so, queue: $AQ.work, prefetch: 4 }
  other: { plugin: noop.so, queue: $AQ.other }
YAML
	sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "${CONFS[i]}"
	PORTS[i]=$HTTP_PORT
done

GONE_RUNS=0
# runs TASK: successful runs of TASK over the daemons, stopped ones too.
runs() {
	local i s=$GONE_RUNS v
	for ((i = 1; i <= N; i++)); do
		v=$(metric taskmill_tasks_total "task=\"$1\",outcome=\"success\"" "${PORTS[i]}")
		s=$((s + ${v%.*}))
	done
	echo "$s"
}

paused_on() {
	metric taskmill_task_paused 'task="work"' "${PORTS[$1]}"
}

all_paused() {
	local i
	for ((i = 1; i <= N; i++)); do
		[[ $(paused_on "$i") == "$1" ]] || return 1
	done
}

# wait_since T0 MS: wait until MS milliseconds have passed since T0.
wait_since() {
	while (($(now_ms) < $1 + $2)); do sleep 0.1; done
}

for ((i = 1; i <= N; i++)); do
	start_daemon "${CONFS[i]}"
	PIDS[i]=$DAEMON_PID
done
for ((i = 1; i <= N; i++)); do
	wait_ping "${PORTS[i]}" 90
done
assert_eq 0 "$(paused_on 1)" "not paused at start"
amqptool publish "$AQ.work" 10 '{"n":%d}' >/dev/null
wait_until '[[ $(runs work) == 10 ]]' 60

# ---- pause through daemon 1's configuration
tm pause -c "${CONFS[1]}" work
assert_eq 0 "$TM_RC" "taskmill pause exit status: $(cat "$TM_ERR")"
assert_eq "paused task 'work'" "$(cat "$TM_OUT")" "taskmill pause output"
T0=$(now_ms)
assert_eq 1 "$(ready_count "$AQ.work.paused")" "one message in the control queue"
# 2 s after the pause every daemon has stopped consuming the task: what
# is published from then on stays in the queue (whatever the gauges show)
wait_since "$T0" 2000
BEFORE=$(runs work)
amqptool publish "$AQ.work" 30 '{"n":%d}' >/dev/null
wait_until 'all_paused 1' 30
note "every daemon showed the pause $(($(now_ms) - T0)) ms after it"
amqptool publish "$AQ.other" 5 '{"n":%d}' >/dev/null
wait_until '[[ $(runs other) == 5 ]]' 60
sleep 2
assert_eq "$BEFORE" "$(runs work)" "runs of the paused task"
assert_eq 30 "$(ready_count "$AQ.work")" "messages ready in the paused task's queue"
for ((i = 1; i <= N; i++)); do
	assert_eq 200 "$(http_code /ping "${PORTS[i]}")" "/ping of daemon $i while paused"
done
HTTP_PORT=${PORTS[1]}
expect_code 200 "${AUTH[@]}" /status
expect_json '.tasks.work.paused == true and .tasks.other.paused == false' "paused in /status"

# ---- a daemon restarted during the pause consumes nothing of the task
v=$(metric taskmill_tasks_total 'task="work",outcome="success"' "${PORTS[2]}")
GONE_RUNS=${v%.*}
DAEMON_PID=${PIDS[2]}
stop_daemon
start_daemon "${CONFS[2]}"
PIDS[2]=$DAEMON_PID
wait_ping "${PORTS[2]}" 90
assert_eq 1 "$(paused_on 2)" "the restarted daemon's gauge once ready"
sleep 2
assert_eq "$BEFORE" "$(runs work)" "runs of the paused task after a restart"
assert_eq 30 "$(ready_count "$AQ.work")" "messages still ready after a restart"
grep -q "paused: not consuming queue '$AQ.work'" "$DAEMON_LOG" ||
	fail "the restarted daemon did not log the pause"

# ---- resume through daemon 3's API
HTTP_PORT=${PORTS[3]}
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/resume
expect_json '. == {"name": "work", "paused": false}' "resume answers the new state"
assert_eq 0 "$(ready_count "$AQ.work.paused")" "the control queue is empty"
wait_until 'all_paused 0' 30
wait_until '[[ $(runs work) == $((BEFORE + 30)) ]]' 60
assert_eq 0 "$(ready_count "$AQ.work")" "nothing left in the queue"

# ---- pause through daemon 3's API, resume through the CLI
expect_code 401 -X POST /api/v1/tasks/work/pause
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/pause
expect_json '. == {"name": "work", "paused": true}' "pause answers the new state"
assert_eq 1 "$(ready_count "$AQ.work.paused")" "one message in the control queue"
wait_until 'all_paused 1' 30
tm resume -c "${CONFS[2]}" work
assert_eq 0 "$TM_RC" "taskmill resume exit status: $(cat "$TM_ERR")"
wait_until 'all_paused 0' 30
amqptool publish "$AQ.work" 5 '{"n":%d}' >/dev/null
wait_until '[[ $(runs work) == $((BEFORE + 35)) ]]' 60

for ((i = 1; i <= N; i++)); do
	DAEMON_PID=${PIDS[i]}
	stop_daemon
done

# ---- a task whose intake waits for room (prefetch reached, every message
# running) stops receiving too: the runs under way end, and nothing more
# comes, although no fetch happens while they run
CONF=$TEST_DIR/slow.yaml
write_amqp_config "$CONF" pool_size=2 <<YAML
tasks:
  slow: { plugin: sleep.so, queue: $AQ.slow, prefetch: 2 }
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 90
amqptool publish "$AQ.slow" 10 '{"ms":4000,"n":%d}' >/dev/null
wait_metric taskmill_tasks_inflight 'task="slow"' 2 30
tm pause -c "$CONF" slow
assert_eq 0 "$TM_RC" "taskmill pause slow: $(cat "$TM_ERR")"
wait_metric taskmill_task_paused 'task="slow"' 1 30
wait_metric taskmill_tasks_total 'task="slow",outcome="success"' 2 30
wait_metric taskmill_tasks_inflight 'task="slow"' 0 30
sleep 2
assert_eq 0 "$(metric taskmill_tasks_inflight 'task="slow"')" "nothing received after the runs under way"
assert_eq 2 "$(metric taskmill_tasks_total 'task="slow",outcome="success"')" "runs of the paused task"
assert_eq 8 "$(ready_count "$AQ.slow")" "messages ready in its queue"
tm resume -c "$CONF" slow
assert_eq 0 "$TM_RC" "taskmill resume slow: $(cat "$TM_ERR")"
wait_metric taskmill_tasks_inflight 'task="slow"' 2 30
stop_daemon
true
