# Failover in a 3-node RabbitMQ cluster with quorum queues. Three daemons
# (thread pool, journal.so, heartbeat 5 s) list every node; N messages are
# pre-loaded and a steady publisher adds more on a node that stays up.
# The node the most daemons are on is stopped cleanly (rabbitmqctl stop);
# in a second round, after it came back, the node holding the quorum
# queue's leader is killed with kill -9 (the daemons on it, if any, and
# the leader must move). Each time: every daemon's /ping is 200 again
# within two heartbeats plus the reconnect backoff (sampled every 0.1 s
# throughout: no outage longer than that), every daemon ends on a
# surviving node (/status broker.node), the quorum queue has a leader on a
# surviving node without operator action, and when the queue is drained
# every published message id was journaled at least once: none is lost,
# none dead-lettered.
#
# N is 5,000 in `make check`; `make check-cluster` runs it with
# TM_CLUSTER_FULL=1: 50,000.
. "$TM_SRCDIR/tests/integration/lib_rabbit_cluster.sh"
cluster_start 3
export RABBIT_PORT=${CL_PORT[1]}
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

N=5000
[[ ${TM_CLUSTER_FULL:-0} == 1 ]] && N=50000
HEARTBEAT=5
# the ping may be 503 for: two missed heartbeats, then the backoff (up to
# 5 s) and a connect; bounded generously, the machine is loaded
RECOVER_S=$((2 * HEARTBEAT + 5 + 20))
JOURNAL=$TEST_DIR/journal.txt
Q=$AQ.journal
URLS=$(cluster_urls)
declare -a HTTP=() PIDS=()
for d in 1 2 3; do
	HTTP_PORT=
	write_amqp_config "$TEST_DIR/d$d.yaml" pool_size=2 url="$URLS" \
		amqp="{ queue_type: quorum, heartbeat: ${HEARTBEAT}s }" <<YAML
instance: d$d
tasks:
  journal: { plugin: journal.so, queue: $Q, prefetch: 32, config: { path: $JOURNAL } }
YAML
	HTTP[d]=$HTTP_PORT
done

emit_amqp "$TEST_DIR/d1.yaml" journal '{"n":0}' >"$TEST_DIR/ids"
cluster_amqptool 1 publish "$Q" "$N" '{"n":%d}' >>"$TEST_DIR/ids"
members=$(clusterctl 1 list_queues -q name members 2>/dev/null |
	awk -v q="$Q" '$1 == q {$1 = ""; print}')
note "members of $Q: $members"
for k in 1 2 3; do
	assert_match "${CL_NODE[k]}" "$members" "node $k is a member of $Q"
done

for d in 1 2 3; do
	start_daemon "$TEST_DIR/d$d.yaml"
	PIDS[d]=$DAEMON_PID
done
for d in 1 2 3; do
	wait_ping "${HTTP[d]}" 60
done

