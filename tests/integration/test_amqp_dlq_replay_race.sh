# Dead letters on RabbitMQ, replayed and purged by several operators at
# once, replayed whole, and given back when a replay fails.
# 1. Metadata: a message with reply_to, correlation_id, x-dedup-key,
#    traceparent, tracestate and a workflow header is dead-lettered by the
#    daemon and replayed: it comes back with those properties and headers
#    and its message id.
# 2. Replay race: 1,000 dead letters, 4 replays at once (2 CLI `taskmill
#    dlq replay`, 2 HTTP API replays) while a counting task runs what
#    comes back: the counts add up to 1,000, the task runs each message
#    once (by id and by body), the dead-letter queue ends empty.
# 3. A replay through the API whose publish RabbitMQ refuses (the task
#    queue at a max-length of 0, reject-publish) answers 502 and leaves
#    every dead letter ready in the dead-letter queue, none held by the
#    daemon; once the queue takes messages again, a replay moves them all.
# 4. Purge race: rounds of 4 purges at once: the counts add up.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-replay-race-token
AUTH=(-H "Authorization: Bearer $TOKEN")
N=1000
Q=$AQ.add
DLQ=$Q.dlq
CONF_A=$TEST_DIR/broken.yaml
CONF_B=$TEST_DIR/fixed.yaml
JOURNAL=$TEST_DIR/journal.txt
write_amqp_config "$CONF_A" <<YAML
tasks:
  add: { plugin: fail.so, queue: $Q, on_error: reject }
YAML
write_amqp_config "$CONF_B" http_port="$HTTP_PORT" <<YAML
tasks:
  add: { plugin: journal.so, queue: $Q, on_error: reject, config: { path: $JOURNAL } }
YAML
for f in "$CONF_A" "$CONF_B"; do
	sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$f"
	grep -q 'token:' "$f" || fail "no token in $f"
done
PROBLEMS=()

# ---- 1: metadata through a dead letter and back
TP=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
start_daemon "$CONF_A"
wait_ping
amqptool declare "$AQ.replies" 0
amqptool meta "$Q" '{"mode":"reject","n":0}' meta-1 "$AQ.replies" corr-1 \
	x-dedup-key=dk-1 traceparent="$TP" tracestate=ts=1 x-workflow-id=wf-1
wait_metric taskmill_dead_letter_total 'task="add"' 1 30
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the broken daemon"
tm dlq -c "$CONF_A" replay add
assert_eq 0 "$TM_RC" "exit status of dlq replay: $(head -c 300 "$TM_ERR")"
assert_eq "replayed 1 message" "$(cat "$TM_OUT")" "output of dlq replay"
amqptool props "$Q" >"$TEST_DIR/props"
note "replayed message: $(paste -sd ' ' "$TEST_DIR/props")"
for kv in message_id=meta-1 reply_to="$AQ.replies" correlation_id=corr-1 \
	x-dedup-key=dk-1 traceparent="$TP" tracestate=ts=1 x-workflow-id=wf-1; do
	grep -qxF "$kv" "$TEST_DIR/props" || PROBLEMS+=("the replayed message lacks $kv")
done
for h in x-task x-error x-origin-id; do
	grep -q "^$h=" "$TEST_DIR/props" && PROBLEMS+=("the replayed message kept the failure header $h")
