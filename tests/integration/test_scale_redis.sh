# The autoscaling gauges on Redis equal what KEDA's Redis Streams scaler
# computes from the same group (docs/kubernetes.md): the test issues the
# scaler's own commands (XINFO GROUPS lag, XPENDING, XLEN) and the
# delayed set's ZCOUNT, and compares them with taskmill_queue_lag,
# taskmill_queue_pending, taskmill_queue_oldest_age_seconds and
# taskmill_delayed_due, in /metrics, /status and /api/v1/tasks. The
# figures hold still while they are compared: two runs hold the pool,
# the task is paused with messages queued behind them, and the private
# Redis then refuses every write (maxmemory), so that neither intake nor
# the promoter moves anything.
. "$TM_SRCDIR/tests/integration/lib.sh"

command -v jq >/dev/null || skip "jq not installed"

priv_redis_start
REDIS_PORT=$PRIV_REDIS_PORT
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_size=2 log_level=info <<'EOF'
tasks:
  sc: { plugin: sleep.so, queue: q.sc, prefetch: 2 }
  idle: { plugin: noop.so, queue: q.idle }
EOF
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 30
tm_on_exit 'priv_rcli CONFIG SET maxmemory 0 >/dev/null'

# two long runs hold both workers: delivered, not acknowledged
priv_rcli XADD q.sc '*' body '{"ms": 30000}' >/dev/null
priv_rcli XADD q.sc '*' body '{"ms": 30000}' >/dev/null
wait_until "[[ \$(priv_rcli XPENDING q.sc \$(priv_rcli XINFO GROUPS q.sc | sed -n 2p) | head -1) == 2 ]]" 20
tm pause -c "$CONF" sc
((TM_RC == 0)) || fail "taskmill pause sc exited $TM_RC: $(cat "$TM_ERR")"
sleep 0.5

# queued behind them: 5 messages; delayed: 2 later, 3 due long ago. In
# one transaction with the write stop, so the promoter cannot take the
# due ones first.
now=$(priv_rcli TIME | head -1)000
{
	echo MULTI
	for i in 1 2 3 4 5; do echo "XADD q.sc * body '{\"ms\":$i}'"; done
	for i in 1 2; do
		echo "ZADD q.sc.scheduled $((now + 600000)) '{\"id\":\"later$i\",\"body\":{\"ms\":1}}'"
	done
	for i in 1 2 3; do
		echo "ZADD q.sc.scheduled $((now - 60000 * i)) '{\"id\":\"due$i\",\"body\":{\"ms\":1}}'"
	done
	echo "CONFIG SET maxmemory 1"
	echo EXEC
} | priv_rcli >"$TEST_DIR/multi.out"
grep -q "^OK$" "$TEST_DIR/multi.out" || fail "the transaction failed: $(cat "$TEST_DIR/multi.out")"
# the oldest undelivered message ages a little
sleep 1.5

# the scaler's commands
info=$(priv_rcli XINFO GROUPS q.sc)
field() { awk -v k="$1" 'p { print; exit } $0 == k { p = 1 }' <<<"$info"; }
group=$(field name)
lag=$(field lag)
last=$(field last-delivered-id)
pend=$(priv_rcli XPENDING q.sc "$group" | head -1)
len=$(priv_rcli XLEN q.sc)
t0=$(priv_rcli TIME | tr '\n' ' ')
due=$(priv_rcli ZCOUNT q.sc.scheduled -inf "$(($(awk '{print $1}' <<<"$t0") * 1000))")
first=$(priv_rcli XRANGE q.sc "($last" + COUNT 1 | head -1)
note "XINFO GROUPS: group $group lag $lag last-delivered-id $last; XPENDING $pend; XLEN $len; due $due; next entry $first"
assert_eq 5 "$lag" "XINFO GROUPS lag of the paused task"
assert_eq 2 "$pend" "XPENDING of the paused task"
assert_eq 7 "$len" "XLEN: the 5 undelivered and the 2 running"
assert_eq 3 "$due" "ZCOUNT of the due delayed members"

# the first scrape reads the broker now (nothing was read before)
body=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics") || fail "no /metrics"
t1=$(priv_rcli TIME | tr '\n' ' ')
echo "$body" >"$TEST_DIR/metrics.txt"
gauge() { awk -v k="$1{task=\"$2\"}" '$1 == k { print $2 }' <<<"$body"; }
assert_eq "$lag" "$(gauge taskmill_queue_lag sc)" "taskmill_queue_lag == XINFO GROUPS lag"
assert_eq "$lag" "$(gauge taskmill_queue_depth sc)" "taskmill_queue_depth == the lag"
assert_eq "$pend" "$(gauge taskmill_queue_pending sc)" "taskmill_queue_pending == XPENDING"
assert_eq "$due" "$(gauge taskmill_delayed_due sc)" "taskmill_delayed_due == ZCOUNT -inf now"
assert_eq 5 "$(gauge taskmill_scheduled_depth sc)" "taskmill_scheduled_depth: all delayed members"
# the age of the first entry after last-delivered-id, by the server's
# clock, between the TIMEs read around the scrape
ms=${first%%-*}
ms_of() { awk '{ printf "%d", $1 * 1000 + int($2 / 1000) }' <<<"$1"; }
lo=$(($(ms_of "$t0") - ms))
hi=$(($(ms_of "$t1") - ms))
age=$(gauge taskmill_queue_oldest_age_seconds sc)
age_ms=$(awk -v a="$age" 'BEGIN { printf "%d", a * 1000 + 0.5 }')
note "oldest age $age s; the server's clock says between $lo and $hi ms"
assert_ge $((lo - 1)) "$age_ms" "taskmill_queue_oldest_age_seconds (ms) not below the age at the first TIME"
assert_le $((hi + 1)) "$age_ms" "taskmill_queue_oldest_age_seconds (ms) not above the age at the second TIME"
assert_ge 1500 "$age_ms" "the oldest undelivered message waited 1.5 s"
# a task with nothing waiting
assert_eq 0 "$(gauge taskmill_queue_lag idle)" "taskmill_queue_lag of an empty task"
assert_eq 0.000 "$(gauge taskmill_queue_oldest_age_seconds idle)" "oldest age of an empty task"
assert_eq 0 "$(gauge taskmill_delayed_due idle)" "delayed_due of an empty task"

# the same figures in /status and /api/v1/tasks (served from the same read)
for url in /status /api/v1/tasks; do
	j=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT$url") || fail "no $url"
	t=$(jq -c '(.tasks | if type == "array" then map(select(.name == "sc"))[0] else .sc end)' <<<"$j")
	assert_eq "$lag" "$(jq -r .queue_lag <<<"$t")" "$url queue_lag"
	assert_eq "$due" "$(jq -r .delayed_due <<<"$t")" "$url delayed_due"
	a=$(jq -r .oldest_age_seconds <<<"$t")
	assert_eq "$age" "$(awk -v a="$a" 'BEGIN { printf "%.3f", a }')" "$url oldest_age_seconds"
done

priv_rcli CONFIG SET maxmemory 0 >/dev/null
stop_daemon 20 KILL || true
true
