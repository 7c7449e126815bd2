# `taskmill dlq list|show|replay|purge`. The add task rejects bodies without
# "b", so they are dead-lettered; list shows them newest first with origin
# ids and attempts, show prints one as JSON; purge and replay work on one id
# or all, and a missing id is an error (exit 1). After "fixing the fault"
# (the same task name now points at the journal plugin) the replayed bodies
# run, as published. Then: `replay` of all, while the task still fails,
# moves exactly the entries that were there (not the ones dead-lettered
# again meanwhile), and a replay restores a body byte for byte.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=7 # 1 purged alone, 1 replayed alone, 5 replayed together
N_REJ=3
CONF_A=$TEST_DIR/broken.yaml
CONF_B=$TEST_DIR/fixed.yaml
JOURNAL=$TEST_DIR/journal.txt
write_config "$CONF_A" <<YAML
tasks:
  add: { plugin: add.so, queue: q.add, on_error: reject }
  rej: { plugin: fail.so, queue: q.rej, on_error: reject }
YAML
write_config "$CONF_B" <<YAML
tasks:
  add: { plugin: journal.so, queue: q.add, on_error: reject, config: { path: $JOURNAL } }
  rej: { plugin: fail.so, queue: q.rej, on_error: reject }
YAML

# dlq CONF ARGS...: run `taskmill dlq -c CONF ARGS...` (see tm in lib.sh).
dlq() {
	local conf=$1
	shift
	tm dlq -c "$conf" "$@"
}
# expect_out RC TEXT WHAT: the last tm call exited RC and printed TEXT.
expect_out() {
	assert_eq "$1" "$TM_RC" "exit status of $3"
	assert_eq "$2" "$(cat "$TM_OUT")" "output of $3"
}

# ---- 1: dead letters from the broken task
start_daemon "$CONF_A"
wait_ping
declare -A BODY=()
ORIGINS=()
for ((i = 1; i <= N; i++)); do
	body="{\"a\":$i,\"n\":$i}"
	id=$(rcall XADD q.add '*' body "$body")
	BODY[$id]=$body
	ORIGINS+=("$id")
done
xadd_bulk q.rej "$N_REJ" '{"mode":"reject","n":%d}'
wait_metric taskmill_tasks_total 'task="add",outcome="rejected"' "$N" 20
wait_metric taskmill_tasks_total 'task="rej",outcome="rejected"' "$N_REJ" 20
wait_until "[[ \$(xlen q.add.dlq) == $N && \$(xlen q.rej.dlq) == $N_REJ ]]" 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the broken daemon"

declare -A DLQ_OF=()
for dlq_id in $(xids q.add.dlq); do
	DLQ_OF[$(xfield q.add.dlq "$dlq_id" origin_id)]=$dlq_id
done
for id in "${ORIGINS[@]}"; do
	[[ -n ${DLQ_OF[$id]:-} ]] || fail "published $id has no dead letter"
done

# ---- list: one line per entry, newest first, 5 tab-separated columns
dlq "$CONF_A" list add
assert_eq 0 "$TM_RC" "exit status of dlq list"
assert_eq "$N" "$(wc -l <"$TM_OUT")" "lines printed by dlq list"
assert_eq "$(xids q.add.dlq | tac | paste -sd ' ')" "$(cut -f1 "$TM_OUT" | paste -sd ' ')" \
	"dead-letter ids in the list, newest first"
while IFS= read -r line; do
	IFS=$'\t' read -r -a col <<<"$line"
	assert_eq 5 "${#col[@]}" "tab-separated columns in '$line'"
	dlq_id=${col[0]}
	assert_eq "$(xfield q.add.dlq "$dlq_id" origin_id)" "${col[1]}" "origin id listed for $dlq_id"
	[[ -n ${BODY[${col[1]}]:-} ]] || fail "listed origin '${col[1]}' is not a published id"
	assert_eq 1 "${col[2]}" "attempts listed for $dlq_id"
	assert_match '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' "${col[3]}" \
		"failed_at listed for $dlq_id"
	assert_eq "$(xfield q.add.dlq "$dlq_id" failed_at)" "$(iso_to_ms "${col[3]}")" \
		"failed_at listed for $dlq_id, as epoch ms"
	assert_eq "$(xfield q.add.dlq "$dlq_id" error)" "${col[4]}" "error listed for $dlq_id"
	assert_match "b" "${col[4]}" "error listed for $dlq_id (names the missing field)"
done <"$TM_OUT"

