# Fork pool, the shared rings (fork/ring.h) at their edges (the answers'
# bytes through the rings are compared in test_amqp_fork_ring.sh):
#  - bodies larger than the rings take the socket: an echo task checks
#    every body, from a few bytes to 5 MiB (request ring 1 MiB; answers of
#    more than 2 KiB take the socket too); twelve bodies of 400 KiB, added
#    at once, fill the rings (two fit) while the children still have
#    bodies out, so that later ones go back to the queue to wait for room;
#  - a child killed while it writes an answer: an answer never published,
#    one published half written, one whose result on the socket is cut off.
#    None is taken for a result; each costs its message one attempt
#    (crashed), and the retry succeeds;
#  - once the children are idle, the ring pages go back to the system.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
CONF=$TEST_DIR/taskmill.yaml
ECHO=$TM_BUILD/test-plugins/echo.so
KILL=$TM_BUILD/test-plugins/ringkill.so
[[ -f $ECHO && -f $KILL ]] || fail "test plugins not built (make test-plugins)"

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  echo: { plugin: $ECHO, queue: q.echo, timeout: 60s, max_retries: 0, max_payload: 8MiB }
  kill:
    plugin: $KILL
    queue: q.kill
    max_retries: 2
    backoff: 100ms
    timeout: 20s
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"

# add_echo PAD: a message whose body is {"pad":"xxx..."} (PAD x's);
# prints its id. Built inside Redis: a command-line argument cannot be
# that long.
add_echo() {
	rcall EVAL "return redis.call('XADD', KEYS[1], '*', 'body',
		'{\"pad\":\"' .. string.rep('x', tonumber(ARGV[1])) .. '\"}')" 1 q.echo "$1"
}
SIZES=(10 100000 5242880 20 409600 9000 2000000 30)

for size in "${SIZES[@]}"; do
	add_echo "$size" >/dev/null
done
N_ECHO=$((${#SIZES[@]} + 12))
rcall EVAL "for i = 1, 12 do
		redis.call('XADD', KEYS[1], '*', 'body',
			'{\"pad\":\"' .. string.rep('x', 409600) .. '\"}')
	end" 1 q.echo >/dev/null

declare -A MODE_OF=()
for mode in unpublished torn bulkcut; do
	id=$(rcall XADD q.kill '*' body "{\"mode\":\"$mode\"}")
	MODE_OF[$id]=$mode
done

wait_metric taskmill_tasks_total 'task="echo",outcome="success"' "$N_ECHO" 60
wait_metric taskmill_tasks_total 'task="kill",outcome="success"' 3 30
daemon_alive || fail "daemon died"

# the killed children: one attempt each, with the reason of its kind
assert_eq 3 "$(metric taskmill_tasks_total 'task="kill",outcome="crashed"')" "kill: crashed attempts"
for outcome in error rejected timeout invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"kill\",outcome=\"$outcome\"")" "kill outcome $outcome"
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"echo\",outcome=\"$outcome\"")" "echo outcome $outcome"
done
for id in "${!MODE_OF[@]}"; do
	mode=${MODE_OF[$id]}
	line=$(grep "id=$id attempt 1 crashed" "$DAEMON_LOG" | head -n 1)
	note "$mode: $line"
	[[ -n $line ]] || fail "$mode: no crashed first attempt of $id in the log"
	case $mode in
	torn) assert_match 'malformed reply' "$line" "$mode: reason" ;;
	*) assert_match 'killed by SIGKILL while running' "$line" "$mode: reason" ;;
	esac
	grep -q "id=$id attempt 2 crashed" "$DAEMON_LOG" && fail "$mode: the retry crashed too"
done
assert_eq "3 0 0" "$(stream_state q.kill)" "acked/pending/undelivered of q.kill"
assert_eq "$N_ECHO 0 0" "$(stream_state q.echo)" "acked/pending/undelivered of q.echo"
wait_children "$POOL" 10

# ring_rss: the resident KiB of the rings in the daemon (every child's
# memfd mapped there); the bodies above touched about 1 MiB of a ring
ring_rss() {
	awk '/^[0-9a-f]+-[0-9a-f]+ / { r = ($0 ~ /taskmill-fork-ring/) }
		r && /^Rss:/ { n += $2 } END { print n + 0 }' "/proc/$DAEMON_PID/smaps"
}
# a child idle for a second gives its ring pages back (control pages stay)
note "rings resident in the daemon after the load: $(ring_rss) KiB"
wait_until '(( $(ring_rss) <= 64 ))' 10
note "rings resident in the daemon when idle: $(ring_rss) KiB"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
