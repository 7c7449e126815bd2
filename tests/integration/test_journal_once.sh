# Every message, published with XADD or with `taskmill emit`, before and
# after the daemon starts, runs exactly once: its id appears once in the
# journal plugin's file.
N_XADD=490
N_EMIT_BEFORE=5
N_EMIT_AFTER=5
N=$((N_XADD + N_EMIT_BEFORE + N_EMIT_AFTER))
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.journal
    prefetch: 32
    config: { path: $JOURNAL }
YAML

xadd_bulk q.journal "$N_XADD" '{"n":%d,"via":"xadd"}'
for ((i = 1; i <= N_EMIT_BEFORE; i++)); do
	emit "$CONF" journal "{\"n\":$i,\"via\":\"emit-before\"}" >>"$TEST_DIR/ids.emit"
done
xids q.journal >"$TEST_DIR/ids.expected"
assert_eq "$((N_XADD + N_EMIT_BEFORE))" "$(wc -l <"$TEST_DIR/ids.expected")" "entries before start"
# The emitted ids are among the stream's.
assert_eq "$N_EMIT_BEFORE" "$(grep -cFxf "$TEST_DIR/ids.emit" "$TEST_DIR/ids.expected")" \
	"ids printed by emit found in the stream"

start_daemon "$CONF"
wait_ping
for ((i = 1; i <= N_EMIT_AFTER; i++)); do
	emit "$CONF" journal "{\"n\":$i,\"via\":\"emit-after\"}" >>"$TEST_DIR/ids.expected"
done
assert_eq "$N" "$(xlen q.journal)" "XLEN q.journal"

wait_metric taskmill_tasks_total 'task="journal",outcome="success"' "$N" 30
wait_until '[[ $(xpending q.journal) == 0 ]]' 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

[[ -f $JOURNAL ]] || fail "journal file $JOURNAL was not written"
assert_eq "$N" "$(wc -l <"$JOURNAL")" "journal line count"
cut -d' ' -f1 "$JOURNAL" | sort >"$TEST_DIR/ids.journal"
dups=$(uniq -d "$TEST_DIR/ids.journal" | head -n 5 | paste -sd ' ')
assert_eq "" "$dups" "ids journaled more than once"
sort "$TEST_DIR/ids.expected" >"$TEST_DIR/ids.expected.sorted"
if ! diff -q "$TEST_DIR/ids.expected.sorted" "$TEST_DIR/ids.journal" >/dev/null; then
	diff "$TEST_DIR/ids.expected.sorted" "$TEST_DIR/ids.journal" | head -n 10 >&2
	fail "journaled ids differ from published ids (< published only, > journaled only)"
fi

# Each line is "<id> <body>" with the body as published.
id=$(head -n 1 "$TEST_DIR/ids.expected")
line=$(grep -m 1 "^$id " "$JOURNAL")
assert_eq "$id $(xfield q.journal "$id" body)" "$line" "journal line of $id"
assert_eq "$N_XADD" "$(grep -cE '"via": *"xadd"' "$JOURNAL")" "journal lines from XADD"
assert_eq "$((N_EMIT_BEFORE + N_EMIT_AFTER))" "$(grep -cE '"via": *"emit-' "$JOURNAL")" \
	"journal lines from emit"

assert_eq 0 "$(xpending q.journal)" "XPENDING q.journal"
assert_eq 0 "$(xlen q.journal.dlq)" "XLEN q.journal.dlq"
