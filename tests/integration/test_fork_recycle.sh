# Fork pool: max_tasks_per_child recycles a child after N tasks. 100
# journal messages through 2 children recycled every 10 tasks: every
# message runs exactly once, about 10 recycles are counted as restarts,
# none of the original children is left, and 2 children run at the end.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
PER_CHILD=10
N=100
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.journal
    prefetch: 32
    config: { path: $JOURNAL }
YAML
set_pool_option "$CONF" max_tasks_per_child "$PER_CHILD"
tm check -c "$CONF"
assert_eq 0 "$TM_RC" "taskmill check with max_tasks_per_child ($(head -c 300 "$TM_ERR"))"

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
mapfile -t first < <(daemon_children)
note "children at start: ${first[*]}"

xadd_bulk q.journal "$N" '{"n":%d}'
wait_metric_ge taskmill_tasks_total 'task="journal"' "$N" 30
assert_eq "$N" "$(metric taskmill_tasks_total 'task="journal",outcome="success"')" "journal outcome success"
wait_until '[[ $(xpending q.journal) == 0 ]]' 10
# N tasks are N / PER_CHILD child lifetimes: each ends in a recycle.
wait_metric_ge taskmill_worker_restarts_total '' $((N / PER_CHILD - 2)) 10
wait_children "$POOL" 10

restarts=$(metric taskmill_worker_restarts_total)
note "taskmill_worker_restarts_total = $restarts after $N tasks"
assert_ge $((N / PER_CHILD - 2)) "$restarts" "restarts (recycles) after $N tasks, $PER_CHILD per child"
assert_le $((N / PER_CHILD + 2)) "$restarts" "restarts (recycles) after $N tasks, $PER_CHILD per child"

for outcome in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"journal\",outcome=\"$outcome\"")" \
		"journal outcome $outcome"
done
assert_eq "$N 0 0" "$(stream_state q.journal)" "acked/pending/undelivered of q.journal"
assert_eq 0 "$(xlen q.journal.dlq)" "XLEN q.journal.dlq"

# Every message journaled exactly once (a recycle loses or repeats none).
[[ -f $JOURNAL ]] || fail "journal file $JOURNAL was not written"
assert_eq "$N" "$(wc -l <"$JOURNAL")" "journal line count"
stream_lines q.journal | sort >"$TEST_DIR/expected.txt"
sort "$JOURNAL" >"$TEST_DIR/journal.sorted"
if ! diff -q "$TEST_DIR/expected.txt" "$TEST_DIR/journal.sorted" >/dev/null; then
	diff "$TEST_DIR/expected.txt" "$TEST_DIR/journal.sorted" | head -n 10 >&2
	fail "journal differs from the stream (< stream only, > journal only)"
fi

# Only fresh children are left; no recycled one lingers.
mapfile -t last < <(daemon_children)
note "children at end: ${last[*]}"
assert_eq "" "$(comm -12 <(printf '%s\n' "${first[@]}") <(printf '%s\n' "${last[@]}"))" \
	"original children still running after $N tasks"
wait_tags_gone 1000 "${first[@]}"
assert_eq 200 "$(http_code /ping)" "/ping"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
