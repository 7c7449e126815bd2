# Delayed messages through the admin API, the same checks on either broker
# (test_delayed_api.sh, test_amqp_delayed_api.sh): list (soonest first,
# bodies, paging), run-now (runs within about a second, once), delete (never
# runs), run-now and delete at once on one id (exactly one wins), unknown and
# hostile ids. The test sets DLY_CONF (task d: journal.so writing JOURNAL,
# http.token TOKEN) and calls dly_main, which runs the daemon around
# dly_run.

DLY_AUTH=(-H "Authorization: Bearer $TOKEN")
DLY_PATH=/api/v1/tasks/d/delayed

# dly_emit BODY DELAY: emit a delayed message; prints its id.
dly_emit() {
	tm emit -c "$DLY_CONF" d "$1" --delay "$2"
	((TM_RC == 0)) || fail "emit --delay $2 exited $TM_RC: $(head -c 300 "$TM_ERR")"
	tr -d '[:space:]' <"$TM_OUT"
}

# dly_ids [QUERY]: the ids of one page of the list, in its order.
dly_ids() {
	expect_code 200 "${DLY_AUTH[@]}" "$DLY_PATH${1:+?$1}"
	jqr '.[].id' | paste -sd ' '
}

# dly_ran K: how many times the body {"k":K} ran.
dly_ran() {
	grep -c "\"k\":$1}" "$JOURNAL" 2>/dev/null || true
}

# dly_main: start the daemon on DLY_CONF (wait for /ping), run dly_run,
# stop the daemon (exit status 0).
dly_main() {
	start_daemon "$DLY_CONF"
	wait_ping
	dly_run
	local rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "exit status of the daemon"
}

