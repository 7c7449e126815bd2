# The pause API on Redis: POST /api/v1/tasks/NAME/pause and .../resume
# follow the token rules (403 naming http.token without one configured,
# 401 without a token, 403 with a wrong one), check the route and the
# task, answer the task's new state, and act on the daemon at once; the
# state shows in GET /api/v1/tasks, /status and taskmill_task_paused, in
# Redis, and in what is read (the paused task's messages wait; the other
# task runs); /ping stays 200.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN='pause-T0ken'
AUTH=(-H "Authorization: Bearer $TOKEN")
TASKS=$(
	cat <<YAML
tasks:
  work: { plugin: noop.so, queue: q.papi.work }
  other: { plugin: noop.so, queue: q.papi.other }
YAML
)

# ---- without http.token: read-only, the state is shown
CONF=$TEST_DIR/open.yaml
write_http_config "$CONF" <<<"$TASKS"
start_daemon "$CONF"
wait_ping
expect_code 200 /api/v1/tasks
expect_json '[.tasks[].paused] == [false, false]' "paused in GET /api/v1/tasks"
for op in pause resume; do
	expect_code 403 -X POST "/api/v1/tasks/work/$op"
	expect_json '.error | test("http.token")' "$op refused naming http.token"
done
assert_eq 0 "$(rcli EXISTS q.papi.work.paused.taskmill)" "no pause from a refused request"
assert_eq 0 "$(metric taskmill_task_paused 'task="work"')" "gauge before any pause"
stop_daemon

# ---- with http.token
CONF=$TEST_DIR/token.yaml
write_http_config "$CONF" token="$TOKEN" <<<"$TASKS"
start_daemon "$CONF"
wait_ping
expect_code 401 -X POST /api/v1/tasks/work/pause
expect_code 403 -H "Authorization: Bearer wrong" -X POST /api/v1/tasks/work/pause
expect_code 404 "${AUTH[@]}" -X POST /api/v1/tasks/nope/pause
expect_json '.error | test("nope")' "unknown task named"
expect_code 405 "${AUTH[@]}" /api/v1/tasks/work/pause
assert_match POST "$(resp_header Allow)" "Allow of .../pause"
expect_code 405 "${AUTH[@]}" -X DELETE /api/v1/tasks/work/resume
expect_code 404 "${AUTH[@]}" -X POST /api/v1/tasks/work/pause/now
assert_eq 0 "$(rcli EXISTS q.papi.work.paused.taskmill)" "no pause from refused requests"

expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/pause
expect_json '. == {"name": "work", "paused": true}' "pause answers the new state"
assert_eq 1 "$(rcli EXISTS q.papi.work.paused.taskmill)" "the pause key is set"
# the daemon that paused the task reads the state again at once
wait_metric taskmill_task_paused 'task="work"' 1 10
assert_eq 0 "$(metric taskmill_task_paused 'task="other"')" "other task's gauge"
expect_code 200 "${AUTH[@]}" /api/v1/tasks
expect_json '[.tasks[] | {(.name): .paused}] | add == {"work": true, "other": false}' "paused in GET /api/v1/tasks"
expect_code 200 "${AUTH[@]}" /status
expect_json '.tasks.work.paused == true and .tasks.other.paused == false' "paused in /status"
assert_eq 200 "$(http_code /ping)" "/ping while paused"

for ((k = 0; k < 10; k++)); do
	rcli XADD q.papi.work '*' body '{}' >/dev/null
	rcli XADD q.papi.other '*' body '{}' >/dev/null
done
wait_metric taskmill_tasks_total 'task="other",outcome="success"' 10 30
sleep 2
assert_eq 0 "$(metric taskmill_tasks_total 'task="work",outcome="success"')" "runs of the paused task"
# the depth grows (the refresher reads it every few seconds)
depth_is() {
	req "${AUTH[@]}" /api/v1/tasks && [[ $(jqr '.tasks[0].queue_depth') == "$1" ]]
}
wait_until 'depth_is 10' 30

# pausing again is no error
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/pause
expect_json '.paused == true' "pause twice"

expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/work/resume
expect_json '. == {"name": "work", "paused": false}' "resume answers the new state"
assert_eq 0 "$(rcli EXISTS q.papi.work.paused.taskmill)" "the pause key is gone"
wait_metric taskmill_tasks_total 'task="work",outcome="success"' 10 30
assert_eq 0 "$(metric taskmill_task_paused 'task="work"')" "gauge after the resume"
stop_daemon
true
