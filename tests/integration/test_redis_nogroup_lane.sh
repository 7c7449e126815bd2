# Three tasks of one consumer group are read by one XREADGROUP (one lane).
# When one task's stream is deleted, or its group destroyed, the read
# fails (NOGROUP, or UNBLOCKED for a read blocked at the time): the
# warning names that task and its stream (not the first task of the
# read), its group is made again without a reconnection, and every task
# keeps running, that one included.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

JOURNAL=$TEST_DIR/journal.txt
: >"$JOURNAL"
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  ta: { plugin: journal.so, queue: q.ng.a, config: { path: $JOURNAL } }
  tb: { plugin: journal.so, queue: q.ng.b, config: { path: $JOURNAL } }
  tc: { plugin: journal.so, queue: q.ng.c, config: { path: $JOURNAL } }
YAML

runs() { grep -c "\"$1\"" "$JOURNAL" || true; }

start_daemon "$CONF"
wait_ping
for q in a b c; do
	wait_until "[[ \$(rcli EXISTS q.ng.$q) == 1 ]]" 10
done
round=0
run_all() {
	round=$((round + 1))
	for q in a b c; do
		rcall XADD "q.ng.$q" '*' body "{\"n\":\"r$round-$q\"}" >/dev/null
	done
	for q in a b c; do
		wait_until "[[ \$(runs r$round-$q) == 1 ]]" 20
	done
}
run_all

# gone Q HOW: make task tQ's stream or group go (HOW: one command, run in
# one script with an XADD to q.ng.a that ends the lane's blocked read
# first, so that the next read finds the group gone: NOGROUP), and check
# the warning, then that every task runs.
gone() {
	local q=$1 how=$2 before line
	before=$(grep -c "gone from" "$DAEMON_LOG" || true)
	case $how in
	del) rcall EVAL "redis.call('XADD', KEYS[1], '*', 'body', ARGV[1])
		return redis.call('DEL', KEYS[2])" 2 q.ng.a "q.ng.$q" "{\"n\":\"wake-$q\"}" >/dev/null ;;
	destroy) rcall EVAL "redis.call('XADD', KEYS[1], '*', 'body', ARGV[1])
		return redis.call('XGROUP', 'DESTROY', KEYS[2], 'taskmill')" 2 q.ng.a "q.ng.$q" "{\"n\":\"wake-$q\"}" >/dev/null ;;
	# the blocked read itself ends with an error (UNBLOCKED)
	blocked) rcall DEL "q.ng.$q" >/dev/null ;;
	esac
	wait_until "[[ \$(grep -c 'gone from' '$DAEMON_LOG' || true) -gt $before ]]" 20
	line=$(grep "gone from" "$DAEMON_LOG" | tail -n 1)
	note "$how q.ng.$q: $line"
	assert_match "\[broker:redis:t$q\] group 'taskmill' (is|was) gone from 'q\.ng\.$q'" \
		"$line" "the warning names the task and stream that lost their group ($how q.ng.$q)"
	run_all
}
gone b del
gone c destroy
gone b blocked
assert_eq 3 "$(grep -c "gone from" "$DAEMON_LOG" || true)" "warnings"
assert_eq 0 "$(grep -c "reconnecting" "$DAEMON_LOG" || true)" "reconnections (the connection was fine)"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
