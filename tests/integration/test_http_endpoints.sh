# Every endpoint's status codes, content types and JSON fields: /ping,
# /healthz, /status (the shape of DESIGN.md, counts, rates, percentiles),
# /metrics (every family, promtool clean, queue depth / pending /
# dead-letter depth read from the broker), 404 and 405.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq promtool

CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 <<YAML
tasks:
  add: { plugin: add.so, queue: q.add, dead_letter: q.add.dead }
  noop: { plugin: noop.so, queue: q.noop, prefetch: 64 }
  slow.one: { plugin: sleep.so, queue: q.slow, prefetch: 1 }
YAML
# two 7 s sleeps, one at a time: for 7 s one is pending and one waits in
# the queue, longer than the 5 s between two reads of the broker's counts
xadd_bulk q.slow 2 '{"ms":7000,"n":%d}'

start_daemon "$CONF"
wait_ping

# ---- probes
expect_code 200 /ping
expect_json '. == {"status":"ok"}' "/ping body"
assert_match '^application/json' "$(resp_header Content-Type)" "/ping Content-Type"
expect_code 200 /healthz
expect_json '.status == "ok"' "/healthz body"
expect_code 200 -I /ping
expect_code 200 -I /healthz

# ---- broker-side counts, read every few seconds: while the first sleep
# runs, one entry is pending and one waits
wait_until '[[ $(metric taskmill_queue_pending "task=\"slow.one\"") == 1 && $(metric taskmill_queue_depth "task=\"slow.one\"") == 1 ]]' 10

# ---- 404 and 405
expect_code 404 /nope
expect_code 404 /index.html # the console is at /
expect_code 404 /ping/
expect_code 404 /metrics.txt
expect_json '.error == "not found"' "404 body"
for m in POST PUT DELETE PATCH OPTIONS; do
	expect_code 405 -X "$m" /ping
	assert_match 'GET' "$(resp_header Allow)" "Allow header of 405 ($m)"
done
expect_code 405 -X POST -d '{"a":1}' /status
expect_code 405 -X DELETE /metrics
expect_json '.error == "method not allowed"' "405 body"
# a query string does not change the path
expect_code 200 '/ping?verbose=1'
# a GET with a body is answered as a GET
expect_code 200 -X GET -H 'Content-Type: application/json' -d '{"x":1}' /healthz

# ---- work to count: 30 noop, 2 add successes, 1 reject, 1 invalid body
xadd_bulk q.noop 30 '{"n":%d}'
emit "$CONF" add '{"a":2,"b":3}' >/dev/null
emit "$CONF" add '{"a":-7,"b":7}' >/dev/null
emit "$CONF" add '{"a":"x","b":1}' >/dev/null
rcall XADD q.add '*' body 'not json' >/dev/null
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 30 20
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 2 20
wait_metric taskmill_tasks_total 'task="add",outcome="rejected"' 1 20
wait_metric taskmill_tasks_total 'task="add",outcome="invalid"' 1 20

# ---- /status
expect_code 200 /status
assert_match '^application/json' "$(resp_header Content-Type)" "/status Content-Type"
expect_json 'keys == ["broker","config","pool","tasks","uptime_seconds","version"]' "top-level keys"
expect_json '.config.generation == 1 and .config.last_reload_successful == true' "config generation at start"
expect_json '.version | type == "string" and length > 0' "version"
expect_json '.uptime_seconds | type == "number" and . >= 0' "uptime_seconds"
expect_json '.broker | keys == ["connected","kind","node","nodes","url"]' "broker keys"
expect_json ".broker.node == \"redis://127.0.0.1:$REDIS_PORT/0\" and .broker.nodes == [{\"node\":\"redis://127.0.0.1:$REDIS_PORT/0\",\"up\":true}]" "broker node and nodes"
expect_json '.broker.kind == "redis" and .broker.connected == true' "broker kind/connected"
expect_json ".broker.url == \"redis://127.0.0.1:$REDIS_PORT/0\"" "broker url"
expect_json '.pool == {"kind":"thread","size":2,"busy":.pool.busy,"saturation":.pool.saturation,"stuck":[]}' "pool kind/size, no stuck run"
expect_json '.pool.busy | type == "number" and . >= 0 and . <= 2' "pool busy"
expect_json '.tasks | keys == ["add","noop","slow.one"]' "task names"
for t in add noop slow.one; do
	expect_json ".tasks[\"$t\"] | keys == [\"circuit\",\"dead_lettered\",\"delayed_due\",\"inflight\",\"oldest_age_seconds\",\"outcomes\",\"p50_ms\",\"p99_ms\",\"paused\",\"queue\",\"queue_lag\",\"rate_1s\",\"rate_60s\",\"retries\",\"scheduled\"]" "keys of task $t"
	expect_json ".tasks[\"$t\"].outcomes | keys == [\"crashed\",\"duplicate\",\"error\",\"invalid\",\"rejected\",\"success\",\"timeout\"]" "outcomes of task $t"
	expect_json "[.tasks[\"$t\"] | .inflight, .retries, .dead_lettered, .rate_1s, .rate_60s, .p50_ms, .p99_ms, .outcomes[]] | all(type == \"number\" and . >= 0)" "numbers of task $t"
