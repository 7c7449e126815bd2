# Fork pool and SIGTERM, repeated: whenever the daemon stops while every
# worker process runs a task, each of those tasks finishes AND is
# acknowledged before the daemon exits 0; the messages not started stay
# pending. Repeated because a lost acknowledgement here is a race (the
# pool reporting itself drained before its last answers reached the settle
# step): one round would catch it only now and then.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=3
N=6
MS=1500
ROUNDS=${TM_FORK_DRAIN_ROUNDS:-12}
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL shutdown_timeout=10s \
	instance=it-fork-drain log_level=info <<YAML
tasks:
  sleep: { plugin: sleep.so, queue: q.sleep, prefetch: $N, claim_idle: 60s }
YAML

bad=()
for ((r = 1; r <= ROUNDS; r++)); do
	rcall DEL q.sleep >/dev/null
	start_daemon "$CONF"
	wait_ping
	wait_children "$POOL"
	mapfile -t kids < <(daemon_children)
	xadd_bulk q.sleep "$N" "{\"ms\":$MS,\"n\":%d}"
	if ! wait_busy "$POOL" $((MS - 200)); then
		fail "round $r: taskmill_pool_busy never showed $POOL within $((MS - 200)) ms" \
			"(last $(metric taskmill_pool_busy || true))"
	fi
	rc=0
	stop_daemon 15 || rc=$?
	assert_eq 0 "$rc" "round $r: daemon exit status after SIGTERM"
	wait_tags_gone 0 "${kids[@]}"
	state=$(stream_state q.sleep)
	note "round $r: acked/pending/undelivered $state (stopped in ${DAEMON_STOP_MS} ms)"
	if [[ $state != "$POOL $((N - POOL)) 0" ]]; then
		bad+=("round $r: $state (log ${DAEMON_LOG##*/})")
	fi
	assert_eq 0 "$(xlen q.sleep.dlq)" "round $r: XLEN q.sleep.dlq"
done
if ((${#bad[@]})); then
	fail "${#bad[@]} of $ROUNDS rounds did not leave exactly the $POOL running" \
		"messages acked and the other $((N - POOL)) pending:" "$(printf '%s; ' "${bad[@]}")"
fi
