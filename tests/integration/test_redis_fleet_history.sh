# Fleet-wide history on Redis (docs/http.md, GET /api/v1/history): three
# daemons share two tasks; before the next flush each daemon's history
# holds its own counts at least (the broker's plus what it has not sent);
# after a restart of all three (each sends its counts when it stops) the
# counts of successes, failures, dead letters and retries summed over the
# fleet are exact from any daemon, per task and for all tasks, over 1h,
# 24h and 7d.
. "$TM_SRCDIR/tests/integration/lib.sh"
. "$TM_SRCDIR/tests/integration/lib_fleet.sh"

N_OK=30 N_ERR=4 N_REJ=3
for i in 0 1 2; do
	write_config "$TEST_DIR/d$i.yaml" instance=hist-$i http_port=$(free_port) \
		log_level=info pool_size=2 <<YAML
tasks:
  ok: { plugin: noop.so, queue: q.hist.ok }
  bad: { plugin: fail.so, queue: q.hist.bad, max_retries: 1, backoff: 100ms }
YAML
done
for i in 0 1 2; do
	fleet_start "$i" "$TEST_DIR/d$i.yaml"
done
for ((n = 0; n < N_OK; n++)); do
	rcall XADD q.hist.ok '*' body '{}' >/dev/null
done
for ((n = 0; n < N_ERR; n++)); do
	rcall XADD q.hist.bad '*' body '{"mode":"error"}' >/dev/null
done
for ((n = 0; n < N_REJ; n++)); do
	rcall XADD q.hist.bad '*' body '{"mode":"reject"}' >/dev/null
done
# an error is retried once, then dead-lettered; a reject is dead-lettered
want_bad="0 $((2 * N_ERR + N_REJ)) $((N_ERR + N_REJ)) $N_ERR"
want_ok="$N_OK 0 0 0"
want_all="$N_OK $((2 * N_ERR + N_REJ)) $((N_ERR + N_REJ)) $N_ERR"
wait_until "[[ \$(xlen q.hist.bad.dlq) == $((N_ERR + N_REJ)) ]]" 20
ok_sum() {
	local i n=0
	for i in 0 1 2; do
		n=$((n + $(metric taskmill_tasks_total 'task="ok",outcome="success"' "${FLEET_PORT[i]}")))
	done
	echo "$n"
}
wait_until "[[ \$(ok_sum) == $N_OK ]]" 20
# before the daemons' next flush (once a minute), a daemon sees what the
# broker has plus its own counts not sent yet: its own at least
for i in 0 1 2; do
	own=$(metric taskmill_tasks_total 'task="ok",outcome="success"' "${FLEET_PORT[i]}")
	seen=$(fleet_sum "${FLEET_PORT[i]}" 'task=ok' | cut -d' ' -f1)
	assert_ge "$own" "$seen" "successes of ok in the history of daemon $i"
	assert_le "$N_OK" "$seen" "successes of ok in the history of daemon $i"
done

# the answer's shape: 60 points a minute apart, 1440 for 24h, 168 hours for 7d
body=$(curl -sf "http://127.0.0.1:${FLEET_PORT[0]}/api/v1/history?range=1h")
assert_eq "60 60 60000" "$(jq -r '"\(.step_seconds) \(.points | length) \(.points[1].t - .points[0].t)"' <<<"$body")" "1h shape"
assert_eq "60 1440" "$(curl -sf "http://127.0.0.1:${FLEET_PORT[0]}/api/v1/history?range=24h" |
	jq -r '"\(.step_seconds) \(.points | length)"')" "24h shape"
assert_eq "3600 168" "$(curl -sf "http://127.0.0.1:${FLEET_PORT[0]}/api/v1/history?range=7d" |
	jq -r '"\(.step_seconds) \(.points | length)"')" "7d shape"
assert_eq 400 "$(http_code '/api/v1/history?range=2h' "${FLEET_PORT[0]}")" "range=2h"
assert_eq 404 "$(http_code '/api/v1/history?task=nope' "${FLEET_PORT[0]}")" "unknown task"

# a restart of every daemon keeps the fleet's history (Redis holds it):
# each sends what it has not sent yet when it stops
for i in 0 1 2; do
	fleet_stop "$i"
done
for i in 0 1 2; do
	fleet_start "$i" "$TEST_DIR/d$i.yaml"
done
for i in 0 1 2; do
	assert_eq "$want_all" "$(fleet_sum "${FLEET_PORT[i]}" '')" "history after the restart, daemon $i"
	assert_eq "$want_bad" "$(fleet_sum "${FLEET_PORT[i]}" 'task=bad&range=24h')" "24h history of bad after the restart"
	assert_eq "$want_ok" "$(fleet_sum "${FLEET_PORT[i]}" 'task=ok&range=7d')" "7d history of ok after the restart"
done
# the buckets expire: a minute's after 25 h, an hour's after 8 d
m=$(($(date +%s) / 60))
ttl=$(rcli PTTL "{taskmill.fleet}.minute.$m")
((ttl <= 0)) && ttl=$(rcli PTTL "{taskmill.fleet}.minute.$((m - 1))")
assert_le $((25 * 3600 * 1000)) "$ttl" "PTTL of a minute bucket"
assert_ge $((24 * 3600 * 1000)) "$ttl" "PTTL of a minute bucket"
for i in 0 1 2; do
	fleet_stop "$i"
done
