# The due-time index in a cluster (three masters with a replica each):
# one index per slot, "taskmill.due.{N}", N the first decimal number
# whose key hashes to that slot (docs/redis.md, Idle cost). Tasks on
# hash tags of two masters:
#   - a retry (backoff 1 s) is scheduled with its index entry in its own
#     slot's index and runs after its time, within 1 s (plus jitter);
#   - a producer's ZADD with the index entry of its slot runs within 1 s
#     of its time;
#   - a producer's plain ZADD without one is found by the sweep.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

topo_cluster_setup
P0=${TOPO_CLUSTER_PORTS[0]}

ccli() {
	redis-cli -c -p "$P0" "$@"
}

# two hash tags on different masters
TAG=()
declare -A SEEN=()
for ((n = 0; ${#TAG[@]} < 2 && n < 200; n++)); do
	t="{d$n}"
	port=$(topo_slot_port "$(redis-cli -p "$P0" CLUSTER KEYSLOT "$t")")
	[[ -z ${SEEN[$port]:-} ]] || continue
	SEEN[$port]=1
	TAG+=("$t")
done
assert_eq 2 "${#TAG[@]}" "hash tags on two masters"

# due_key TAG: the index key of the tag's slot, as the docs define it
due_key() {
	local slot n
	slot=$(redis-cli -p "$P0" CLUSTER KEYSLOT "$1")
	for ((n = 0; ; n++)); do
		if [[ $(redis-cli -p "$P0" CLUSTER KEYSLOT "$n") == "$slot" ]]; then
			echo "taskmill.due.{$n}"
			return
		fi
	done
}
IDX0=$(due_key "${TAG[0]}")
IDX1=$(due_key "${TAG[1]}")
note "tags ${TAG[*]}, indexes $IDX0 $IDX1"

HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
cat >"$CONF" <<YAML
broker:
  url: [redis://127.0.0.1:$P0]
  redis: { mode: cluster }
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
log: { level: debug }
tasks:
  fail:
    plugin: fail.so
    queue: '${TAG[0]}'
    on_error: requeue
    max_retries: 1
    backoff: 1s
  later: { plugin: noop.so, queue: '${TAG[1]}' }
YAML

start_daemon "$CONF"
wait_ping "$HP" 60
wait_until "grep -q 'ready: every task is subscribed' '$DAEMON_LOG'" 60

# ---- a retry: its index entry in its slot's index, run on time
id=$(ccli XADD "${TAG[0]}" '*' body '{"mode":"error"}')
wait_until "[[ -n \$(ccli ZSCORE '$IDX0' '${TAG[0]}.retry.taskmill') ]]" 10
wait_until "[[ \$(ccli XLEN '${TAG[0]}.dlq') -ge 1 ]]" 15
failed=$(ccli XRANGE "${TAG[0]}.dlq" - + COUNT 1 | tr -d '\r' |
	awk 'f { print; exit } $0 == "failed_at" { f = 1 }')
added=${id%%-*}
note "retry: first delivered at $added, second attempt failed at $failed"
assert_le "$failed" $((added + 1000)) "retry not before its time"
assert_le $((added + 1200 + 1000)) "$failed" "retry within 1 s of its time (jitter 20%)"
wait_until "[[ -z \$(ccli ZSCORE '$IDX0' '${TAG[0]}.retry.taskmill') ]]" 10

# ---- a producer's ZADD with its slot's index entry
due=$(($(now_ms) + 1500))
ccli ZADD "${TAG[1]}.scheduled" "$due" '{"id":"p1","body":{}}' >/dev/null
ccli ZADD "$IDX1" LT "$due" "${TAG[1]}.scheduled" >/dev/null
wait_until "[[ \$(ccli XLEN '${TAG[1]}') -ge 1 ]]" 10
at=$(ccli XRANGE "${TAG[1]}" - + COUNT 1 | sed -n 1p | cut -d- -f1)
note "producer ZADD due $due, entry at $at"
assert_le "$at" "$due" "delayed message not before its time"
assert_le $((due + 1000)) "$at" "delayed message within 1 s of its time"

# ---- a plain ZADD, no index entry: the sweep finds it (two tasks: each
# set swept about once a second)
ccli ZADD "${TAG[1]}.scheduled" 1 '{"id":"p2","body":{}}' >/dev/null
wait_until "[[ \$(ccli XLEN '${TAG[1]}') -ge 2 ]]" 10
assert_eq 0 "$(ccli ZCARD "${TAG[1]}.scheduled")" "members left"
stop_daemon
true
