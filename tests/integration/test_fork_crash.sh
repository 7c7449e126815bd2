# Fork pool: task code that kills its process (SIGSEGV, SIGABRT, exit(3))
# costs one attempt each time, never the daemon. Each message runs twice
# (on_error requeue, max_retries 1), is counted `crashed` per attempt and is
# then dead-lettered with the signal or exit status in its error; every
# dead child is replaced (taskmill_worker_restarts_total); /ping stays 200
# throughout; noop messages published alongside all succeed.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
N_NOOP=50
MODES=(crash abort exit)
declare -A WANT_ERR=([crash]='SIGSEGV' [abort]='SIGABRT' [exit]='status 3')
CONF=$TEST_DIR/taskmill.yaml

if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate crash: under AddressSanitizer the runtime's own
	# SEGV handler would catch the child's deliberate NULL write, print an
	# "AddressSanitizer: SEGV" report and exit(1), so the child would not
	# die by SIGSEGV. Let the signal through as in a plain build. A SEGV in
	# the daemon itself still ends it, which this test detects.
	# (This is not enough while fail.so itself is built with UBSan's null
	# check, which reports the store and exits 1 before it happens.)
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
	note "ASan build: ASAN_OPTIONS=$ASAN_OPTIONS"
fi

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  fail:
    plugin: fail.so
    queue: q.fail
    on_error: requeue
    max_retries: 1
    backoff: 100ms
    max_backoff: 1s
    timeout: 5s          # a child wedged on its way out shows up as a timeout, fast
  noop: { plugin: noop.so, queue: q.noop, prefetch: 16 }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
first_children=$(daemon_children | paste -sd ' ')
note "children at start: $first_children"
assert_eq 0 "$(metric taskmill_worker_restarts_total)" "restarts before any task"

ping_watch_start

# Publish the crashing messages interleaved with the noop ones.
declare -A MODE_OF=()
per=$((N_NOOP / ${#MODES[@]}))
sent_noop=0
for mode in "${MODES[@]}"; do
	id=$(rcall XADD q.fail '*' body "{\"mode\":\"$mode\"}")
	MODE_OF[$id]=$mode
	xadd_bulk q.noop "$per" "{\"n\":%d,\"after\":\"$mode\"}"
	sent_noop=$((sent_noop + per))
done
xadd_bulk q.noop "$((N_NOOP - sent_noop))" '{"n":%d,"after":"all"}'
assert_eq "$N_NOOP" "$(xlen q.noop)" "XLEN q.noop"

N_FAIL=${#MODES[@]}
# fail_outcomes: " OUTCOME=COUNT..." of the fail task; fail_attempts: their sum.
fail_outcomes() {
	local outcome
	for outcome in success error rejected timeout crashed invalid; do
		printf ' %s=%s' "$outcome" "$(metric taskmill_tasks_total "task=\"fail\",outcome=\"$outcome\"")"
	done
}
fail_attempts() {
	fail_outcomes | tr ' ' '\n' | awk -F= 'NF == 2 { n += $2 } END { print n + 0 }'
}
# Every attempt ends, and ends `crashed`.
wait_until "(( \$(fail_attempts) >= $((2 * N_FAIL)) ))" 20
assert_eq " success=0 error=0 rejected=0 timeout=0 crashed=$((2 * N_FAIL)) invalid=0" \
	"$(fail_outcomes)" "outcomes of the fail task's $((2 * N_FAIL)) attempts"
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N_NOOP" 20
wait_until "[[ \$(xlen q.fail.dlq) == $N_FAIL ]]" 10
wait_until '[[ $(xpending q.fail) == 0 && $(xpending q.noop) == 0 ]]' 10
# The dead children have been replaced.
wait_children "$POOL" 15
ping_watch_stop

daemon_alive || fail "daemon died"
assert_eq 200 "$(http_code /ping)" "/ping after the crashes"
assert_eq 200 "$(http_code /healthz)" "/healthz after the crashes"

# Every attempt of a crashing message is `crashed`, nothing else.
assert_eq " success=0 error=0 rejected=0 timeout=0 crashed=$((2 * N_FAIL)) invalid=0" \
	"$(fail_outcomes)" "outcomes of the fail task (2 attempts per message)"
for outcome in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"noop\",outcome=\"$outcome\"")" \
		"noop outcome $outcome"
done
assert_eq "$N_FAIL" "$(metric taskmill_retries_total 'task="fail"')" "taskmill_retries_total fail"
assert_eq "$N_FAIL" "$(metric taskmill_dead_letter_total 'task="fail"')" "taskmill_dead_letter_total fail"
restarts=$(metric taskmill_worker_restarts_total)
note "taskmill_worker_restarts_total = $restarts"
assert_ge "$((2 * N_FAIL))" "$restarts" "taskmill_worker_restarts_total (one per crash)"

# The dead letters: one per message, with the cause of death.
assert_eq "$N_FAIL $((N_FAIL)) 0" "$(xlen q.fail.dlq) $(stream_state q.fail | cut -d' ' -f1) $(xpending q.fail)" \
	"DLQ length, acked entries, pending entries of q.fail"
declare -A SEEN=()
while read -r origin dlq_id; do
	mode=${MODE_OF[$origin]:-}
	[[ -n $mode ]] || fail "DLQ entry $dlq_id: origin_id '$origin' is no published id"
	[[ -z ${SEEN[$mode]:-} ]] || fail "message $origin ($mode) dead-lettered twice"
	SEEN[$mode]=1
	error=$(xfield q.fail.dlq "$dlq_id" error)
	note "DLQ $dlq_id ($mode): $error"
	[[ $error == *"${WANT_ERR[$mode]}"* ]] ||
		fail "DLQ error for mode $mode does not mention '${WANT_ERR[$mode]}': '$error'"
	assert_eq 2 "$(xfield q.fail.dlq "$dlq_id" attempts)" "DLQ $dlq_id attempts"
	assert_eq fail "$(xfield q.fail.dlq "$dlq_id" task)" "DLQ $dlq_id task"
	assert_eq "{\"mode\":\"$mode\"}" "$(xfield q.fail.dlq "$dlq_id" body)" "DLQ $dlq_id body"
done < <(dlq_origin_map q.fail.dlq)
assert_eq "$N_FAIL" "${#SEEN[@]}" "distinct messages in the DLQ"

# Other tasks were unaffected: every noop message acked, none dead-lettered.
assert_eq "$N_NOOP 0 0" "$(stream_state q.noop)" "acked/pending/undelivered of q.noop"
assert_eq 0 "$(xlen q.noop.dlq)" "XLEN q.noop.dlq"

# The children now running are replacements.
last_children=$(daemon_children | paste -sd ' ')
note "children at end: $last_children"
assert_ne "$first_children" "$last_children" "child processes after $((2 * N_FAIL)) crashes"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