done
expect_json '.tasks.add.queue == "q.add" and .tasks.noop.queue == "q.noop"' "queues"
expect_json '.tasks.noop.outcomes.success == 30' "noop successes"
expect_json '.tasks.add.outcomes == {"success":2,"error":0,"rejected":1,"timeout":0,"crashed":0,"invalid":1,"duplicate":0}' "add outcomes"
expect_json '.tasks.add.dead_lettered == 2 and .tasks.add.retries == 0' "add dead letters"
# rates count complete seconds: once the second of the work is over, the
# 30 noop show in rate_60s (a mean over the seconds of uptime, up to 60)
status_rate() {
	req /status
	jq -e "$1" "$RESP_BODY" >/dev/null
}
wait_until 'status_rate ".tasks.noop.rate_60s > 0"' 5
expect_json '.tasks.noop.rate_60s > 0 and .tasks.noop.rate_60s <= 30' "noop rate_60s"
expect_json '.tasks.noop.rate_1s >= 0 and .tasks.noop.rate_1s <= 30' "noop rate_1s"
expect_json '.tasks.noop.p50_ms <= .tasks.noop.p99_ms' "noop p50 <= p99"


# ---- /metrics
expect_code 200 /metrics
assert_eq "text/plain; version=0.0.4; charset=utf-8" "$(resp_header Content-Type)" "/metrics Content-Type"
lint=$(promtool check metrics <"$RESP_BODY" 2>&1) || fail "promtool check metrics failed: $lint"
assert_eq "" "$lint" "promtool check metrics output"
for fam in taskmill_tasks_total:counter taskmill_retries_total:counter \
	taskmill_task_duration_seconds:histogram taskmill_tasks_inflight:gauge \
	taskmill_pool_size:gauge taskmill_pool_busy:gauge taskmill_broker_up:gauge \
	taskmill_broker_reconnects_total:counter taskmill_worker_restarts_total:counter \
	taskmill_dead_letter_total:counter taskmill_rate_limited_total:counter \
	taskmill_replies_refused_total:counter \
	taskmill_queue_depth:gauge taskmill_runs_stuck:gauge \
	taskmill_queue_pending:gauge taskmill_dead_letter_depth:gauge \
	taskmill_build_info:gauge process_resident_memory_bytes:gauge \
	process_cpu_seconds_total:counter process_open_fds:gauge \
	process_start_time_seconds:gauge; do
	grep -qx "# TYPE ${fam%%:*} ${fam##*:}" "$RESP_BODY" || fail "/metrics has no '# TYPE ${fam%%:*} ${fam##*:}'"
	grep -q "^# HELP ${fam%%:*} ." "$RESP_BODY" || fail "/metrics has no HELP for ${fam%%:*}"
done
grep -q '^taskmill_build_info{version="[^"]*"} 1$' "$RESP_BODY" || fail "taskmill_build_info sample"
grep -qx 'taskmill_runs_stuck{task="noop"} 0' "$RESP_BODY" || fail "taskmill_runs_stuck{noop} sample"
grep -q '^taskmill_task_duration_seconds_bucket{task="noop",le="0.0001"} ' "$RESP_BODY" || fail "100 us bucket"
grep -q '^taskmill_task_duration_seconds_bucket{task="noop",le="300"} ' "$RESP_BODY" || fail "5 min bucket"
assert_eq 1 "$(metric taskmill_broker_up)" "taskmill_broker_up"
assert_eq 2 "$(metric taskmill_pool_size)" "taskmill_pool_size"
assert_eq 2 "$(metric taskmill_dead_letter_total 'task="add"')" "taskmill_dead_letter_total{add}"
assert_eq 30 "$(metric taskmill_task_duration_seconds_count 'task="noop"')" "noop durations counted"
# 3 add runs (an invalid body counts too when its check timed it)
assert_ge 3 "$(metric taskmill_task_duration_seconds_count 'task="add"')" "add durations counted"
assert_le 4 "$(metric taskmill_task_duration_seconds_count 'task="add"')" "add durations counted"
rss=$(metric process_resident_memory_bytes)
assert_ge 1000000 "${rss%.*}" "process_resident_memory_bytes"
fds=$(metric process_open_fds)
assert_ge 5 "$fds" "process_open_fds"

wait_metric taskmill_dead_letter_depth 'task="add"' 2 15
assert_eq 2 "$(xlen q.add.dead)" "XLEN q.add.dead"

# percentiles of the 7 s sleeps, once one has run
wait_metric taskmill_tasks_total 'task="slow.one",outcome="success"' 1 25
expect_code 200 /status
expect_json '.tasks["slow.one"].p50_ms >= 6900 and .tasks["slow.one"].p50_ms < 20000' "sleep p50_ms"
expect_json '.tasks["slow.one"].p99_ms >= .tasks["slow.one"].p50_ms' "sleep p99_ms"
# the broker's counts drain to zero once both sleeps ran
wait_metric taskmill_tasks_total 'task="slow.one",outcome="success"' 2 20
wait_until 'has_sample "taskmill_queue_depth{task=\"slow.one\"} 0"' 15
wait_until 'has_sample "taskmill_queue_pending{task=\"slow.one\"} 0"' 15
has_sample 'taskmill_queue_depth{task="noop"} 0' || fail "queue depth of noop is not 0"
has_sample 'taskmill_dead_letter_depth{task="noop"} 0' || fail "dead-letter depth of noop is not 0"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