dly_run() {
	local a b c d e t0 ms
	t0=$(now_ms)
	a=$(dly_emit '{"k":1}' 1h)
	b=$(dly_emit '{"k":2}' 30m)
	c=$(dly_emit '{"k":3}' 2h)
	d=$(dly_emit '{"k":4}' 45m)
	e=$(dly_emit '{"k":5}' 90m)
	wait_until "[[ \$(dly_ids | wc -w) == 5 ]]" 15

	# ---- soonest first, with bodies and due times
	assert_eq "$b $d $a $e $c" "$(dly_ids)" "delayed messages, soonest first"
	assert_eq '{"k":2} {"k":4} {"k":1} {"k":5} {"k":3}' "$(jqr '.[].body' | paste -sd ' ')" "their bodies"
	expect_json 'all(.[]; .truncated == false and .body_bytes == 7)' "bounds fields"
	ms=$(jqr '.[0].due_ms')
	assert_ge $((t0 + 1800000)) "$ms" "due_ms of the 30 min message"
	assert_le $((t0 + 1800000 + 30000)) "$ms" "due_ms of the 30 min message"
	assert_match '^20[0-9-]+T[0-9:.]+Z$' "$(jqr '.[0].due')" "due (RFC 3339)"
	# paging: two a page, Link to the next
	assert_eq "$b $d" "$(dly_ids limit=2)" "first page of 2"
	assert_match "after=$d>; rel=\"next\"" "$(resp_header link)" "Link of the first page"
	assert_eq "$a $e" "$(dly_ids "limit=2&after=$d")" "second page of 2"
	assert_eq "$c" "$(dly_ids "limit=2&after=$e")" "last page"
	assert_eq "" "$(resp_header link)" "no Link on the last page"

	# ---- run-now: it runs within about a second, once
	local t1
	t1=$(now_ms)
	expect_code 200 "${DLY_AUTH[@]}" -X POST "$DLY_PATH/$a/run-now"
	expect_json ".id == \"$a\" and .run_now == true" "run-now answer"
	wait_until "[[ \$(dly_ran 1) -ge 1 ]]" 5
	note "run-now ran after $(($(now_ms) - t1)) ms (the API call included)"
	assert_le 2500 $(($(now_ms) - t1)) "ms from run-now to the run"
	expect_code 404 "${DLY_AUTH[@]}" -X POST "$DLY_PATH/$a/run-now"
	expect_code 404 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/$a"

	# ---- delete: gone, and never runs
	expect_code 200 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/$e"
	expect_json ".id == \"$e\" and .deleted == true" "delete answer"
	expect_code 404 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/$e"
	expect_code 404 "${DLY_AUTH[@]}" -X POST "$DLY_PATH/$e/run-now"
	assert_eq "$b $d $c" "$(dly_ids)" "list after run-now and delete"

	# ---- run-now and delete at once on one id: exactly one wins
	local pids=() i codes
	for i in run del; do
		if [[ $i == run ]]; then
			curl -s -m 30 -o /dev/null -w '%{http_code}' "${DLY_AUTH[@]}" -X POST \
				"http://127.0.0.1:$HTTP_PORT$DLY_PATH/$d/run-now" >"$TEST_DIR/race.$i" &
		else
			curl -s -m 30 -o /dev/null -w '%{http_code}' "${DLY_AUTH[@]}" -X DELETE \
				"http://127.0.0.1:$HTTP_PORT$DLY_PATH/$d" >"$TEST_DIR/race.$i" &
		fi
		pids+=($!)
	done
	wait "${pids[@]}"
	codes="$(cat "$TEST_DIR/race.run") $(cat "$TEST_DIR/race.del")"
	note "run-now and delete at once: $codes"
	[[ $codes == "200 404" || $codes == "404 200" ]] || fail "run-now + delete on one id answered $codes"
	# and two run-nows at once on another
	pids=()
	for i in 1 2; do
		curl -s -m 30 -o /dev/null -w '%{http_code}' "${DLY_AUTH[@]}" -X POST \
			"http://127.0.0.1:$HTTP_PORT$DLY_PATH/$c/run-now" >"$TEST_DIR/race2.$i" &
		pids+=($!)
	done
	wait "${pids[@]}"
	codes=$(printf '%s\n' "$(cat "$TEST_DIR/race2.1")" "$(cat "$TEST_DIR/race2.2")" | sort | paste -sd ' ')
	assert_eq "200 404" "$codes" "two run-nows at once on one id"
	wait_until "[[ \$(dly_ran 3) -ge 1 ]]" 5
	sleep 2
	assert_eq 1 "$(dly_ran 1)" "runs of the message run now"
	assert_eq 1 "$(dly_ran 3)" "runs of the message run now twice at once"
	if [[ $(cat "$TEST_DIR/race.run") == 200 ]]; then
		assert_eq 1 "$(dly_ran 4)" "runs of the message run now (beside a delete)"
	else
		assert_eq 0 "$(dly_ran 4)" "runs of the message deleted (beside a run-now)"
	fi
	assert_eq 0 "$(dly_ran 5)" "runs of the deleted message"
	assert_eq 0 "$(dly_ran 2)" "runs of the message still waiting"
	assert_eq "$b" "$(dly_ids)" "list at the end"

	# ---- unknown and hostile ids
	expect_code 404 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/00000000-0000-4000-8000-000000000000"
	expect_code 404 "${DLY_AUTH[@]}" -X POST "$DLY_PATH/no-such-id/run-now"
	expect_code 400 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/%FF%FE"
	expect_code 400 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/a%20b"
	expect_code 400 "${DLY_AUTH[@]}" -X POST "$DLY_PATH/%C3%A9/run-now"
	req "${DLY_AUTH[@]}" --path-as-is -X DELETE "$DLY_PATH/../../../etc/passwd"
	[[ $RESP_CODE == 400 || $RESP_CODE == 404 ]] || fail "a path traversal answered $RESP_CODE"
	req "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/%2E%2E%2F%2E%2E"
	[[ $RESP_CODE == 400 || $RESP_CODE == 404 ]] || fail "an encoded path traversal answered $RESP_CODE"
	expect_code 404 "${DLY_AUTH[@]}" -X DELETE "$DLY_PATH/$(head -c 5000 /dev/zero | tr '\0' a)"
	expect_code 400 "${DLY_AUTH[@]}" "$DLY_PATH?after=%FF"
	expect_code 400 "${DLY_AUTH[@]}" "$DLY_PATH?limit=0"
	expect_code 405 "${DLY_AUTH[@]}" -X PUT "$DLY_PATH/$b"
	expect_code 401 "$DLY_PATH"
	assert_eq "$b" "$(dly_ids)" "list after the hostile ids"

	# ---- the CLI
	tm delayed -c "$DLY_CONF" list d
	assert_eq 0 "$TM_RC" "delayed list: $(head -c 300 "$TM_ERR")"
	assert_match "^$b	20[0-9T:.-]+Z	\{\"k\":2\}\$" "$(cat "$TM_OUT")" "output of delayed list"
	tm delayed -c "$DLY_CONF" delete d no-such-id
	assert_eq 1 "$TM_RC" "delayed delete of an unknown id"
	tm delayed -c "$DLY_CONF" run-now d
	assert_eq 2 "$TM_RC" "delayed run-now without an id"
	tm delayed -c "$DLY_CONF" delete d "$b"
	assert_eq 0 "$TM_RC" "delayed delete: $(head -c 300 "$TM_ERR")"
	assert_eq "deleted delayed message $b" "$(cat "$TM_OUT")" "output of delayed delete"
	assert_eq "" "$(dly_ids)" "list after the CLI's delete"
	assert_eq 0 "$(dly_ran 2)" "runs of the message the CLI deleted"
}
