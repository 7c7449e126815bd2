# taskmill emit --dedup-key on Redis: the key travels as the entry's
# dedup_key field (plain, --delay: as the scheduled member's dedup_key,
# --wait: on the request), so a task with dedup_ttl runs one copy and
# acknowledges the others as duplicates. A duplicate request is answered
# with the first run's result and exit 0. An empty key, or one with a
# control character, is a usage error (exit 2) and publishes nothing.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: q.edk, dedup_ttl: 1m }
YAML

start_daemon "$CONF"
wait_ping

# plain: three copies, one run
for i in 1 2 3; do
	emit "$CONF" add '{"a":1,"b":2}' >/dev/null
	tm emit -c "$CONF" add '{"a":1,"b":2}' --dedup-key order-7
	assert_eq 0 "$TM_RC" "emit --dedup-key exit status ($(cat "$TM_ERR"))"
done
wait_metric taskmill_tasks_total 'task="add",outcome="duplicate"' 2 15
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 4 15
assert_eq 1 "$(rcall EXISTS q.edk.dedup.order-7)" "the key order-7 recorded"
first=$(xids q.edk | sed -n 2p)
assert_eq order-7 "$(xfield q.edk "$first" dedup_key)" "the entry's dedup_key field"

# delayed: the scheduled member carries the key; two copies, one run
tm emit -c "$CONF" add '{"a":2,"b":2}' --delay 1s --dedup-key late-1
assert_eq 0 "$TM_RC" "emit --delay --dedup-key ($(cat "$TM_ERR"))"
member=$(rcall ZRANGE q.edk.scheduled 0 -1)
[[ $member == *'"dedup_key":"late-1"'* ]] || fail "scheduled member without its key: $member"
tm emit -c "$CONF" add '{"a":2,"b":2}' --delay 1s --dedup-key late-1
wait_metric taskmill_tasks_total 'task="add",outcome="duplicate"' 3 20
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 5 20

# a key with a quote and a backslash stays one JSON string in the member
tm emit -c "$CONF" add '{"a":3,"b":3}' --delay 1s --dedup-key 'q"uo\te'
assert_eq 0 "$TM_RC" "emit --dedup-key with a quote ($(cat "$TM_ERR"))"
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 6 20
assert_eq 1 "$(rcall EXISTS 'q.edk.dedup.q"uo\te')" "the quoted key recorded"

# a request: the second copy is a duplicate, answered with the first result
tm emit -c "$CONF" add '{"a":20,"b":22}' --wait 20 --dedup-key ask-1
assert_eq 0 "$TM_RC" "first request ($(cat "$TM_ERR"))"
assert_eq '{"sum":42}' "$(cat "$TM_OUT")" "first answer"
tm emit -c "$CONF" add '{"a":20,"b":22}' --wait 20 --dedup-key ask-1
assert_eq 0 "$TM_RC" "duplicate request ($(cat "$TM_ERR"))"
assert_eq '{"sum":42}' "$(cat "$TM_OUT")" "the duplicate's answer"
wait_metric taskmill_tasks_total 'task="add",outcome="duplicate"' 4 15

# bad keys: usage errors, nothing published
before=$(xlen q.edk)
for k in '' $'a\tb' $'new\nline'; do
	tm emit -c "$CONF" add '{"a":1,"b":1}' --dedup-key "$k"
	assert_eq 2 "$TM_RC" "emit --dedup-key '$k'"
	grep -q -- '--dedup-key needs 1 to 512 characters' "$TM_ERR" ||
		fail "the error for key '$k': $(cat "$TM_ERR")"
done
tm emit -c "$CONF" add '{"a":1,"b":1}' --dedup-key
assert_eq 2 "$TM_RC" "emit --dedup-key without a key"
assert_eq "$before" "$(xlen q.edk)" "entries after the refused emits"
