# The admin API on RabbitMQ: a message published through
# POST /api/v1/tasks/NAME/messages runs, with ?delay= after it; rejected ones are listed as dead
# letters (newest first, bodies as sent), replayed one and all, purged one
# and all; a dead-letter id that is not printable is refused.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-api-token
AUTH=(-H "Authorization: Bearer $TOKEN")
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: $AQ.add }
  rej: { plugin: fail.so, queue: $AQ.rej, on_error: reject }
YAML
sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$CONF"
grep -q 'token:' "$CONF" || fail "no token in the config"
start_daemon "$CONF"
wait_ping

expect_code 200 "${AUTH[@]}" /api/v1/tasks
expect_json '.broker.kind == "amqp" and (.tasks | length) == 2' "tasks on amqp"
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":2,"b":3}' /api/v1/tasks/add/messages
[[ -n $(jqr .id) && $(jqr .id) != null ]] || fail "no id for the published message"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 30
# a delayed message (?delay=, the delay queues) runs after its delay
start=$(now_ms)
expect_code 201 "${AUTH[@]}" -X POST -d '{"a":4,"b":4}' '/api/v1/tasks/add/messages?delay=3s'
[[ -n $(jqr .id) && $(jqr .id) != null ]] || fail "no id for the delayed message"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 2 60
assert_ge 2900 "$(($(now_ms) - start))" "the 3 s delay was kept"
expect_code 200 "${AUTH[@]}" /api/v1/tasks
expect_json '.tasks[0].scheduled == null' "scheduled: null on RabbitMQ"

for n in 1 2 3; do
	expect_code 201 "${AUTH[@]}" -X POST -d "{\"mode\":\"reject\",\"n\":$n}" /api/v1/tasks/rej/messages
	# one at a time, so that "newest first" has an order to check
	wait_metric taskmill_dead_letter_total 'task="rej"' "$n" 30
done
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json 'length == 3' "three dead letters"
expect_json '[.[].body | fromjson | .n] == [3, 2, 1]' "newest first, bodies as JSON text"
expect_json '.[0] | (.id | length > 0) and .attempts == 1 and (.error | length > 0)' "entry fields"
id3=$(jqr '.[0].id')
id2=$(jqr '.[1].id')

expect_code 400 "${AUTH[@]}" -X DELETE "/api/v1/tasks/rej/dead-letters/a%20b"
expect_code 200 "${AUTH[@]}" -X POST "/api/v1/tasks/rej/dead-letters/$id3/replay"
expect_json '.replayed == 1' "replay one"
wait_metric taskmill_dead_letter_total 'task="rej"' 4 30
expect_code 200 "${AUTH[@]}" -X DELETE "/api/v1/tasks/rej/dead-letters/$id2"
expect_json '.purged == 1' "purge one"
expect_code 404 "${AUTH[@]}" -X DELETE "/api/v1/tasks/rej/dead-letters/$id2"
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json 'length == 2 and ([.[].body | fromjson | .n] | sort) == [1, 3]' "after replay one and purge one"
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/rej/dead-letters/replay
expect_json '.replayed == 2' "replay all"
wait_metric taskmill_dead_letter_total 'task="rej"' 6 30
expect_code 200 "${AUTH[@]}" -X DELETE /api/v1/tasks/rej/dead-letters
expect_json '.purged == 2' "purge all"
expect_code 200 "${AUTH[@]}" /api/v1/tasks/rej/dead-letters
expect_json '. == []' "nothing left"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
