# Traces through Redis, end to end with real parts: a producer traced by
# the OpenTelemetry SDK sends messages through ioredis with its context
# injected (traceparent, tracestate); taskmill runs them and exports one
# CONSUMER span per run to a test OTLP/HTTP receiver, which decodes them
# with the vendored official protos. Asserted: the same trace id, parent =
# the producer's span, every named attribute, status ERROR with the
# outcome on a failure, one span per attempt across a retry, the span of a
# replayed dead letter in the same trace, a malformed traceparent ignored
# (a new root), the tracestate carried on, `taskmill emit` (now and
# delayed) starting a trace with its PRODUCER span, and the export
# counted.
. "$TM_SRCDIR/tests/integration/lib_otel.sh"
otlp_start
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
telemetry:
  otlp_endpoint: http://127.0.0.1:$OTLP_PORT
  service_name: trace-test
  headers: { x-test-header: sent }
tasks:
  add: { plugin: add.so, queue: q.add }
  fail: { plugin: fail.so, queue: q.fail, max_retries: 1, backoff: 100ms }
YAML
start_daemon "$CONF"
wait_ping
URL=redis://127.0.0.1:$REDIS_PORT/0

# a success
produce_and_trace redis "$URL" q.add '{"a":1,"b":2}'
s=$RUN_SPAN
assert_eq trace-test "$(jq -r .service <<<"$s")" "service.name"
assert_eq sent "$(jq -r .header <<<"$s")" "telemetry.headers sent"
assert_eq 0 "$(jq -r .status_code <<<"$s")" "status UNSET on success"
assert_eq 1 "$(($(jq -r .flags <<<"$s") & 1))" "sampled flag"
assert_run_attrs "$s" redis q.add "$P_ID" taskmill add 1 success
start=$(jq -r .start_ns <<<"$s")
end=$(jq -r .end_ns <<<"$s")
(( end >= start )) || fail "the span ends ($end) before it starts ($start)"
# its start within a minute of now (epoch ns)
now_ns=$(($(now_ms) * 1000000))
(( start > now_ns - 60000000000 && start <= now_ns )) || fail "span start $start is not around now ($now_ns)"

# a failure: one span per attempt (1, then the retry 2), each ERROR
# with the outcome, then dead-lettered; its replay runs in the same trace
p=$(produce redis "$URL" q.fail '{"mode":"error"}')
ftrace=$(jq -r .trace_id <<<"$p")
fspan=$(jq -r .span_id <<<"$p")
wait_spans ".trace_id == \"$ftrace\"" 2
wait_until "[[ \$(xlen q.fail.dlq) == 1 ]]" 20
for attempt in 1 2; do
	s=$(spans_where ".trace_id == \"$ftrace\" and .attributes.\"taskmill.attempt\" == $attempt")
	assert_eq 1 "$(grep -c . <<<"$s")" "one span for attempt $attempt"
	assert_eq "$fspan" "$(jq -r .parent_span_id <<<"$s")" "attempt $attempt: parent = the producer's span"
	assert_eq 2 "$(jq -r .status_code <<<"$s")" "attempt $attempt: status ERROR"
	assert_eq error "$(jq -r '.attributes."taskmill.outcome"' <<<"$s")" "attempt $attempt: outcome"
	assert_match '^error: ' "$(jq -r .status_message <<<"$s")" "attempt $attempt: the reason, outcome first"
	assert_eq fail "$(jq -r '.attributes."taskmill.task"' <<<"$s")" "attempt $attempt: task"
done
tm dlq -c "$CONF" replay fail --yes
assert_eq 0 "$TM_RC" "dlq replay exits 0: $(cat "$TM_ERR")"
wait_spans ".trace_id == \"$ftrace\"" 4
assert_eq 4 "$(spans_where ".trace_id == \"$ftrace\"" | grep -c .)" "the replay's runs (2 attempts) in the same trace"
assert_eq 4 "$(spans_where ".trace_id == \"$ftrace\" and .parent_span_id == \"$fspan\"" | grep -c .)" \
	"the replay's spans: parent = the producer's span"

