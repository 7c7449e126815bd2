# A daemon never reclaims an entry it is running itself. Its keep-alive
# refresh resets the idle time of the entries it holds every quarter of
# claim_idle; when that refresh comes late (a loaded host, a slow settle
# thread), an entry it is running looks idle past claim_idle, and the
# reclaim round, which takes such entries from any consumer, took it to
# itself and ran it a second time beside the first (seen once under ASan
# in redis_kill9). The test plays the late refresh: while a 4 s run goes
# on, it sets the entry's idle time to 60 s again and again (XCLAIM to
# the same consumer with IDLE, JUSTID: no delivery counted). The entry
# runs once, no reclaim is logged, nothing is left pending. An entry of
# the same consumer that nobody holds (left by the previous run of the
# daemon and not read again) is still reclaimed.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/runs.txt
write_config "$CONF" pool_size=2 instance=own <<YAML
tasks:
  own:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.own
    prefetch: 4
    claim_idle: 1s
    config: { path: $JOURNAL }
YAML
start_daemon "$CONF"
wait_ping

id=$(rcall XADD q.own '*' body '{"ms":4000}')
wait_metric taskmill_pool_busy '' 1 20
owner=$(rcall XPENDING q.own taskmill - + 1)
note "pending while running: $(tr '\n' ' ' <<<"$owner")"
consumer=$(sed -n 2p <<<"$owner")
[[ -n $consumer ]] || fail "no consumer holds $id"

# the late refresh, played for 3 s: the entry looks idle for a minute
deadline=$(($(now_ms) + 3000))
while (($(now_ms) < deadline)); do
	rcall XCLAIM q.own taskmill "$consumer" 0 "$id" IDLE 60000 JUSTID >/dev/null
	sleep 0.02
done

wait_metric taskmill_tasks_total 'task="own",outcome="success"' 1 20
wait_until '[[ $(xpending q.own) == 0 ]]' 20
# a second run, had one started, would have ended by now
wait_metric taskmill_pool_busy '' 0 20
runs=$(grep -c "^$id " "$JOURNAL" || true)
assert_eq 1 "$runs" "runs of the entry the daemon was running"
log=$(cat "$DAEMON_LOG")
# the reclaim's own line, not the refresh's "kept ... from being reclaimed"
[[ $log != *"] reclaimed "* ]] ||
	fail "the daemon reclaimed an entry it was running: $(grep '] reclaimed ' <<<"$log")"
stop_daemon 15

# An entry of the same consumer that no process holds is still reclaimed:
# with the task paused (nothing read), the test reads a new entry as the
# daemon's consumer behind its back, as a previous run of the daemon
# would have left it; once resumed, the daemon's reclaim round takes it.
start_daemon "$CONF"
wait_ping
tm pause -c "$CONF" own
assert_eq 0 "$TM_RC" "taskmill pause exit status"
wait_metric taskmill_task_paused 'task="own"' 1 30
id2=$(rcall XADD q.own '*' body '{"ms":0}')
got=$(rcall XREADGROUP GROUP taskmill "$consumer" COUNT 1 STREAMS q.own '>')
assert_match "$id2" "$got" "entry read behind the daemon's back"
sleep 1.5 # idle past claim_idle (1 s)
tm resume -c "$CONF" own
assert_eq 0 "$TM_RC" "taskmill resume exit status"
wait_until "grep -q '^$id2 ' '$JOURNAL'" 30
wait_until '[[ $(xpending q.own) == 0 ]]' 20
assert_eq 1 "$(grep -c "^$id2 " "$JOURNAL")" "runs of the entry no process held"
log=$(cat "$DAEMON_LOG")
[[ $log == *"] reclaimed "* ]] || fail "the entry no process held was not reclaimed"
stop_daemon 15
