# Sentinel failover: a master, a replica and three sentinels; two daemons
# in broker.redis.mode: sentinel, and a steady publisher that asks the
# sentinels for the master and counts a message as published only once
# WAIT 1 says a replica has it. During the run SENTINEL FAILOVER moves
# the master, then the new master is killed (kill -9) and the old one
# takes over again: processing continues on each new master (/status and
# taskmill_broker_node_up name it), every replicated message runs at
# least once, and nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

topo_sentinel_setup
old_master=$(topo_master_port)
assert_eq "$TOPO_MASTER_PORT" "$old_master" "the master the sentinels name"
# a master that has no replica left refuses nothing: WAIT 1 is what makes
# a message count as published

urls=
for p in "${TOPO_SENTINEL_PORTS[@]}"; do
	urls+="${urls:+, }redis://127.0.0.1:$p"
done
# conf N: the config of daemon N (its own instance, journal and port)
conf() {
	cat >"$TEST_DIR/d$1.yaml" <<YAML
broker:
  url: [$urls]
  redis: { mode: sentinel, master: mymaster }
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$2 }
log: { level: debug }
instance: daemon-$1
tasks:
  journal:
    plugin: journal.so
    queue: q.sentinel
    claim_idle: 2s
    config: { path: $TEST_DIR/journal.$1 }
YAML
}
HP1=$(free_port)
HP2=$(free_port)
conf 1 "$HP1"
conf 2 "$HP2"
: >"$TEST_DIR/journal.1"
: >"$TEST_DIR/journal.2"

# the publisher: XADD then WAIT 1 on the master the sentinels name now
PUBLISHED=$TEST_DIR/published.ids
: >"$PUBLISHED"
(
	n=0
	while [[ ! -e $TEST_DIR/stop ]]; do
		m=$(topo_master_port)
		out=$(printf 'XADD q.sentinel * body "{\\"n\\":%d}"\nWAIT 1 2000\n' "$n" |
			redis-cli -p "$m" 2>/dev/null) || true
		id=$(sed -n 1p <<<"$out")
		acks=$(sed -n 2p <<<"$out")
		if [[ $id =~ ^[0-9]+-[0-9]+$ && $acks =~ ^[1-9] ]]; then
			echo "$id" >>"$PUBLISHED"
		fi
		n=$((n + 1))
		sleep 0.02
	done
) &
PUB=$!
tm_on_exit "touch $TEST_DIR/stop; wait $PUB 2>/dev/null"

start_daemon "$TEST_DIR/d1.yaml"
D1=$DAEMON_PID
start_daemon "$TEST_DIR/d2.yaml"
D2=$DAEMON_PID
wait_ping "$HP1" 30
wait_ping "$HP2" 30
all_journals() { cat "$TEST_DIR/journal.1" "$TEST_DIR/journal.2"; }
wait_until "(( \$(all_journals | wc -l) >= 20 ))" 30

# ---- failover asked of the sentinels
redis-cli -p "${TOPO_SENTINEL_PORTS[0]}" SENTINEL FAILOVER mymaster >/dev/null
wait_until "[[ \$(topo_master_port) == $TOPO_REPLICA_PORT ]]" 30
note "failover: the master is now port $TOPO_REPLICA_PORT"
before=$(wc -l <"$PUBLISHED")
wait_until "(( \$(wc -l <$PUBLISHED) >= before + 30 ))" 30
# the nodes as each daemon sees them: the new master up, the old one not
for HTTP_PORT in "$HP1" "$HP2"; do
	wait_metric taskmill_broker_node_up "node=\"redis://127.0.0.1:$TOPO_REPLICA_PORT\"" 1 30
	wait_metric taskmill_broker_node_up "node=\"redis://127.0.0.1:$TOPO_MASTER_PORT\"" 0 30
	assert_eq "redis://127.0.0.1:$TOPO_REPLICA_PORT" \
		"$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .broker.node)" \
		"/status broker.node of the daemon on $HTTP_PORT after the failover"
done

# ---- the new master is killed (kill -9): the old one, its replica now,
# takes over again
wait_until "redis-cli -p $TOPO_MASTER_PORT INFO replication | grep -q 'master_link_status:up'" 30
kill -KILL "$TOPO_REPLICA_PID"
wait_until "[[ \$(topo_master_port) == $TOPO_MASTER_PORT ]]" 60
note "after kill -9: the master is port $TOPO_MASTER_PORT again"
# the killed node comes back as a replica, so that WAIT 1 can succeed
topo_redis_start replica "redis-cli -p $TOPO_REPLICA_PORT ping" \
	--port "$TOPO_REPLICA_PORT" --appendonly yes \
	--replicaof 127.0.0.1 "$TOPO_MASTER_PORT"
before=$(wc -l <"$PUBLISHED")
wait_until "(( \$(wc -l <$PUBLISHED) >= before + 30 ))" 60
touch "$TEST_DIR/stop"
wait "$PUB" 2>/dev/null || true

# every replicated message ran, on either daemon; nothing stays pending
all_journals >"$TEST_DIR/journal.all"
wait_until "all_journals >$TEST_DIR/journal.all; [[ \$(journal_count_covered $PUBLISHED $TEST_DIR/journal.all) == \$(sort -u $PUBLISHED | wc -l) ]]" 60
new=$(topo_master_port)
wait_until "[[ \$(redis-cli -p $new XPENDING q.sentinel taskmill | head -1) == 0 ]]" 30
assert_journal_covers "$PUBLISHED" "$TEST_DIR/journal.all" "published and replicated"
for hp in "$HP1" "$HP2"; do
	assert_eq 200 "$(http_code /ping "$hp")" "/ping of the daemon on $hp after the failover"
done
DAEMON_PID=$D1
stop_daemon
DAEMON_PID=$D2
stop_daemon
true
