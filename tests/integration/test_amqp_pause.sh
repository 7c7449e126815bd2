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
. "$TM_SRCDIR/tests/integration/lib_pause.sh"
need_tools jq curl

TOKEN=amqp-pause-token
AUTH=(-H "Authorization: Bearer $TOKEN")
PAUSE_AUTH=("${AUTH[@]}")

# the broker's part of the scenario (lib_pause.sh)
write_daemon() {
	write_amqp_config "$1" pool_size=2 <<YAML
tasks:
  work: { plugin: noop.so, queue: $AQ.work, prefetch: 4 }
  other: { plugin: noop.so, queue: $AQ.other }
YAML
	sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$1"
}
publish() {
	amqptool publish "$AQ.$1" "$2" '{"n":%d}' >/dev/null
}
ready_work() {
	ready_count "$AQ.work"
}
# control: the messages in the task's control queue "<queue>.paused"
control() {
	ready_count "$AQ.work.paused"
}

pause_setup write_daemon
pause_held publish ready_work control 90
pause_restart_one ready_work "paused: not consuming queue '$AQ.work'" 90

# ---- resume through daemon 3's API
HTTP_PORT=${PORTS[3]}
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/resume
expect_json '. == {"name": "work", "paused": false}' "resume answers the new state"
pause_resumed ready_work control

# ---- pause through daemon 3's API, resume through the CLI
expect_code 401 -X POST /api/v1/tasks/work/pause
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/pause
expect_json '. == {"name": "work", "paused": true}' "pause answers the new state"
assert_eq 1 "$(control)" "one message in the control queue"
wait_until 'pause_all_paused 1' 30
tm resume -c "${CONFS[2]}" work
assert_eq 0 "$TM_RC" "taskmill resume exit status: $(cat "$TM_ERR")"
wait_until 'pause_all_paused 0' 30
publish work 5
wait_until '[[ $(pause_runs work) == $((BEFORE + 35)) ]]' 60
pause_stop_all

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