# node_of_daemon D: the cluster node daemon D is connected to (0: none)
node_of_daemon() {
	local url port
	url=$(curl -sf -m 5 "http://127.0.0.1:${HTTP[$1]}/status" | jq -r '.broker.node // empty') || true
	port=${url##*:}
	port=${port%%/*}
	if [[ -z $port ]]; then
		echo 0
	else
		cluster_node_of_port "$port"
	fi
}

# busiest_node: the node most daemons are on
busiest_node() {
	local d k best=1
	local -a count=(0 0 0 0)
	for d in 1 2 3; do
		k=$(node_of_daemon "$d")
		count[k]=$((count[k] + 1))
	done
	for k in 2 3; do
		((count[k] > count[best])) && best=$k
	done
	note "daemons per node: 1:${count[1]} 2:${count[2]} 3:${count[3]}"
	echo "$best"
}

# leader_node: the node of the quorum queue's leader (0: none)
leader_node() {
	local k leader
	for k in 1 2 3; do
		[[ -n ${CL_PID[k]:-} ]] || continue
		leader=$(clusterctl "$k" list_queues -q name leader 2>/dev/null |
			awk -v q="$Q" '$1 == q {print $2}') || true
		[[ -n $leader ]] && break
	done
	for k in 1 2 3; do
		[[ $leader == "${CL_NODE[k]}" ]] && {
			echo "$k"
			return 0
		}
	done
	echo 0
}

# ping watchers: each daemon's /ping sampled every 0.1 s ("EPOCH_MS
# CODE" lines in ping.D), from before the first failover to the end
declare -a WATCH=()
for d in 1 2 3; do
	: >"$TEST_DIR/ping.$d"
	(
		trap - EXIT ERR
		set +eE
		while :; do
			printf '%s %s\n' "$(now_ms)" "$(http_code /ping "${HTTP[d]}")" >>"$TEST_DIR/ping.$d"
			sleep 0.1
		done
	) &
	WATCH[d]=$!
done
tm_on_exit 'kill ${WATCH[*]} 2>/dev/null || true'

# longest_outage D: the longest stretch, in ms, from a sample of daemon D's
# /ping that was not 200 to the next 200 (0: always 200)
longest_outage() {
	awk '$2 != 200 && !down { down = 1; t0 = $1 }
		$2 == 200 && down { down = 0; if ($1 - t0 > m) m = $1 - t0 }
		END { if (down) m = -1; print m + 0 }' "$TEST_DIR/ping.$1"
}

# publisher K: publish batches of 50 to node K until stopped. A batch
# counts (its ids go to the ids file) only when every message of it was
# confirmed; one refused while the queue elects a leader may or may not
# be in the queue, so it is not counted.
PUB_PID=
publisher_start() {
	local k=$1
	(
		trap - EXIT ERR
		set +eE
		while :; do
			if cluster_amqptool "$k" publish "$Q" 50 '{"steady":%d}' >"$TEST_DIR/batch" \
				2>>"$TEST_DIR/publisher.err"; then
				cat "$TEST_DIR/batch" >>"$TEST_DIR/ids"
			fi
			sleep 0.2
		done
	) &
	PUB_PID=$!
	tm_on_exit 'kill $PUB_PID 2>/dev/null || true'
}
publisher_stop() {
	kill "$PUB_PID" 2>/dev/null || true
	wait "$PUB_PID" 2>/dev/null || true
	PUB_PID=
}

# failover HOW: stop the busiest node (HOW stop), or kill -9 the leader's
# (HOW kill), while the daemons run
failover() {
	local how=$1 victim other d k t0 left leader
	wait_until "[[ -f $JOURNAL && \$(wc -l <$JOURNAL) -ge 300 ]]" 60
	leader=$(leader_node)
	if [[ $how == stop ]]; then
		victim=$(busiest_node)
	else
		busiest_node >/dev/null
		victim=$leader
	fi
	((victim > 0)) || fail "no node to take down (leader: $leader)"
	other=$((victim % 3 + 1))
	note "round '$how': node $victim (${CL_NODE[victim]}) goes; publishing to node $other"
	publisher_start "$other"
	note "leader of $Q before: node $leader"
	t0=$(now_ms)
	if [[ $how == stop ]]; then
		cluster_stop_node "$victim"
	else
		cluster_kill_node "$victim"
	fi
	for d in 1 2 3; do
		wait_until "[[ \$(http_code /ping ${HTTP[d]}) == 200 && \$(node_of_daemon $d) != $victim && \$(node_of_daemon $d) != 0 ]]" "$RECOVER_S"
		daemon_alive "${PIDS[d]}" || fail "daemon $d died"
	done
	note "round '$how': every daemon back on a surviving node after $(($(now_ms) - t0)) ms"
	wait_until "[[ \$(leader_node) != 0 && \$(leader_node) != $victim ]]" 60
	note "leader of $Q after: node $(leader_node)"
	sleep 2
	publisher_stop
	[[ ! -s $TEST_DIR/publisher.err ]] || note "publisher errors: $(sort "$TEST_DIR/publisher.err" | uniq -c)"
	# the queue drains on the surviving nodes
	wait_until "[[ \$(cluster_amqptool $other count $Q) == 0 ]]" 180
	left=$(sort -u "$TEST_DIR/ids" | wc -l)
	wait_until "[[ \$(journal_unique $JOURNAL) -ge $left ]]" 60
	VICTIM=$victim
}

failover stop
cluster_start_node "$VICTIM"
cluster_await_node "$VICTIM" 90 || fail "node $VICTIM did not come back"
wait_until "clusterctl 1 cluster_status 2>/dev/null | grep -qF '${CL_NODE[VICTIM]}'" 30
failover kill

kill "${WATCH[@]}" 2>/dev/null || true
wait "${WATCH[@]}" 2>/dev/null || true
for d in 1 2 3; do
	out=$(longest_outage "$d")
	note "daemon $d: longest /ping outage $out ms over $(grep -c . "$TEST_DIR/ping.$d") samples, $(awk '$2 != 200' "$TEST_DIR/ping.$d" | wc -l) not 200"
	assert_ge 0 "$out" "daemon $d's /ping ends 200"
	assert_le "$((RECOVER_S * 1000))" "$out" "daemon $d's longest /ping outage (ms)"
done
for d in 1 2 3; do
	DAEMON_PID=${PIDS[d]}
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon $d exit status after SIGTERM"
done

cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ids.journal"
sort -u "$TEST_DIR/ids" >"$TEST_DIR/ids.sorted"
missing=$(comm -23 "$TEST_DIR/ids.sorted" "$TEST_DIR/ids.journal" | wc -l)
assert_eq 0 "$missing" "published ids never journaled"
total=$(wc -l <"$JOURNAL")
published=$(wc -l <"$TEST_DIR/ids.sorted")
note "$total runs for $published messages: $((total - published)) run again after the failovers"
k=$(( (VICTIM % 3) + 1 ))
assert_eq 0 "$(cluster_amqptool "$k" count "$Q.dlq")" "dead letters"
