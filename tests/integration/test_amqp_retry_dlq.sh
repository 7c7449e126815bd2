# RabbitMQ retries and dead letters. With on_error: requeue, max_retries: 2
# and a 300 ms backoff, a failing message runs three times, the retries
# delayed by the backoff (through a retry queue, never a busy redelivery),
# then it is dead-lettered with attempts 3; a reject is dead-lettered at once
# (attempts 1), a body that is not JSON without running (attempts 0). The
# dead letters carry the x- headers, as `taskmill dlq show` prints them, and
# `dlq replay` / `dlq purge` work on RabbitMQ. The retry queue of the
# first delay exists already, as an earlier version declared it (no
# x-expires): it is used as it is, not refused.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.fail
write_amqp_config "$CONF" <<YAML
tasks:
  fail: { plugin: fail.so, queue: $Q, max_retries: 2, backoff: 300ms, max_backoff: 1s }
YAML

amqptool declare "$Q.retry.300ms" 0 "" "$Q"

t0=$(now_ms)
declare -A BODY_OF=() ATTEMPTS_OF=()
for i in 1 2; do
	body="{\"mode\":\"error\",\"n\":$i}"
	id=$(emit_amqp "$CONF" fail "$body")
	BODY_OF[$id]=$body
	ATTEMPTS_OF[$id]=3
done
body='{"mode":"reject","n":3}'
id=$(emit_amqp "$CONF" fail "$body")
BODY_OF[$id]=$body
ATTEMPTS_OF[$id]=1
id=$(amqptool publish "$Q" 1 'not json %d')
BODY_OF[$id]='not json 1'
ATTEMPTS_OF[$id]=0

t_start=$(now_ms)
start_daemon "$CONF"
wait_ping
wait_metric taskmill_dead_letter_total 'task="fail"' 4 30
elapsed=$(($(now_ms) - t_start))
t1=$(now_ms)
assert_eq 6 "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" "error outcomes"
assert_eq 1 "$(metric taskmill_tasks_total 'task="fail",outcome="rejected"')" "rejected outcomes"
assert_eq 1 "$(metric taskmill_tasks_total 'task="fail",outcome="invalid"')" "invalid outcomes"
assert_eq 4 "$(metric taskmill_retries_total 'task="fail"')" "taskmill_retries_total"
# runs 2 and 3 waited 300 and 600 ms (plus jitter) after the failures
assert_ge 900 "$elapsed" "ms from the start to the last dead letter"
wait_until "[[ \$(ready_count $Q) == 0 ]]" 10
assert_eq 0 "$(ready_count "$Q.retry.300ms")" "messages left in the 300 ms retry queue"
assert_eq 0 "$(ready_count "$Q.retry.600ms")" "messages left in the 600 ms retry queue"

