# Redis Cluster: three masters with a replica each (redis-cli --cluster
# create), one daemon in broker.redis.mode: cluster given one seed node,
# six tasks whose queues (hash tags) sit in six slots, two on each master,
# and a steady publisher that follows MOVED and ASK itself and counts a
# message only once WAIT 1 says a replica has it. During the run:
#   - a slot holding a task moves to another master by hand (SETSLOT
#     IMPORTING / MIGRATING, MIGRATE a key at a time, SETSLOT NODE);
#   - a master is failed over (CLUSTER FAILOVER on its replica): /status
#     and taskmill_broker_node_up show the old master down, the new up;
#   - another master is killed (kill -9) and its replica takes over.
# Every replicated message runs at least once, nothing stays pending;
# `taskmill emit` and the depth gauges work across the masters.
# Last, a task whose keys do not share a hash tag fails `taskmill check`
# with the tag to use.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

topo_cluster_setup
P0=${TOPO_CLUSTER_PORTS[0]}

# six hash tags, two in slots of each master
QUEUES=()
declare -A PER_MASTER=()
for ((n = 0; ${#QUEUES[@]} < 6 && n < 200; n++)); do
	q="{c$n}"
	slot=$(redis-cli -p "$P0" CLUSTER KEYSLOT "$q")
	port=$(topo_slot_port "$slot")
	((${PER_MASTER[$port]:-0} < 2)) || continue
	PER_MASTER[$port]=$((${PER_MASTER[$port]:-0} + 1))
	QUEUES+=("$q")
done
assert_eq 6 "${#QUEUES[@]}" "queues picked"
assert_eq 3 "${#PER_MASTER[@]}" "masters holding them"
SLOT=()
for i in 0 1 2 3 4 5; do
	SLOT[i]=$(redis-cli -p "$P0" CLUSTER KEYSLOT "${QUEUES[i]}")
	: >"$TEST_DIR/journal.$i"
	: >"$TEST_DIR/published.$i"
done
note "queues ${QUEUES[*]} in slots ${SLOT[*]}"

HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
{
	echo "broker:"
	echo "  url: [redis://127.0.0.1:$P0]"
	echo "  redis: { mode: cluster }"
	echo "pool: { kind: thread, size: 4 }"
	echo "plugin_dir: $TM_PLUGINS"
	echo "http: { listen: 127.0.0.1:$HP }"
	echo "log: { level: debug }"
	echo "tasks:"
	for i in 0 1 2 3 4 5; do
		echo "  t$i:"
		echo "    plugin: journal.so"
		echo "    queue: '${QUEUES[i]}'"
		echo "    claim_idle: 2s"
		echo "    config: { path: $TEST_DIR/journal.$i }"
	done
} >"$CONF"

# the publisher: XADD to the master it knows for the queue, following
# MOVED (and remembering) and ASK (ASKING), then WAIT 1 on that master
(
	declare -A at=()
	n=0
	while [[ ! -e $TEST_DIR/stop ]]; do
		i=$((n % 6))
		q=${QUEUES[i]}
		port=${at[$q]:-$P0}
		asking=
		for try in 1 2 3 4 5; do
			out=$(printf '%sXADD %s * body "{\\"n\\":%d}"\nWAIT 1 2000\n' \
				"$asking" "$q" "$n" | redis-cli -p "$port" 2>/dev/null) || true
			[[ -z $asking ]] || out=$(sed 1d <<<"$out")
			first=$(sed -n 1p <<<"$out")
			if [[ $first =~ ^MOVED\ [0-9]+\ [0-9.]+:([0-9]+) ]]; then
				port=${BASH_REMATCH[1]}
				at[$q]=$port
				asking=
				continue
			fi
			if [[ $first =~ ^ASK\ [0-9]+\ [0-9.]+:([0-9]+) ]]; then
				port=${BASH_REMATCH[1]}
				asking=$'ASKING\n'
				continue
			fi
			if [[ -z $first || $first =~ ^(CLUSTERDOWN|TRYAGAIN) ]]; then
				# a failover in progress, or a dead node: ask again
				sleep 0.2
				port=${TOPO_CLUSTER_PORTS[RANDOM % 6]}
				asking=
				continue
			fi
			break
		done
		acks=$(sed -n 2p <<<"$out")
		if [[ $first =~ ^[0-9]+-[0-9]+$ && $acks =~ ^[1-9] ]]; then
			echo "$first" >>"$TEST_DIR/published.$i"
		fi
		n=$((n + 1))
		sleep 0.02
	done
) &
PUB=$!
tm_on_exit "touch $TEST_DIR/stop; wait $PUB 2>/dev/null"

start_daemon "$CONF"
wait_ping "$HP" 60

# processed(I): distinct published ids of task I that ran
processed() {
	journal_count_covered "$TEST_DIR/published.$1" "$TEST_DIR/journal.$1"
}
all_grow() {
	local i
	for i in 0 1 2 3 4 5; do
		(($(processed "$i") >= ${1:-0} + ${BASE[i]:-0})) || return 1
	done
}
mark() {
	local i
	for i in 0 1 2 3 4 5; do BASE[i]=$(processed "$i"); done
}
BASE=()
wait_until "all_grow 3" 60
note "all six tasks processing"

# ---- a slot holding task 0 moves to the master of task 2
from=$(topo_slot_port "${SLOT[0]}")
to=$(topo_slot_port "${SLOT[2]}")
[[ $from != "$to" ]] || to=$(topo_slot_port "${SLOT[4]}")
assert_ne "$from" "$to" "the slot moves to another master"
topo_move_slot "${SLOT[0]}" "$from" "$to"
wait_until "[[ \$(topo_slot_port ${SLOT[0]}) == $to ]]" 30
note "slot ${SLOT[0]} (${QUEUES[0]}) moved from $from to $to"
mark
wait_until "all_grow 3" 60

# ---- CLUSTER FAILOVER of the master of task 4
old=$(topo_slot_port "${SLOT[4]}")
new=$(topo_replica_of "$old")
[[ -n $new ]] || fail "no replica of the master on $old"
redis-cli -p "$new" CLUSTER FAILOVER >/dev/null
wait_until "[[ \$(topo_slot_port ${SLOT[4]}) == $new ]]" 60
note "failover: slot ${SLOT[4]} served by $new, was $old"
mark
wait_until "all_grow 3" 60
# the nodes as the daemon sees them: the old master down, the new up
wait_metric taskmill_broker_node_up "node=\"redis://127.0.0.1:$new\"" 1 30
wait_metric taskmill_broker_node_up "node=\"redis://127.0.0.1:$old\"" 0 30
nodes=$(curl -sf -m 5 "http://127.0.0.1:$HP/status" | jq -c .broker.nodes)
assert_eq true "$(jq --arg n "redis://127.0.0.1:$new" 'any(.[]; .node == $n and .up)' <<<"$nodes")" \
	"/status broker.nodes: the new master up ($nodes)"
assert_eq false "$(jq --arg n "redis://127.0.0.1:$old" 'any(.[]; .node == $n and .up)' <<<"$nodes")" \
	"/status broker.nodes: the old master not up ($nodes)"

# ---- kill -9 of the master of task 2 (the one the slot moved to)
victim=$(topo_slot_port "${SLOT[2]}")
heir=$(topo_replica_of "$victim")
[[ -n $heir ]] || fail "no replica of the master on $victim"
for i in 0 1 2 3 4 5; do
	[[ ${TOPO_CLUSTER_PORTS[i]} == "$victim" ]] && vi=$i
done
kill -KILL "${TOPO_CLUSTER_PIDS[vi]}"
wait "${TOPO_CLUSTER_PIDS[vi]}" 2>/dev/null || true
wait_until "[[ \$(redis-cli -p $heir ROLE | head -1) == master ]]" 60
note "kill -9 of $victim: $heir took over"
# back as a replica of the new master, so that WAIT 1 succeeds again
topo_cluster_restart "$vi"
mark
wait_until "all_grow 3" 90
touch "$TEST_DIR/stop"
wait "$PUB" 2>/dev/null || true

# every replicated message ran; nothing stays pending
for i in 0 1 2 3 4 5; do
	wait_until "(( \$(processed $i) == \$(sort -u $TEST_DIR/published.$i | wc -l) ))" 60
	assert_journal_covers "$TEST_DIR/published.$i" "$TEST_DIR/journal.$i" "task t$i (${QUEUES[i]})"
	wait_until "[[ \$(redis-cli -c -p $P0 XPENDING '${QUEUES[i]}' taskmill | head -1) == 0 ]]" 30
done
assert_eq 200 "$(http_code /ping "$HP")" "/ping after the moves"
# the CLI routes by slot too, and the depths come from every master
# (0, even where a failover or a move left Redis's lag counter wrong)
id=$(emit "$CONF" t3 '{"cli":true}')
wait_until "grep -q '^$id ' $TEST_DIR/journal.3" 30
for i in 0 1 2 3 4 5; do
	wait_metric taskmill_queue_depth "task=\"t$i\"" 0 30
	wait_metric taskmill_queue_pending "task=\"t$i\"" 0 30
done
stop_daemon

# ---- a task whose keys are in different slots: check proposes a tag
cat >"$TEST_DIR/untagged.yaml" <<YAML
broker:
  url: [redis://127.0.0.1:$P0]
  redis: { mode: cluster }
plugin_dir: $TM_PLUGINS
tasks:
  orders: { plugin: noop.so, queue: orders }
YAML
tm check -c "$TEST_DIR/untagged.yaml"
assert_eq 2 "$TM_RC" "check of a task without a hash tag in cluster mode"
grep -q "{orders}" "$TM_ERR" || fail "check does not propose the tag: $(head -c 500 "$TM_ERR")"
grep -q "hash slot" "$TM_ERR" || fail "check does not say why: $(head -c 500 "$TM_ERR")"
