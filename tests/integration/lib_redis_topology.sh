# shellcheck shell=bash
# Helpers for the tests of Redis as it runs in production: TLS
# certificates and redis-servers of the test's own (TLS, and later
# replicas, sentinels and cluster nodes). Sourced after lib.sh:
#
#   . "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

: "${TM_BIN:?lib_redis_topology.sh needs lib.sh sourced first}"

# topo_certs DIR: a test CA (ca.pem), a server certificate for localhost
# and 127.0.0.1 signed by it (server.pem/.key), a client certificate
# signed by it (client.pem/.key), and a second, unrelated CA (other.pem).
topo_certs() {
	local d=$1
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" \
		-out "$d/ca.pem" -days 2 -subj "/CN=taskmill test CA" 2>/dev/null ||
		fail "openssl: cannot make the CA"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/other.key" \
		-out "$d/other.pem" -days 2 -subj "/CN=some other CA" 2>/dev/null ||
		fail "openssl: cannot make the other CA"
	openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" \
		-out "$d/server.csr" -subj "/CN=localhost" 2>/dev/null ||
		fail "openssl: cannot make the server key"
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/ext.cnf"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
		-CAcreateserial -out "$d/server.pem" -days 2 \
		-extfile "$d/ext.cnf" 2>/dev/null ||
		fail "openssl: cannot sign the server certificate"
	openssl req -newkey rsa:2048 -nodes -keyout "$d/client.key" \
		-out "$d/client.csr" -subj "/CN=taskmill client" 2>/dev/null ||
		fail "openssl: cannot make the client key"
	openssl x509 -req -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
		-CAcreateserial -out "$d/client.pem" -days 2 2>/dev/null ||
		fail "openssl: cannot sign the client certificate"
	chmod 0600 "$d"/*.key
}

# TOPO_PIDS: redis-servers started by topo_redis_start, killed at exit.
TOPO_PIDS=()
TOPO_HOOKED=
topo_kill_all() {
	local p
	for p in "${TOPO_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	TOPO_PIDS=()
}

# topo_redis_start NAME PING_CMD ARGS...: start redis-server with its data
# and log in TEST_DIR/NAME and ARGS; wait until the command PING_CMD (a
# string, e.g. a redis-cli line) prints PONG (10 s at most). Sets
# TOPO_PID.
topo_redis_start() {
	local name=$1 ping=$2 i
	shift 2
	local dir=$TEST_DIR/$name
	mkdir -p "$dir"
	if [[ -z $TOPO_HOOKED ]]; then
		TOPO_HOOKED=1
		tm_on_exit topo_kill_all
	fi
	redis-server --bind 127.0.0.1 --dir "$dir" --save '' --daemonize no \
		--logfile "$dir/redis.log" "$@" &
	TOPO_PID=$!
	TOPO_PIDS+=("$TOPO_PID")
	for ((i = 0; i < 100; i++)); do
		[[ $(eval "$ping" 2>/dev/null) == PONG ]] && return 0
		kill -0 "$TOPO_PID" 2>/dev/null || break
		sleep 0.1
	done
	tail -n 20 "$dir/redis.log" >&2 || true
	fail "redis-server $name did not start"
}

# topo_redis_stop PID: stop one of them and reap it.
topo_redis_stop() {
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# ------------------------------------------------------------- sentinel

# topo_sentinel_setup: a master and one replica, and three sentinels
# watching the master as "mymaster" (quorum 2, down after 1 s, failover
# timeout 5 s). Sets TOPO_MASTER_PORT, TOPO_REPLICA_PORT,
# TOPO_SENTINEL_PORTS (array) and TOPO_MASTER_PID, TOPO_REPLICA_PID.
topo_sentinel_setup() {
	local i p
	TOPO_MASTER_PORT=$(free_port)
	topo_redis_start master "redis-cli -p $TOPO_MASTER_PORT ping" \
		--port "$TOPO_MASTER_PORT" --appendonly yes
	TOPO_MASTER_PID=$TOPO_PID
	TOPO_REPLICA_PORT=$(free_port)
	topo_redis_start replica "redis-cli -p $TOPO_REPLICA_PORT ping" \
		--port "$TOPO_REPLICA_PORT" --appendonly yes \
		--replicaof 127.0.0.1 "$TOPO_MASTER_PORT"
	TOPO_REPLICA_PID=$TOPO_PID
	wait_until "redis-cli -p $TOPO_REPLICA_PORT INFO replication | grep -q 'master_link_status:up'" 20
	TOPO_SENTINEL_PORTS=()
	for i in 1 2 3; do
		p=$(free_port)
		mkdir -p "$TEST_DIR/sentinel$i"
		cat >"$TEST_DIR/sentinel$i/sentinel.conf" <<CONF
port $p
bind 127.0.0.1
dir $TEST_DIR/sentinel$i
logfile $TEST_DIR/sentinel$i/sentinel.log
sentinel monitor mymaster 127.0.0.1 $TOPO_MASTER_PORT 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
sentinel parallel-syncs mymaster 1
CONF
		if [[ -z $TOPO_HOOKED ]]; then
			TOPO_HOOKED=1
			tm_on_exit topo_kill_all
		fi
		redis-server "$TEST_DIR/sentinel$i/sentinel.conf" --sentinel &
		TOPO_PIDS+=("$!")
		TOPO_SENTINEL_PORTS+=("$p")
	done
	for p in "${TOPO_SENTINEL_PORTS[@]}"; do
		wait_until "[[ \$(redis-cli -p $p SENTINEL replicas mymaster 2>/dev/null | grep -c '^name$') -ge 1 ]]" 30
		wait_until "[[ \$(redis-cli -p $p SENTINEL sentinels mymaster 2>/dev/null | grep -c '^name$') -ge 2 ]]" 30
	done
}

# topo_master_port: the master's port as the first sentinel names it
topo_master_port() {
	redis-cli -p "${TOPO_SENTINEL_PORTS[0]}" SENTINEL get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p
}

# -------------------------------------------------------------- cluster

# topo_cluster_setup: six cluster nodes on free loopback ports (each with
# its cluster bus on another free port), made into three masters with a
# replica each by redis-cli --cluster create (node timeout 2 s). Sets
# TOPO_CLUSTER_PORTS (array, the masters first as redis-cli assigns
# them), TOPO_CLUSTER_PIDS (array, by the same index) and
# TOPO_CLUSTER_ARGS (array, the extra arguments of node i, to restart
# it).
topo_cluster_setup() {
	local i p bus addrs=()
	TOPO_CLUSTER_PORTS=()
	TOPO_CLUSTER_PIDS=()
	TOPO_CLUSTER_ARGS=()
	for i in 0 1 2 3 4 5; do
		p=$(free_port)
		bus=$(free_port)
		while [[ $bus == "$p" ]]; do bus=$(free_port); done
		TOPO_CLUSTER_ARGS[i]="--port $p --cluster-enabled yes --cluster-port $bus --cluster-config-file $TEST_DIR/cnode$i/nodes.conf --cluster-node-timeout 2000 --appendonly yes"
		# shellcheck disable=SC2086
		topo_redis_start "cnode$i" "redis-cli -p $p ping" ${TOPO_CLUSTER_ARGS[i]}
		TOPO_CLUSTER_PORTS[i]=$p
		TOPO_CLUSTER_PIDS[i]=$TOPO_PID
		addrs+=("127.0.0.1:$p")
	done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 \
		--cluster-yes >"$TEST_DIR/cluster-create.log" 2>&1 ||
		fail "redis-cli --cluster create failed: $(tail -n 5 "$TEST_DIR/cluster-create.log")"
	for p in "${TOPO_CLUSTER_PORTS[@]}"; do
		wait_until "redis-cli -p $p CLUSTER INFO | grep -q 'cluster_state:ok'" 30
	done
	# every replica in sync, so that WAIT 1 can succeed
	wait_until "[[ \$(topo_cluster_nodes | grep -c ' slave .* connected') -ge 3 ]]" 30
}

# topo_cluster_restart I: start node I again (after a kill) with its data
# and nodes.conf: it rejoins, as a replica when it lost its slots.
topo_cluster_restart() {
	local i=$1
	# shellcheck disable=SC2086
	topo_redis_start "cnode$i" "redis-cli -p ${TOPO_CLUSTER_PORTS[i]} ping" ${TOPO_CLUSTER_ARGS[i]}
	TOPO_CLUSTER_PIDS[i]=$TOPO_PID
}

# topo_cluster_nodes: CLUSTER NODES as the first node that answers sees it
topo_cluster_nodes() {
	local p
	for p in "${TOPO_CLUSTER_PORTS[@]}"; do
		redis-cli -p "$p" CLUSTER NODES 2>/dev/null && return 0
	done
	return 1
}

# topo_slot_port SLOT: the port of the master serving SLOT, as the first
# node that answers sees it
topo_slot_port() {
	local p
	for p in "${TOPO_CLUSTER_PORTS[@]}"; do
		redis-cli -p "$p" CLUSTER SLOTS 2>/dev/null | awk -v s="$1" '
			NR % 1 == 0 { l[NR] = $0 }
			END {
				# flat output: start, end, host, port, id, then replicas
				for (i = 1; i <= NR; i++)
					if (l[i] ~ /^[0-9]+$/ && l[i + 1] ~ /^[0-9]+$/ &&
					    l[i + 2] ~ /^[0-9.]+$/ && l[i + 3] ~ /^[0-9]+$/ &&
					    l[i] + 0 <= s + 0 && s + 0 <= l[i + 1] + 0) {
						print l[i + 3]; exit
					}
			}' && return 0
	done
	return 1
}

# topo_node_id PORT: the cluster node id of the node on PORT
topo_node_id() {
	redis-cli -p "$1" CLUSTER MYID
}

# topo_replica_of PORT: the port of a replica of the master on PORT
topo_replica_of() {
	local id
	id=$(topo_node_id "$1")
	topo_cluster_nodes | awk -v m="$id" '$3 ~ /slave/ && $4 == m {
		split($2, a, "[:@]"); print a[2]; exit }'
}

# topo_move_slot SLOT FROM_PORT TO_PORT: move a slot and its keys from
# one master to another by hand: IMPORTING / MIGRATING, MIGRATE of every
# key (a few at a time, so that clients meet ASK meanwhile), then NODE on
# every master.
topo_move_slot() {
	local slot=$1 from=$2 to=$3 fid tid keys p
	fid=$(topo_node_id "$from")
	tid=$(topo_node_id "$to")
	redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$fid" >/dev/null
	redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$tid" >/dev/null
	while :; do
		mapfile -t keys < <(redis-cli -p "$from" CLUSTER GETKEYSINSLOT "$slot" 1)
		((${#keys[@]} > 0)) && [[ -n ${keys[0]} ]] || break
		redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS "${keys[@]}" >/dev/null ||
			fail "MIGRATE of slot $slot failed"
		sleep 0.2
	done
	for p in "$to" "$from" "${TOPO_CLUSTER_PORTS[@]}"; do
		redis-cli -p "$p" CLUSTER SETSLOT "$slot" NODE "$tid" >/dev/null 2>&1 || true
	done
}
