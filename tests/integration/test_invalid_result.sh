# A task that returns success with a result that is not valid UTF-8 JSON
# has failed: outcome error, reason "invalid result", and the text is never
# passed on (not printed by invoke, not in a reply). In both pools.
CONF=$TEST_DIR/taskmill.yaml
PLUG=$TM_BUILD/test-plugins/result.so
[[ -f $PLUG ]] || fail "$PLUG not built (make test-plugins)"

write_config "$CONF" <<YAML
tasks:
  res: { plugin: $PLUG, queue: q.res, on_error: reject }
YAML

# invoke runs the same path as a worker (tm_exec_run), without a broker.
for give in object array; do
	tm invoke -c "$CONF" res "{\"give\":\"$give\"}"
	assert_eq 0 "$TM_RC" "invoke exit status for a valid result ($give)"
	assert_match 'outcome: success' "$(cat "$TM_OUT")" "outcome for $give"
done
for give in broken trailing badutf8 empty nul; do
	tm invoke -c "$CONF" res "{\"give\":\"$give\"}"
	out=$(cat "$TM_OUT")
	note "$give: $out"
	assert_eq 1 "$TM_RC" "invoke exit status for an invalid result ($give)"
	assert_match 'outcome: error' "$out" "outcome for $give"
	assert_match 'error: invalid result' "$out" "reason for $give"
	! grep -q "^result:" "$TM_OUT" || fail "invalid result ($give) was passed on: $out"
done

# Through the daemon, in each pool: counted as error, dead-lettered with the
# reason (on_error: reject), the valid one succeeds.
for kind in thread fork; do
	rcli FLUSHALL >/dev/null
	write_config "$CONF" pool_kind=$kind pool_size=2 <<YAML
tasks:
  res: { plugin: $PLUG, queue: q.res, on_error: reject }
YAML
	bad=$(rcall XADD q.res '*' body '{"give":"broken"}')
	rcall XADD q.res '*' body '{"give":"object"}' >/dev/null
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="res",outcome="success"' 1 30
	wait_metric taskmill_tasks_total 'task="res",outcome="error"' 1 30
	wait_until '[[ $(xlen q.res.dlq) == 1 ]]' 10
	dlq=$(xids q.res.dlq)
	assert_eq "$bad" "$(xfield q.res.dlq "$dlq" origin_id)" "$kind pool: dead-lettered message"
	err=$(xfield q.res.dlq "$dlq" error)
	note "$kind pool: $err"
	assert_match '^error: invalid result' "$err" "$kind pool: dead-letter error"
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
done
