# concurrency: 2 caps a task's runs at once in this daemon whatever the
# pool's size, while another task uses the other workers; in the thread
# pool and in the fork pool. From the plugin's own journal of start and
# end times: never more than 2 runs of the capped task at once, and the
# other task ran 4 or more at once beside them. Held-back messages wait in
# the stream: no attempt is spent, nothing fails.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

SLOW=10
FAST=40

# overlapping JOURNAL: the most runs of both tasks at once while a run of
# "capped" was in progress.
overlapping() {
	awk '{ print $3, ($5 == "capped" ? 1 : 3); print $4, ($5 == "capped" ? 0 : 2) }' "$1" |
		sort -k1,1n -k2,2n | awk '
			$2 == 1 { c++ } $2 == 0 { c-- } $2 == 3 { o++ } $2 == 2 { o-- }
			{ if (c > 0 && c + o > best) best = c + o }
			END { print best + 0 }'
}

for kind in thread fork; do
	note "pool kind $kind"
	JOURNAL=$TEST_DIR/runs.$kind.txt
	CONF=$TEST_DIR/$kind.yaml
	HTTP_PORT=
	write_config "$CONF" pool_kind=$kind pool_size=8 <<YAML
tasks:
  capped:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.capped.$kind
    prefetch: 16
    concurrency: 2
    config: { path: $JOURNAL, ms: 400 }
  free:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.free.$kind
    prefetch: 16
    config: { path: $JOURNAL, ms: 400 }
YAML
	xadd_bulk "q.capped.$kind" "$SLOW" '{"n":%d}'
	xadd_bulk "q.free.$kind" "$FAST" '{"n":%d}'
	start_daemon "$CONF"
	wait_ping
	wait_metric taskmill_tasks_total 'task="capped",outcome="success"' "$SLOW" 120
	wait_metric taskmill_tasks_total 'task="free",outcome="success"' "$FAST" 120
	assert_eq $((SLOW + FAST)) "$(wc -l <"$JOURNAL")" "runs journaled ($kind)"
	assert_eq "" "$(awk '$2 != 1' "$JOURNAL" | head -n 3)" "runs past their first attempt ($kind)"
	# shellcheck disable=SC2016
	capped=$(runs_at_once "$JOURNAL" '$5 == "capped"')
	# shellcheck disable=SC2016
	free=$(runs_at_once "$JOURNAL" '$5 == "free"')
	both=$(overlapping "$JOURNAL")
	note "$kind: capped $capped at once, free $free at once, $both at once beside capped runs"
	assert_eq 2 "$capped" "most capped runs at once ($kind)"
	assert_ge 4 "$free" "most free runs at once ($kind)"
	assert_ge 4 "$both" "runs at once while capped ones ran ($kind)"
	assert_ge 1 "$(metric taskmill_rate_limited_total 'task="capped"')" "rate_limited_total of capped ($kind)"
	assert_eq 0 "$(metric taskmill_rate_limited_total 'task="free"')" "rate_limited_total of free ($kind)"
	assert_eq 0 "$(metric taskmill_retries_total)" "retries ($kind)"
	stop_daemon
done