# a malformed traceparent is ignored: the message runs, in a new trace
bad=00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01
mid=$(rcall XADD q.add '*' body '{"a":2,"b":3}' traceparent "$bad" tracestate x=1)
wait_spans ".attributes.\"messaging.message.id\" == \"$mid\"" 1
s=$(spans_where ".attributes.\"messaging.message.id\" == \"$mid\"")
assert_eq "" "$(jq -r .parent_span_id <<<"$s")" "malformed traceparent: a root"
assert_eq "" "$(jq -r .trace_state <<<"$s")" "malformed traceparent: its tracestate dropped"
assert_eq success "$(jq -r '.attributes."taskmill.outcome"' <<<"$s")" "malformed traceparent: the message ran"
assert_ne 4bf92f3577b34da6a3ce929d0e0e4736 "$(jq -r .trace_id <<<"$s")" "a new trace id"

# taskmill emit starts a trace: a PRODUCER span "send <queue>", the
# parent of the run's span; a delayed message keeps it while it waits
for how in now later; do
	if [[ $how == now ]]; then
		eid=$(emit "$CONF" add '{"a":5,"b":5}')
	else
		tm emit -c "$CONF" add '{"a":6,"b":6}' --delay 1s
		assert_eq 0 "$TM_RC" "emit --delay: $(cat "$TM_ERR")"
		eid=$(tr -d '[:space:]' <"$TM_OUT")
	fi
	if [[ $how == now ]]; then
		wait_spans ".kind == 4 and .attributes.\"messaging.message.id\" == \"$eid\"" 1
		ps=$(spans_where ".kind == 4 and .attributes.\"messaging.message.id\" == \"$eid\"")
		assert_eq "send q.add" "$(jq -r .name <<<"$ps")" "emit: the send span's name"
		assert_eq send "$(jq -r '.attributes."messaging.operation.type"' <<<"$ps")" "emit: operation send"
		assert_eq "" "$(jq -r .parent_span_id <<<"$ps")" "emit: a new trace"
		wait_spans ".kind == 5 and .trace_id == $(jq .trace_id <<<"$ps")" 1
		rs=$(spans_where ".kind == 5 and .trace_id == $(jq .trace_id <<<"$ps")")
		assert_eq "$eid" "$(jq -r '.attributes."messaging.message.id"' <<<"$rs")" "emit: the run of that message"
	else
		wait_spans ".kind == 4 and .name == \"send q.add\"" 2
		ps=$(spans_where ".kind == 4 and .name == \"send q.add\"" | tail -1)
		wait_spans ".kind == 5 and .trace_id == $(jq .trace_id <<<"$ps")" 1 30
		rs=$(spans_where ".kind == 5 and .trace_id == $(jq .trace_id <<<"$ps")")
	fi
	assert_eq "$(jq -r .span_id <<<"$ps")" "$(jq -r .parent_span_id <<<"$rs")" \
		"emit ($how): the run's parent is the send span"
done

# a parent that is not sampled is followed: no span
nid=$(rcall XADD q.add '*' body '{"a":3,"b":3}' traceparent 00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00)
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 5 20
# the daemon exported the runs' spans (emit's own went from its process)
total=$(spans_where '.kind == 5' | grep -c .)
wait_metric taskmill_spans_exported_total '' "$total" 20
assert_eq 0 "$(spans_where ".attributes.\"messaging.message.id\" == \"$nid\"" | grep -c .)" \
	"a parent not sampled: no span"
assert_eq 0 "$(metric taskmill_spans_dropped_total)" "nothing dropped"
assert_eq 0 "$(grep -c . "$OTLP_OUT.errors" 2>/dev/null || echo 0)" "every request decoded"
stop_daemon