done
((${#PROBLEMS[@]} == 0)) || printf 'PROBLEM: %s\n' "${PROBLEMS[@]}" >&2

# dead_letters COUNT: COUNT messages rejected by the broken daemon into
# the dead-letter queue.
dead_letters() {
	local before
	start_daemon "$CONF_A"
	wait_ping
	before=$(metric taskmill_dead_letter_total 'task="add"')
	amqptool publish "$Q" "$1" '{"mode":"reject","n":%d}' >/dev/null
	wait_metric taskmill_dead_letter_total 'task="add"' "$((before + $1))" 60
	wait_until "[[ \$(ready_count $DLQ) == $1 ]]" 30
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "exit status of the broken daemon"
}

# race OP: 2 CLI `dlq OP add` and 2 API calls at once; prints the four
# counts they reported, one a line (an error is fatal).
race() {
	local op=$1 i path=/api/v1/tasks/add/dead-letters method=DELETE past=purged
	if [[ $op == replay ]]; then path=$path/replay method=POST past=replayed; fi
	local pids=()
	for i in 1 2; do
		timeout -k 2 60 "$TM_BIN" dlq -c "$CONF_B" "$op" add >"$TEST_DIR/race.cli$i.out" 2>"$TEST_DIR/race.cli$i.err" &
		pids+=($!)
		curl -s -m 60 -o "$TEST_DIR/race.api$i.out" -w '%{http_code}' "${AUTH[@]}" -X "$method" \
			"http://127.0.0.1:$HTTP_PORT$path" >"$TEST_DIR/race.api$i.code" 2>/dev/null &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || fail "a concurrent $op failed (exit $?): $(cat "$TEST_DIR"/race.cli*.err "$TEST_DIR"/race.api*.out | head -c 600)"
	done
	for i in 1 2; do
		local out
		out=$(cat "$TEST_DIR/race.cli$i.out")
		[[ $out =~ ^$past\ ([0-9]+)\ messages?$ ]] || fail "CLI $op $i printed '$out'"
		echo "${BASH_REMATCH[1]}"
		assert_eq 200 "$(cat "$TEST_DIR/race.api$i.code")" "HTTP status of API $op $i: $(head -c 300 "$TEST_DIR/race.api$i.out")"
		jq -er ".$past" "$TEST_DIR/race.api$i.out" || fail "API $op $i answered $(head -c 300 "$TEST_DIR/race.api$i.out")"
	done
}

# ---- 2: four replays at once, a counting task running what comes back
dead_letters "$N"
start_daemon "$CONF_B"
wait_ping
race replay >"$TEST_DIR/replay.counts"
note "replay counts: $(paste -sd ' ' "$TEST_DIR/replay.counts")"
sum=$(($(paste -sd + "$TEST_DIR/replay.counts")))
wait_until "[[ -f $JOURNAL && \$(wc -l <$JOURNAL) -ge $N && \$(ready_count $Q) == 0 ]]" 60
sleep 1 # a doubled message would run now
note "runs: $(wc -l <"$JOURNAL"), dead letters left: $(ready_count "$DLQ")"
assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs after 4 concurrent replays of $N dead letters"
assert_eq "$N" "$(journal_unique "$JOURNAL")" "distinct message ids run"
assert_eq "$N" "$(cut -d' ' -f2- "$JOURNAL" | sort -u | wc -l)" "distinct bodies run"
assert_eq "$N" "$sum" "sum of the counts the 4 replays reported"
assert_eq 0 "$(ready_count "$DLQ")" "dead letters left after the replays"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the counting daemon"

# ---- 3: a refused replay gives every dead letter back
M=20
dead_letters "$M"
start_daemon "$CONF_B"
wait_ping
rabbitctl set_policy --apply-to queues "$AQ.full" "^${Q//./\\.}\$" \
	'{"max-length":0,"overflow":"reject-publish"}' >/dev/null ||
	fail "cannot set the max-length policy"
wait_until "rabbitctl list_queues name policy | grep -q '^$Q[[:space:]]*$AQ.full'" 30
expect_code 502 "${AUTH[@]}" -X POST /api/v1/tasks/add/dead-letters/replay
note "refused replay: $(head -c 200 "$RESP_BODY")"
deadline=$(($(now_ms) + 10000))
while [[ $(ready_count "$DLQ") != "$M" ]] && (($(now_ms) < deadline)); do sleep 0.2; done
if [[ $(ready_count "$DLQ") != "$M" ]]; then
	PROBLEMS+=("10 s after a refused replay $(ready_count "$DLQ") of $M dead letters are ready: the daemon holds the others unacknowledged")
fi
rabbitctl clear_policy "$AQ.full" >/dev/null || fail "cannot clear the policy"
wait_until "! rabbitctl list_queues name policy | grep -q '^$Q[[:space:]]*$AQ.full'" 30
: >"$JOURNAL"
expect_code 200 "${AUTH[@]}" -X POST /api/v1/tasks/add/dead-letters/replay
[[ $(jqr .replayed) == "$M" ]] || PROBLEMS+=("the replay after the refused one moved $(jqr .replayed) of $M dead letters")
wait_until "[[ \$(wc -l <$JOURNAL) -ge $(jqr .replayed) ]]" 30

# ---- 4: four purges at once, in rounds; each message counted once
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the counting daemon"
for round in 1 2 3; do
	dead_letters 100
	start_daemon "$CONF_B"
	wait_ping
	race purge >"$TEST_DIR/purge.counts"
	sum=$(($(paste -sd + "$TEST_DIR/purge.counts")))
	note "purge round $round: counts $(paste -sd ' ' "$TEST_DIR/purge.counts")"
	assert_eq 100 "$sum" "sum of the counts 4 concurrent purges of 100 dead letters reported (round $round)"
	assert_eq 0 "$(ready_count "$DLQ")" "dead letters left after purge round $round"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "exit status of the counting daemon"
done

if ((${#PROBLEMS[@]} > 0)); then
	fail "$(printf '%s; ' "${PROBLEMS[@]}")"
fi
