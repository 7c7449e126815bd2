# The delayed-message promoter serves a chunk of tasks per script call
# with one budget of members, and the calls take turns over which task
# goes first: a task with a large backlog of due members cannot keep
# another task's due member waiting until that backlog is gone. Both
# tasks are paused, so the promoted entries stay in their streams, in
# the order the promoter added them (entry ids are the server's time).
N=30000
write_config "$TEST_DIR/taskmill.yaml" log_level=info <<YAML
tasks:
  big: { plugin: noop.so, queue: q.fair.big }
  small: { plugin: noop.so, queue: q.fair.small }
YAML
tm pause -c "$TEST_DIR/taskmill.yaml" big >/dev/null || fail "pause big"
tm pause -c "$TEST_DIR/taskmill.yaml" small >/dev/null || fail "pause small"

# due a second ago: all of it is due at the first round
due=$(($(now_ms) - 1000))
out=$(
	for ((i = 1; i <= N; i++)); do
		resp ZADD q.fair.big.scheduled "$due" "{\"id\":\"b$i\",\"body\":{\"i\":$i}}"
	done | rcli --pipe 2>&1
) || fail "redis-cli --pipe: $out"
[[ $out =~ errors:\ 0,\ replies:\ $N ]] || fail "ZADD: $out"
rcall ZADD q.fair.small.scheduled "$due" '{"id":"s1","body":{"i":0}}' >/dev/null

start_daemon "$TEST_DIR/taskmill.yaml"
wait_ping
wait_until "[[ \$(rcall ZCARD q.fair.big.scheduled) == 0 && \$(rcall ZCARD q.fair.small.scheduled) == 0 ]]" 60
assert_eq "$N" "$(rcall XLEN q.fair.big)" "entries promoted into the big task's stream"
# the listing read whole, then its first line (head would close the pipe
# early, and pipefail would call that a failure)
small=$(rcall XRANGE q.fair.small - +)
small_id=${small%%$'\n'*}
[[ $small_id =~ ^[0-9]+-[0-9]+$ ]] || fail "no entry in the small task's stream: '$small_id'"
# the big task's entries added before the small task's one
before=$(rcall XRANGE q.fair.big - "($small_id" COUNT "$N" | grep -c '^[0-9]*-[0-9]*$' || true)
note "$before of the big task's $N members were promoted before the small task's one"
# a call moves at most 500 members; the small task goes first by the
# second call at the latest (before: after all $N)
assert_le 1000 "$before" "members of the big task promoted before the small task's"
stop_daemon
