# lib_otel.sh - the trace tests' parts: a test OTLP/HTTP receiver
# (otlp-receiver.mjs, decoding with the vendored opentelemetry-proto) and
# a producer traced with the OpenTelemetry SDK (otel-producer.js).
export NODE_PATH=$TM_SRCDIR/tests/integration/node_modules${TM_NODE_PATH:+:$TM_NODE_PATH}
node -e 'for (const p of ["@opentelemetry/api", "@opentelemetry/sdk-trace-base",
	"@opentelemetry/core", "protobufjs", "ioredis", "amqplib"]) require(p)' 2>/dev/null ||
	fail "npm @opentelemetry/api, sdk-trace-base, core, protobufjs, ioredis and amqplib are needed in tests/integration/node_modules (scripts/install-deps.sh)"

# otlp_start [MODE]: start the receiver on a free port; sets OTLP_PORT,
# OTLP_OUT (one JSON line per span received), OTLP_PID.
otlp_start() {
	OTLP_PORT=$(free_port)
	OTLP_OUT=$TEST_DIR/spans.jsonl
	: >"$OTLP_OUT"
	rm -f "$OTLP_OUT.ready"
	node "$TM_SRCDIR/tests/integration/otlp-receiver.mjs" "$OTLP_PORT" \
		"$OTLP_OUT" "${1:-ok}" >"$TEST_DIR/otlp-receiver.log" 2>&1 &
	OTLP_PID=$!
	tm_on_exit "kill $OTLP_PID 2>/dev/null"
	wait_until "[[ -f '$OTLP_OUT.ready' ]]" 20
}

# otlp_mode MODE: ok, 503 or slow from the next request on
otlp_mode() {
	echo "$1" >"$OTLP_OUT.mode"
}

# produce BROKER URL QUEUE BODY: send one message through the traced
# producer; prints its JSON line (trace_id, span_id, traceparent, id)
produce() {
	timeout 60 node "$TM_SRCDIR/tests/integration/otel-producer.js" "$@" ||
		fail "otel-producer.js $* failed"
}

# spans_where JQ_FILTER: the received spans (one JSON object a line) that
# the filter selects
spans_where() {
	jq -c "select($1)" "$OTLP_OUT"
}

# wait_spans JQ_FILTER COUNT [TIMEOUT]: until COUNT spans match
wait_spans() {
	wait_until "[[ \$(jq -c 'select($1)' '$OTLP_OUT' | grep -c .) -ge $2 ]]" "${3:-30}"
}

# assert_run_attrs SPAN SYSTEM QUEUE ID GROUP TASK ATTEMPT OUTCOME: every
# named attribute of a run's span (GROUP null: no consumer group)
assert_run_attrs() {
	local a
	a=$(jq -c .attributes <<<"$1")
	assert_eq "$2" "$(jq -r '."messaging.system"' <<<"$a")" messaging.system
	assert_eq "$3" "$(jq -r '."messaging.destination.name"' <<<"$a")" messaging.destination.name
	assert_eq "$4" "$(jq -r '."messaging.message.id"' <<<"$a")" messaging.message.id
	assert_eq "$5" "$(jq -r '."messaging.consumer.group.name"' <<<"$a")" messaging.consumer.group.name
	assert_eq process "$(jq -r '."messaging.operation.type"' <<<"$a")" messaging.operation.type
	assert_eq "$6" "$(jq -r '."taskmill.task"' <<<"$a")" taskmill.task
	assert_eq "$7" "$(jq -r '."taskmill.attempt"' <<<"$a")" taskmill.attempt
	assert_eq "$8" "$(jq -r '."taskmill.outcome"' <<<"$a")" taskmill.outcome
}

# produce_and_trace BROKER URL QUEUE BODY: send BODY through the traced
# producer (with a tracestate its remote parent carried), wait for the
# run's span and check its name, kind CONSUMER, parent (the producer's
# span) and tracestate; sets P_ID (the message id), P_SPAN (the
# producer's span id) and RUN_SPAN (the run's span, JSON)
produce_and_trace() {
	local p trace
	p=$(TRACESTATE=congo=t61rcWkgMzE produce "$@")
	trace=$(jq -r .trace_id <<<"$p")
	P_SPAN=$(jq -r .span_id <<<"$p")
	P_ID=$(jq -r .id <<<"$p")
	wait_spans ".trace_id == \"$trace\"" 1
	RUN_SPAN=$(spans_where ".trace_id == \"$trace\"")
	assert_eq "process $3" "$(jq -r .name <<<"$RUN_SPAN")" "span name"
	assert_eq 5 "$(jq -r .kind <<<"$RUN_SPAN")" "span kind (CONSUMER)"
	assert_eq "$P_SPAN" "$(jq -r .parent_span_id <<<"$RUN_SPAN")" "parent = the producer's span"
	assert_ne "$P_SPAN" "$(jq -r .span_id <<<"$RUN_SPAN")" "a span of its own"
	assert_eq congo=t61rcWkgMzE "$(jq -r .trace_state <<<"$RUN_SPAN")" "tracestate carried on"
}
