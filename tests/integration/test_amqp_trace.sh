# Traces through RabbitMQ: a producer traced by the OpenTelemetry SDK
# publishes through amqplib with its context in the headers traceparent
# and tracestate; taskmill exports one CONSUMER span per run: the same
# trace, parent = the producer's span, messaging.system rabbitmq and no
# consumer group, one span per attempt across a retry (the retry copy
# keeps the headers), and the replayed dead letter's run in the same
# trace.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_otel.sh"
otlp_start
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" <<YAML
telemetry: { otlp_endpoint: http://127.0.0.1:$OTLP_PORT }
tasks:
  add: { plugin: add.so, queue: $AQ.add }
  fail: { plugin: fail.so, queue: $AQ.fail, max_retries: 1, backoff: 100ms }
YAML
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60
URL=amqp://guest:guest@127.0.0.1:$RABBIT_PORT/

produce_and_trace amqp "$URL" "$AQ.add" '{"a":1,"b":2}'
# no consumer group on RabbitMQ
assert_run_attrs "$RUN_SPAN" rabbitmq "$AQ.add" "$P_ID" null add 1 success

p=$(produce amqp "$URL" "$AQ.fail" '{"mode":"error"}')
ftrace=$(jq -r .trace_id <<<"$p")
fspan=$(jq -r .span_id <<<"$p")
wait_spans ".trace_id == \"$ftrace\"" 2
for attempt in 1 2; do
	s=$(spans_where ".trace_id == \"$ftrace\" and .attributes.\"taskmill.attempt\" == $attempt")
	assert_eq 1 "$(grep -c . <<<"$s")" "one span for attempt $attempt"
	assert_eq "$fspan" "$(jq -r .parent_span_id <<<"$s")" "attempt $attempt: parent"
	assert_eq 2 "$(jq -r .status_code <<<"$s")" "attempt $attempt: status ERROR"
	assert_eq error "$(jq -r '.attributes."taskmill.outcome"' <<<"$s")" "attempt $attempt: outcome"
done
wait_until "[[ \$(ready_count $AQ.fail.dlq) == 1 ]]" 20
tm dlq -c "$CONF" replay fail --yes
assert_eq 0 "$TM_RC" "dlq replay exits 0: $(cat "$TM_ERR")"
wait_spans ".trace_id == \"$ftrace\"" 4
assert_eq 4 "$(spans_where ".trace_id == \"$ftrace\" and .parent_span_id == \"$fspan\"" | grep -c .)" \
	"the replayed dead letter's runs in the same trace"
stop_daemon
