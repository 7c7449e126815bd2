# The fork pool delivers exactly what the thread pool does: the same 200
# messages (one with non-ASCII text, one of about 100 KiB, one with JSON
# escapes), read by a thread-pool daemon and by a fork-pool daemon through
# two consumer groups of one stream, give the same journal: every
# "<id> <body>" line of the stream, each exactly once, byte for byte.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

N_BULK=197
N=$((N_BULK + 3))
BIG_KIB=100

# The bodies that stress the transport between the parent and a child.
UNICODE_BODY='{"n":"unicode","text":"héllo wörld — ünïcödé ✓ 日本語 Ελληνικά 🎉"}'
ESCAPES_BODY='{"n":"escapes","text":"quote \" backslash \\ tab \t newline \n \u00e9 \ud83c\udf89"}'
pad=$(head -c $((BIG_KIB * 1024)) /dev/zero | tr '\0' 'x')
BIG_BODY="{\"n\":\"big\",\"pad\":\"${pad:0:$((BIG_KIB * 1024 / 2))}é${pad:0:$((BIG_KIB * 1024 / 2))}\"}"
unset pad
assert_ge $((BIG_KIB * 1024)) "${#BIG_BODY}" "characters in the big body"

# Publish: bulk messages around the three special ones.
xadd_bulk q.journal $((N_BULK / 2)) '{"n":%d,"part":1}'
for body in "$UNICODE_BODY" "$ESCAPES_BODY" "$BIG_BODY"; do
	# through --pipe: the big body is too long for one argv string
	out=$(resp XADD q.journal '*' body "$body" | rcli --pipe 2>&1) ||
		fail "XADD of a special body failed: $out"
	[[ $out =~ errors:\ 0,\ replies:\ 1 ]] || fail "XADD of a special body: $out"
done
xadd_bulk q.journal $((N_BULK - N_BULK / 2)) '{"n":%d,"part":2}'
assert_eq "$N" "$(xlen q.journal)" "XLEN q.journal"
stream_lines q.journal | LC_ALL=C sort >"$TEST_DIR/expected.txt"
assert_eq "$N" "$(wc -l <"$TEST_DIR/expected.txt")" "stream lines"
grep -qF "$UNICODE_BODY" "$TEST_DIR/expected.txt" || fail "the unicode body did not survive XADD/XRANGE"

# run_pool KIND SIZE: run every message through a daemon with that pool
# and its own consumer group; its journal is TEST_DIR/journal.KIND.txt.
run_pool() {
	local kind=$1 size=$2 conf=$TEST_DIR/taskmill.$1.yaml
	local journal=$TEST_DIR/journal.$1.txt rc=0
	# shellcheck disable=SC2034 # read by write_config: a fresh port per daemon
	HTTP_PORT=
	write_config "$conf" pool_kind="$kind" pool_size="$size" instance="it-parity-$kind" <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.journal
    group: g.$kind
    prefetch: 32
    config: { path: $journal }
YAML
	start_daemon "$conf"
	wait_ping
	if [[ $kind == fork ]]; then
		wait_children "$size"
	else
		assert_eq 0 "$(child_count)" "children of a thread-pool daemon"
	fi
	# every message ran (whatever its outcome), then: all succeeded
	wait_metric_ge taskmill_tasks_total 'task="journal"' "$N" 30
	assert_eq "$N" "$(metric taskmill_tasks_total 'task="journal",outcome="success"')" \
		"$kind pool: journal outcome success"
	wait_until "[[ \$(xpending q.journal g.$kind) == 0 ]]" 10
	for outcome in error rejected timeout crashed invalid; do
		assert_eq 0 "$(metric taskmill_tasks_total "task=\"journal\",outcome=\"$outcome\"")" \
			"$kind pool: journal outcome $outcome"
	done
	assert_eq 0 "$(metric taskmill_worker_restarts_total)" "$kind pool: worker restarts"
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status after SIGTERM"
	assert_eq "$N 0 0" "$(stream_state q.journal "g.$kind")" "$kind pool: acked/pending/undelivered"
	[[ -f $journal ]] || fail "$kind pool: journal $journal was not written"
	LC_ALL=C sort "$journal" >"$journal.sorted"
}

run_pool thread 3
run_pool fork 3
assert_eq 0 "$(xlen q.journal.dlq)" "XLEN q.journal.dlq"

for kind in thread fork; do
	journal=$TEST_DIR/journal.$kind.txt
	assert_eq "$N" "$(wc -l <"$journal")" "$kind pool: journal lines"
	dups=$(cut -d' ' -f1 "$journal" | sort | uniq -d | head -n 5 | paste -sd ' ')
	assert_eq "" "$dups" "$kind pool: ids journaled more than once"
	if ! cmp -s "$TEST_DIR/expected.txt" "$journal.sorted"; then
		diff "$TEST_DIR/expected.txt" "$journal.sorted" | cut -c 1-200 | head -n 10 >&2
		fail "$kind pool: journal differs from the stream (< stream only, > journal only)"
	fi
	# The special bodies, found by their exact text.
	for body in "$UNICODE_BODY" "$ESCAPES_BODY" "$BIG_BODY"; do
		assert_eq 1 "$(grep -cF -- " $body" "$journal" || true)" \
			"$kind pool: journal lines with the body '${body:0:40}...'"
	done
done
assert_eq "" "$(cmp "$TEST_DIR/journal.thread.txt.sorted" "$TEST_DIR/journal.fork.txt.sorted" || true)" \
	"thread and fork journals (sorted)"