# ---- show: one entry as JSON
first=${ORIGINS[0]}
dlq "$CONF_A" show add "${DLQ_OF[$first]}"
assert_eq 0 "$TM_RC" "exit status of dlq show"
jq -e . "$TM_OUT" >/dev/null || fail "dlq show printed no JSON: $(head -c 300 "$TM_OUT")"
assert_eq "${DLQ_OF[$first]}" "$(jq -r .id "$TM_OUT")" "show: id"
assert_eq "$first" "$(jq -r .origin_id "$TM_OUT")" "show: origin_id"
assert_eq add "$(jq -r .task "$TM_OUT")" "show: task"
assert_eq 1 "$(jq -r .attempts "$TM_OUT")" "show: attempts"
assert_eq "$(xfield q.add.dlq "${DLQ_OF[$first]}" error)" "$(jq -r .error "$TM_OUT")" "show: error"
# people read times in RFC 3339, as in list; JSON indented with spaces
assert_match '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' \
	"$(jq -r .failed_at "$TM_OUT")" "show: failed_at in RFC 3339"
assert_eq "$(xfield q.add.dlq "${DLQ_OF[$first]}" failed_at)" "$(iso_to_ms "$(jq -r .failed_at "$TM_OUT")")" "show: failed_at"
grep -q $'\t' "$TM_OUT" && fail "dlq show indents with tabs: $(head -c 300 "$TM_OUT")"
assert_eq '  "id": ' "$(sed -n 2p "$TM_OUT" | cut -c1-8)" "show: two-space indentation"
assert_eq "$(jq -c . <<<"${BODY[$first]}")" "$(jq -c '.body | if type == "string" then fromjson else . end' "$TM_OUT")" \
	"show: body"
for missing in 1-1 9999999999999-0 not-an-id; do
	dlq "$CONF_A" show add "$missing"
	assert_eq 1 "$TM_RC" "exit status of dlq show of missing id $missing"
done

# ---- purge and replay of one id; missing ids are errors and change nothing
dlq "$CONF_A" purge add "${DLQ_OF[$first]}"
expect_out 0 "purged 1 message" "dlq purge ID"
assert_eq "$((N - 1))" "$(xlen q.add.dlq)" "XLEN q.add.dlq after purging one"
assert_eq "" "$(xfield q.add.dlq "${DLQ_OF[$first]}" origin_id)" "the purged entry"
for missing in "${DLQ_OF[$first]}" 1-1 not-an-id; do
	dlq "$CONF_A" purge add "$missing"
	assert_eq 1 "$TM_RC" "exit status of dlq purge of missing id $missing"
	dlq "$CONF_A" replay add "$missing"
	assert_eq 1 "$TM_RC" "exit status of dlq replay of missing id $missing"
done
assert_eq "$((N - 1))" "$(xlen q.add.dlq)" "XLEN q.add.dlq after missing ids"
assert_eq "$N" "$(xlen q.add)" "XLEN q.add after missing ids"

second=${ORIGINS[1]}
dlq "$CONF_A" replay add "${DLQ_OF[$second]}"
expect_out 0 "replayed 1 message" "dlq replay ID"
assert_eq "$((N - 2))" "$(xlen q.add.dlq)" "XLEN q.add.dlq after replaying one"
assert_eq "$((N + 1))" "$(xlen q.add)" "XLEN q.add after replaying one"
new=$(xids q.add | tail -n 1)
assert_eq "${BODY[$second]}" "$(xfield q.add "$new" body)" "body of the replayed entry"
fields=$(xfields q.add "$new" | paste -sd ' ')
for f in task error failed_at origin_id; do
	[[ " $fields " != *" $f "* ]] || fail "the replayed entry kept the failure field $f (fields: $fields)"
done
attempts=$(xfield q.add "$new" attempts)
[[ -z $attempts || $attempts == 0 ]] || fail "the replayed entry has attempts '$attempts', not reset"

# ---- the fault fixed: the replayed bodies run, as published
start_daemon "$CONF_B"
wait_ping
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 1 10
dlq "$CONF_B" replay add
expect_out 0 "replayed $((N - 2)) messages" "dlq replay (all)"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' "$((N - 1))" 10
wait_until '[[ $(xpending q.add) == 0 ]]' 10
assert_eq 0 "$(xlen q.add.dlq)" "XLEN q.add.dlq after replaying all"
dlq "$CONF_B" list add
expect_out 0 "" "dlq list of an empty dead-letter stream"
assert_eq "$((N - 1))" "$(wc -l <"$JOURNAL")" "journal lines"
cut -d' ' -f2- "$JOURNAL" | sort >"$TEST_DIR/bodies.ran"
for id in "${ORIGINS[@]:1}"; do echo "${BODY[$id]}"; done | sort >"$TEST_DIR/bodies.want"
diff "$TEST_DIR/bodies.want" "$TEST_DIR/bodies.ran" >&2 ||
	fail "the journal did not run exactly the replayed bodies (diff above)"
