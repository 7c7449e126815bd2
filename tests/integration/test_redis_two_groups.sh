# Two tasks consume the SAME stream in different consumer groups: a journal
# and a task that always fails (requeue, max_retries 2). The journal group
# sees every message exactly once, while the failing group runs each three
# times and dead-letters it: its retries are private to its group (claimed
# back, never appended), so the stream keeps exactly the published entries.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=20
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt

write_config "$CONF" <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.shared
    group: g.journal
    config: { path: $JOURNAL }
  fail:
    plugin: fail.so
    queue: q.shared
    group: g.fail
    on_error: requeue
    max_retries: 2
    backoff: 100ms
    max_backoff: 1s
YAML

start_daemon "$CONF"
wait_ping
for ((i = 1; i <= N; i++)); do
	rcall XADD q.shared '*' body "{\"mode\":\"error\",\"n\":$i}" >>"$TEST_DIR/ids.published"
done
assert_eq "$N" "$(sort -u "$TEST_DIR/ids.published" | wc -l)" "distinct published ids"

wait_metric taskmill_tasks_total 'task="journal",outcome="success"' "$N" 20
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' $((3 * N)) 30
wait_until "[[ \$(xlen q.shared.dlq) == $N ]]" 10
wait_until '[[ $(xpending q.shared g.fail) == 0 ]]' 10
wait_until '[[ $(xpending q.shared g.journal) == 0 ]]' 10

# The failing group: three attempts each, then one dead letter each.
assert_eq $((2 * N)) "$(metric taskmill_retries_total 'task="fail"')" "retries of fail"
assert_eq "$N" "$(metric taskmill_dead_letter_total 'task="fail"')" "dead letters of fail"
assert_eq 0 "$(metric taskmill_tasks_total 'task="fail",outcome="success"')" "fail successes"
declare -A DL=()
for dlq_id in $(xids q.shared.dlq); do
	origin=$(xfield q.shared.dlq "$dlq_id" origin_id)
	grep -qxF "$origin" "$TEST_DIR/ids.published" || fail "DLQ origin_id '$origin' is not a published id"
	[[ -z ${DL[$origin]:-} ]] || fail "$origin dead-lettered twice"
	DL[$origin]=1
	assert_eq fail "$(xfield q.shared.dlq "$dlq_id" task)" "DLQ task of $origin"
	assert_eq 3 "$(xfield q.shared.dlq "$dlq_id" attempts)" "DLQ attempts of $origin"
	assert_eq "$(xfield q.shared "$origin" body)" "$(xfield q.shared.dlq "$dlq_id" body)" "DLQ body of $origin"
done
assert_eq "$N" "${#DL[@]}" "distinct dead-lettered origins"

# Retries never appended copies that the journal group would see as new.
assert_eq "$N" "$(xlen q.shared)" "XLEN q.shared"
assert_eq "$N 0 0" "$(stream_state q.shared g.journal)" "acked/pending/undelivered, g.journal"
assert_eq "$N 0 0" "$(stream_state q.shared g.fail)" "acked/pending/undelivered, g.fail"

# The journal group: each published message exactly once, also after all
# the other group's retries.
assert_eq "$N" "$(metric taskmill_tasks_total 'task="journal",outcome="success"')" "journal runs"
assert_eq 0 "$(metric taskmill_retries_total 'task="journal"')" "journal retries"
assert_eq "$N" "$(wc -l <"$JOURNAL")" "journal lines"
dups=$(journal_ids "$JOURNAL" | uniq -d | head -n 5 | paste -sd ' ')
assert_eq "" "$dups" "ids journaled more than once"
assert_journal_covers "$TEST_DIR/ids.published" "$JOURNAL" "journal group"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
