# The broker's backstop on quorum queues: the task queue is declared with
# x-delivery-limit = max_retries + 6 (none for max_retries -1), above the
# delivery at which taskmill dead-letters a message itself. A message
# taken by a consumer that never settles it (here a raw client that
# disconnects after basic.get) is dead-lettered by RabbitMQ once the limit
# is spent, reaches taskmill's dead-letter queue with its x-death reason,
# and `dlq list` says why. A later change of max_retries keeps the existing
# queue's limit (RabbitMQ cannot change a queue argument) with a warning,
# and the daemon starts. The dead-letter queue has no limit: browsing it
# (read unacknowledged, give back) many times loses no dead letter.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

QA=$AQ.limited
QB=$AQ.unlimited
CONF=$TEST_DIR/taskmill.yaml
TOKEN=quorum-limit-token
command -v curl >/dev/null || skip "needs curl"

# conf MAX_RETRIES_A MAX_RETRIES_B: task a on QA, task b on QB
conf() {
	write_amqp_config "$CONF" pool_size=2 amqp='{ queue_type: quorum }' <<YAML
tasks:
  a:
    plugin: fail.so
    queue: $QA
    max_retries: $1
    backoff: 100ms
  b:
    plugin: fail.so
    queue: $QB
    max_retries: $2
    backoff: 100ms
YAML
	sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$CONF"
	grep -q 'token:' "$CONF" || fail "no token in the config"
}

# api_dead_letters TASK: entries the daemon's API lists for TASK
api_dead_letters() {
	local body
	body=$(curl -sf -H "Authorization: Bearer $TOKEN" \
		"http://127.0.0.1:$HTTP_PORT/api/v1/tasks/$1/dead-letters?limit=100") ||
		fail "GET /api/v1/tasks/$1/dead-letters failed"
	grep -o '"origin_id"' <<<"$body" | wc -l
}

# args QUEUE: the queue's arguments as rabbitmqctl lists them
args() {
	rabbitctl list_queues -q name arguments 2>/dev/null |
		awk -v q="$1" '$1 == q {sub(/^[^ \t]+[ \t]+/, ""); print}'
}

# limit_of QUEUE: the queue's x-delivery-limit, or "none"
limit_of() {
	local a
	a=$(args "$1")
	[[ -n $a ]] || fail "queue $1 is not listed"
	if [[ $a =~ \{\"x-delivery-limit\",([0-9]+)\} ]]; then
		echo "${BASH_REMATCH[1]}"
	else
		echo none
	fi
}

# 1. the declarations: a with max_retries 1, b unlimited
conf 1 -1
start_daemon "$CONF"
wait_ping
note "arguments of $QA: $(args "$QA")"
assert_eq 7 "$(limit_of "$QA")" "x-delivery-limit of $QA (max_retries 1)"
assert_eq none "$(limit_of "$QB")" "x-delivery-limit of $QB (max_retries -1)"
assert_eq none "$(limit_of "$QA.dlq")" "x-delivery-limit of the dead-letter queue"
assert_match 'quorum' "$(args "$QA.dlq")" "arguments of the dead-letter queue"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

# 2. a message whose every consumer disconnects before it settles
poison=$(emit_amqp "$CONF" a '{"mode":"ok"}')
takes=0
while :; do
	got=$(amqptool take "$QA")
	[[ $got == empty ]] && break
	takes=$((takes + 1))
	assert_eq "$((takes - 1))" "$got" "x-delivery-count of delivery $takes"
	((takes <= 30)) || fail "the message is still in $QA after 30 deliveries that were never settled"
done
note "$takes deliveries before RabbitMQ dead-lettered the message"
assert_eq 8 "$takes" "deliveries (x-delivery-limit 7: the 8th return dead-letters)"
wait_until "[[ \$(ready_count $QA.dlq) == 1 ]]" 20
tm dlq -c "$CONF" list a
assert_eq 0 "$TM_RC" "dlq list exit status"
IFS=$'\t' read -r _ origin attempts _ error <"$TM_OUT"
assert_eq "$poison" "$origin" "origin of the dead letter"
assert_eq 0 "$attempts" "attempts of the dead letter (never run by taskmill)"
assert_eq "dead-lettered by RabbitMQ (delivery_limit in '$QA')" "$error" "error of the dead letter"

# 3. max_retries changed on both tasks: the daemon starts, each queue
# keeps the limit it was declared with, and the log says so
conf 3 2
start_daemon "$CONF"
wait_ping
wait_until "grep -q \"queue '$QB' keeps x-delivery-limit none\" \"\$DAEMON_LOG\"" 20
grep -qF "queue '$QA' keeps x-delivery-limit 7, set when it was declared; max_retries 3 asks for 9" "$DAEMON_LOG" ||
	fail "no warning that $QA keeps its limit"
grep -qF "queue '$QB' keeps x-delivery-limit none, set when it was declared; max_retries 2 asks for 8" "$DAEMON_LOG" ||
	fail "no warning that $QB keeps its lack of limit"
if grep -q 'PRECONDITION_FAILED' "$DAEMON_LOG"; then
	fail "a declaration was refused: $(grep PRECONDITION_FAILED "$DAEMON_LOG" | head -1)"
fi
assert_eq 7 "$(limit_of "$QA")" "x-delivery-limit of $QA after the change"
assert_eq none "$(limit_of "$QB")" "x-delivery-limit of $QB after the change"
# both tasks work: a reject each, dead-lettered by taskmill
emit_amqp "$CONF" a '{"mode":"reject"}' >/dev/null
emit_amqp "$CONF" a '{"mode":"reject"}' >/dev/null
emit_amqp "$CONF" b '{"mode":"reject"}' >/dev/null
wait_until "[[ \$(ready_count $QA.dlq) == 3 && \$(ready_count $QB.dlq) == 1 ]]" 30
# the CLI declares too, and is not refused either
tm emit -c "$CONF" b '{"mode":"reject"}'
assert_eq 0 "$TM_RC" "emit exit status after the change ($(head -c 300 "$TM_ERR"))"

# 4. browsing the dead-letter queue loses nothing, however often: more
# browses than the limit of the task queue and RabbitMQ 4's default (20)
# through the CLI and through the daemon's API
for ((i = 1; i <= 25; i++)); do
	if ((i % 2)); then
		n=$(dlq_lines "$CONF" a)
	else
		n=$(api_dead_letters a)
	fi
	assert_eq 3 "$n" "dead letters listed by browse $i"
done
assert_eq 3 "$(ready_count "$QA.dlq")" "dead letters in $QA.dlq after 25 browses"
tm dlq -c "$CONF" list a
grep -qF "dead-lettered by RabbitMQ (delivery_limit in '$QA')" "$TM_OUT" ||
	fail "the broker's dead letter is gone after 25 browses"
# one warning per queue and process, not one per declaration
assert_eq 1 "$(grep -c "warning .*queue '$QA' keeps" "$DAEMON_LOG")" "warnings about $QA in the daemon's log"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