journal_ids "$JOURNAL" >"$TEST_DIR/ids.ran"
if grep -qxF -f <(printf '%s\n' "${ORIGINS[@]}") "$TEST_DIR/ids.ran"; then
	fail "a replay ran under its original id, not as a new entry"
fi

# ---- purge all
dlq "$CONF_B" purge rej
expect_out 0 "purged $N_REJ messages" "dlq purge (all)"
assert_eq 0 "$(xlen q.rej.dlq)" "XLEN q.rej.dlq after purging all"
dlq "$CONF_B" purge rej
expect_out 0 "purged 0 messages" "dlq purge (all) of an empty dead-letter stream"

# ---- robustness (both checked, then reported together)
PROBLEMS=()
# a. replay of all while the task still fails: the daemon dead-letters the
#    replays again at once; the replay must move the entries that were
#    there, once each, and end. (150: more than one batch of the command,
#    so the daemon has time to dead-letter replays before the next batch.)
M=150
xadd_bulk q.rej "$M" '{"mode":"reject","n":%d}'
wait_until "[[ \$(xlen q.rej.dlq) == $M ]]" 10
rc=0
timeout -k 2 15 "$TM_BIN" dlq -c "$CONF_B" replay rej >"$TEST_DIR/replay.out" 2>"$TEST_DIR/replay.err" || rc=$?
out=$(head -c 200 "$TEST_DIR/replay.out")
note "replay of all while failing: exit $rc, '$out'"
if ((rc == 124 || rc == 137)); then
	PROBLEMS+=("dlq replay (all) while the task fails did not end within 15 s")
elif [[ $rc != 0 || $out != "replayed $M messages" ]]; then
	PROBLEMS+=("dlq replay (all) of $M entries while the task fails: exit $rc, printed '$out' (it replays entries dead-lettered again after it started)")
fi
wait_until '[[ $(xpending q.rej) == 0 ]]' 10
# b. a replay restores the body byte for byte: an invalid body with a NUL
#    byte must come back as it was, and be invalid again.
printf '{"a":1,"b":2}\0junk' >"$TEST_DIR/nul.body"
nul_id=$(xadd_file q.add body "$TEST_DIR/nul.body")
wait_metric taskmill_tasks_total 'task="add",outcome="invalid"' 1 10
nul_dlq=$(xids q.add.dlq | tail -n 1)
assert_eq "$nul_id" "$(xfield q.add.dlq "$nul_dlq" origin_id)" "dead letter of the NUL body"
dlq "$CONF_B" replay add "$nul_dlq"
expect_out 0 "replayed 1 message" "dlq replay of the NUL body"
replayed=$(xids q.add | tail -n 1)
# prints "SAME LEN_ORIGINAL LEN_REPLAYED", SAME 1 when byte-identical
cmp=$(rcall EVAL "local function body(id)
		local f = redis.call('XRANGE', KEYS[1], id, id)[1][2]
		for i = 1, #f, 2 do if f[i] == 'body' then return f[i + 1] end end
		return ''
	end
	local a, b = body(ARGV[1]), body(ARGV[2])
	return {a == b and 1 or 0, #a, #b}" 1 q.add "$nul_id" "$replayed" | paste -sd ' ')
read -r same len_orig len_replayed <<<"$cmp"
if [[ $same != 1 ]]; then
	PROBLEMS+=("dlq replay changed a body: the $len_orig bytes '{\"a\":1,\"b\":2}\\0junk' came back as $len_replayed bytes (cut at the NUL)")
fi
wait_until '[[ $(xpending q.add) == 0 ]]' 10
if [[ $(metric taskmill_tasks_total 'task="add",outcome="success"') != "$((N - 1))" ]]; then
	PROBLEMS+=("the replayed NUL body ran (as a valid body) instead of being dead-lettered as invalid again")
fi
if ((${#PROBLEMS[@]} > 0)); then
	printf 'PROBLEM: %s\n' "${PROBLEMS[@]}" >&2
	fail "$(printf '%s; ' "${PROBLEMS[@]}")"
fi

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the fixed daemon"