# the retry delays, from the log: attempt n+1 starts no sooner than the
# delay announced after attempt n
log_ms() { # log line -> epoch ms of its timestamp
	local ts=${1%% *}
	echo $(($(date -d "${ts%.*}" +%s) * 1000 + 10#$(sed 's/.*\.\([0-9]*\)Z$/\1/' <<<"$ts")))
}
for id in "${!ATTEMPTS_OF[@]}"; do
	[[ ${ATTEMPTS_OF[$id]} == 3 ]] || continue
	for n in 1 2; do
		line=$(grep -m1 "id=$id attempt $n error" "$DAEMON_LOG") ||
			fail "no log line for attempt $n of $id"
		delay=$(sed -n 's/.*retry in \([0-9]*\) ms.*/\1/p' <<<"$line")
		next=$(grep -m1 "id=$id attempt $((n + 1)) error" "$DAEMON_LOG") ||
			fail "no log line for attempt $((n + 1)) of $id"
		gap=$(($(log_ms "$next") - $(log_ms "$line")))
		note "$id: attempt $n -> $((n + 1)): announced $delay ms, took $gap ms"
		assert_ge "$((300 * (1 << (n - 1))))" "$delay" "announced retry delay"
		assert_le "$((360 * (1 << (n - 1))))" "$delay" "announced retry delay (20% jitter at most)"
		assert_ge "$((delay - 5))" "$gap" "ms between attempts $n and $((n + 1))"
		assert_le "$((delay + 1000))" "$gap" "ms between attempts $n and $((n + 1))"
	done
done

# the dead letters, as `taskmill dlq` shows them
assert_eq 4 "$(dlq_lines "$CONF" fail)" "dlq list lines"
cp "$TM_OUT" "$TEST_DIR/dlq.list"
declare -A SEEN=()
while IFS=$'\t' read -r dlid origin attempts when error; do
	tm dlq -c "$CONF" show fail "$dlid"
	assert_eq 0 "$TM_RC" "dlq show $dlid exit status"
	json=$(cat "$TM_OUT")
	assert_eq "$origin" "$(jq -r .origin_id <<<"$json")" "origin_id of $dlid"
	[[ -n ${BODY_OF[$origin]:-} ]] || fail "dead letter $dlid: origin $origin is no published id"
	[[ -z ${SEEN[$origin]:-} ]] || fail "origin $origin dead-lettered twice"
	SEEN[$origin]=$dlid
	assert_eq fail "$(jq -r .task <<<"$json")" "task of $dlid"
	assert_eq "${ATTEMPTS_OF[$origin]}" "$(jq -r .attempts <<<"$json")" "attempts of $dlid"
	assert_eq "${ATTEMPTS_OF[$origin]}" "$attempts" "attempts column of $dlid"
	assert_ne "" "$(jq -r .error <<<"$json")" "error of $dlid"
	# RFC 3339, as people read it
	failed_at=$(date -u -d "$(jq -r .failed_at <<<"$json")" +%s%3N)
	assert_ge "$((t0 - 1000))" "$failed_at" "failed_at of $dlid (epoch ms)"
	assert_le "$((t1 + 1000))" "$failed_at" "failed_at of $dlid (epoch ms)"
	want=${BODY_OF[$origin]}
	if [[ $want == '{'* ]]; then
		assert_eq "$(jq -c . <<<"$want")" "$(jq -c .body <<<"$json")" "body of $dlid"
	else
		assert_eq "$want" "$(jq -r .body <<<"$json")" "body of $dlid"
	fi
	note "dead letter $dlid <- $origin: attempts $attempts, error '$error'"
done <"$TEST_DIR/dlq.list"
assert_eq 4 "${#SEEN[@]}" "distinct origins in the dead-letter queue"
assert_eq 4 "$(ready_count "$Q.dlq")" "messages in $Q.dlq (browsing gave them back)"
tm dlq -c "$CONF" list
assert_eq $'fail\t'"$Q.dlq"$'\t4' "$(cat "$TM_OUT")" "dlq list of every task"

# replay all: each runs again from attempt 1 and ends in the DLQ again with
# the same attempt counts (not added to the old ones)
tm dlq -c "$CONF" replay fail
assert_eq 0 "$TM_RC" "dlq replay exit status"
assert_eq "replayed 4 messages" "$(cat "$TM_OUT")" "dlq replay output"
wait_metric taskmill_dead_letter_total 'task="fail"' 8 30
assert_eq 12 "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" "error outcomes after the replay"
tm dlq -c "$CONF" list fail
assert_eq 4 "$(grep -c . "$TM_OUT")" "dlq entries after the replay"
assert_eq "0 1 3 3" "$(cut -f3 "$TM_OUT" | sort -n | paste -sd ' ')" "attempts after the replay"
for origin in "${!SEEN[@]}"; do
	grep -qF "$origin" "$TM_OUT" || fail "origin $origin not back in the DLQ after the replay"
done

# purge one, then the rest
one=$(head -n 1 "$TM_OUT" | cut -f1)
tm dlq -c "$CONF" purge fail "$one"
assert_eq "purged 1 message" "$(cat "$TM_OUT")" "dlq purge ID"
tm dlq -c "$CONF" show fail "$one"
assert_eq 1 "$TM_RC" "dlq show of a purged id"
tm dlq -c "$CONF" purge fail
assert_eq "purged 3 messages" "$(cat "$TM_OUT")" "dlq purge"
assert_eq 0 "$(dlq_lines "$CONF" fail)" "dlq list lines after the purge"

assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
assert_eq 0 "$(ready_count "$Q")" "ready in $Q after the stop"
