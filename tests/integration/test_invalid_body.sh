# Invalid entries (no body field, body not JSON, not an object, not UTF-8,
# over max_payload) are dead-lettered at once with a reason and counted as
# outcome "invalid"; the daemon keeps running and serving.
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.inv, max_payload: 1KiB }
YAML

big=$(printf '{"pad":"%01100d"}' 0)
declare -A WHAT=()
add_bad() { # add_bad WHAT FIELD VALUE...
	local what=$1 id
	shift
	id=$(rcall XADD q.inv '*' "$@")
	WHAT[$id]=$what
}
add_bad "no body field" foo bar
add_bad "not json" body 'not json'
add_bad "array body" body '[1,2]'
add_bad "invalid UTF-8" body $'{"s":"\xff\xfe"}'
add_bad "over max_payload" body "$big"
good=$(rcall XADD q.inv '*' body '{"ok":true}')
N_BAD=${#WHAT[@]}

start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="noop",outcome="invalid"' "$N_BAD" 30
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 30
wait_until "[[ \$(xlen q.inv.dlq) == $N_BAD ]]" 10
wait_until '[[ $(xpending q.inv) == 0 ]]' 10

declare -A SEEN=()
for dlq_id in $(xids q.inv.dlq); do
	origin=$(xfield q.inv.dlq "$dlq_id" origin_id)
	what=${WHAT[$origin]:-}
	[[ -n $what ]] || fail "DLQ entry $dlq_id: origin_id '$origin' is not one of the invalid entries"
	[[ $origin != "$good" ]] || fail "the valid entry was dead-lettered"
	SEEN[$origin]=1
	error=$(xfield q.inv.dlq "$dlq_id" error)
	assert_ne "" "$error" "DLQ error for $what"
	assert_match '^invalid: ' "$error" "DLQ error for $what starts with its outcome"
	assert_eq noop "$(xfield q.inv.dlq "$dlq_id" task)" "DLQ task for $what"
	assert_eq 0 "$(xfield q.inv.dlq "$dlq_id" attempts)" "DLQ attempts for $what (never ran)"
	assert_match '^[0-9]{13}$' "$(xfield q.inv.dlq "$dlq_id" failed_at)" "DLQ failed_at for $what"
	if [[ $what != "no body field" ]]; then
		assert_eq "$(xfield q.inv "$origin" body)" "$(xfield q.inv.dlq "$dlq_id" body)" \
			"DLQ body for $what (kept as published)"
	fi
	note "invalid ($what): $error"
done
assert_eq "$N_BAD" "${#SEEN[@]}" "distinct invalid entries in the DLQ"
# the log agrees with the record: an invalid entry never ran (0 attempts)
grep -q 'attempt [0-9]* invalid' "$DAEMON_LOG" &&
	fail "an invalid entry is logged with an attempt number: $(grep 'attempt [0-9]* invalid' "$DAEMON_LOG" | head -n 1)"
grep -q "invalid: .*; not run (0 attempts), dead-lettered to 'q.inv.dlq'" "$DAEMON_LOG" ||
	fail "no 'not run (0 attempts)' line for the invalid entries"

assert_eq 0 "$(xpending q.inv)" "XPENDING q.inv"
daemon_alive || fail "daemon died"
assert_eq 200 "$(http_code /ping)" "/ping after invalid entries"
assert_eq 0 "$(metric taskmill_tasks_total 'task="noop",outcome="error"')" "error count"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
