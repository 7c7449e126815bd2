# Redis goes away under a running daemon and comes back (same port, same
# data dir, append-only file fsynced always). While it is gone /ping is 503
# and taskmill_broker_up 0; tasks that were already delivered finish
# meanwhile and are acknowledged after the reconnect (not run again); the
# daemon reconnects by itself and goes on with new messages. Nothing is
# lost, nothing stays pending. Uses a redis-server of its own, not the run's.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N1=200
N2=200
POOL=2
PAD=$(printf '%01900d' 0) # ~1.9 KiB lines: the 64 KiB pipe holds ~33
FIFO=$TEST_DIR/journal.fifo
JOURNAL=$TEST_DIR/journal.txt
CONF=$TEST_DIR/taskmill.yaml

priv_redis_start "$TEST_DIR/redis"
# shellcheck disable=SC2034 # read by lib.sh: rcall, write_config, ...
REDIS_PORT=$PRIV_REDIS_PORT # every helper uses the private server now

write_config "$CONF" pool_size=$POOL <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.rs
    prefetch: 16
    config: { path: $FIFO }
YAML
fifo_open "$FIFO"
: >"$JOURNAL"

xadd_bulk q.rs "$N1" "{\"batch\":1,\"n\":%d,\"pad\":\"$PAD\"}"
start_daemon "$CONF"
wait_ping
assert_eq 1 "$(metric taskmill_broker_up)" "taskmill_broker_up"

# Some are done; the daemon is stalled on the FIFO with deliveries in hand.
fifo_read 30 "$JOURNAL"
wait_metric taskmill_pool_busy '' "$POOL" 20
wait_until "[[ \$(xpending q.rs) -ge $POOL ]]" 10
note "before the outage: $(stream_state q.rs) (acked pending undelivered)"

# ---- Redis goes away
priv_redis_stop
t_down=$(now_ms)
wait_until '[[ $(http_code /ping) == 503 ]]' 10
wait_until '[[ $(metric taskmill_broker_up) == 0 ]]' 10
note "/ping 503 and taskmill_broker_up 0 after $(($(now_ms) - t_down)) ms"
assert_eq 200 "$(http_code /healthz)" "/healthz while redis is down"

# Let the stalled tasks (and the deliveries already prefetched) finish now.
lines_before=$(wc -l <"$JOURNAL")
fifo_drain_start "$JOURNAL"
wait_until "(( \$(wc -l <$JOURNAL) >= lines_before + POOL ))" 10
wait_metric taskmill_pool_busy '' 0 10
lines_down=$(wc -l <"$JOURNAL")
tail -n +$((lines_before + 1)) "$JOURNAL" | cut -d' ' -f1 >"$TEST_DIR/ids.during_outage"
note "$((lines_down - lines_before)) lines written while redis was down"
assert_eq 503 "$(http_code /ping)" "/ping while redis is down"
daemon_alive || fail "the daemon died while redis was down"

# ---- Redis comes back: same port, same dir (AOF reload)
priv_redis_start "$TEST_DIR/redis" "$PRIV_REDIS_PORT"
assert_eq "$N1" "$(xlen q.rs)" "XLEN q.rs after the AOF reload"
wait_ping "$HTTP_PORT" 20
note "/ping 200 again $(($(now_ms) - t_down)) ms after redis went away"
# The settle link finds that Redis restarted on its next use and reconnects
# at once, without marking the broker down (test redis_restart_blink); the
# gauge is read with a bounded wait all the same, as the intake's reconnect
# and the first look of /ping race.
wait_metric taskmill_broker_up '' 1 10
assert_ge 1 "$(metric taskmill_broker_reconnects_total)" "taskmill_broker_reconnects_total"

xadd_bulk q.rs "$N2" '{"batch":2,"n":%d}'
xids q.rs >"$TEST_DIR/ids.all"
assert_eq $((N1 + N2)) "$(wc -l <"$TEST_DIR/ids.all")" "XLEN q.rs"
wait_until "[[ \$(journal_count_covered $TEST_DIR/ids.all $JOURNAL) == $((N1 + N2)) ]]" 30
wait_until '[[ $(xpending q.rs) == 0 ]]' 15

assert_journal_covers "$TEST_DIR/ids.all" "$JOURNAL" "all $((N1 + N2)) messages"
assert_journal_only "$TEST_DIR/ids.all" "$JOURNAL"
assert_eq "$((N1 + N2)) 0 0" "$(stream_state q.rs)" "acked/pending/undelivered of q.rs"
assert_eq 0 "$(xlen q.rs.dlq)" "XLEN q.rs.dlq"

# What finished while redis was down was acknowledged after the reconnect,
# not delivered and run again.
again=$(comm -12 <(sort -u "$TEST_DIR/ids.during_outage") <(journal_ids "$JOURNAL" | uniq -d) | wc -l)
if ((again > 0)); then
	comm -12 <(sort -u "$TEST_DIR/ids.during_outage") <(journal_ids "$JOURNAL" | uniq -d) | sed -n 1,5p >&2
	fail "$again messages finished while redis was down ran again after the reconnect (first above)"
fi

assert_eq 200 "$(http_code /ping)" "/ping at the end"
assert_ge 1 "$(metric taskmill_broker_reconnects_total)" "taskmill_broker_reconnects_total"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
