# shellcheck shell=bash
# A RabbitMQ cluster on loopback for the cluster tests
# (tests/integration/test_amqp_cluster_*.sh). Such a test sources it after
# lib.sh:
#
#   . "$TM_SRCDIR/tests/integration/lib_rabbit_cluster.sh"
#   cluster_start 3 [tls]
#
# cluster_start starts N rabbitmq-server nodes, each with its own node name
# (tmc<pid>-K@localhost), AMQP and distribution ports, data, log and config
# directory under $TEST_DIR/cluster/nK, one private epmd and one Erlang
# cookie for all; the nodes 2..N join node 1 (rabbitmqctl join_cluster).
# Every node is stopped when the test ends, failed or not (tm_on_exit).
# It sets:
#   CL_N               the number of nodes
#   CL_PORT[k]         node k's AMQP port (k = 1..N)
#   CL_TLS_PORT[k]     node k's AMQPS port (with tls; a CA-signed
#                      certificate for "localhost", client certificates
#                      required): CL_CA, CL_CLIENT_CERT, CL_CLIENT_KEY
#   CL_NODE[k]         node k's Erlang node name
# and gives: clusterctl K ARGS... (rabbitmqctl against node K, bounded),
# cluster_stop_node K, cluster_kill_node K (kill -9), cluster_start_node K,
# cluster_urls [amqps] (broker.url's YAML list), cluster_node_of_port PORT,
# cluster_amqptool K ARGS... (lib_amqp.sh's amqptool against node K).
#
# The nodes start in parallel and wait with await_startup; the joins are
# sequential. On ports that turned out taken (another test took them
# between the check and the start) the whole start is tried again with
# other ports, at most three times.

: "${TEST_DIR:?lib_rabbit_cluster.sh is sourced after lib.sh}"
CL_BIN=${TM_RABBIT_BIN:-/usr/lib/rabbitmq/bin}
[[ -x $CL_BIN/rabbitmq-server ]] || skip "rabbitmq-server is not installed"
command -v epmd >/dev/null 2>&1 || [[ -x $CL_BIN/../erts/bin/epmd ]] ||
	command -v erl >/dev/null 2>&1 || skip "no Erlang runtime"

CL_DIR=$TEST_DIR/cluster
CL_N=0
CL_EPMD_PORT=
declare -a CL_PORT=() CL_TLS_PORT=() CL_DIST_PORT=() CL_NODE=() CL_PID=()

# cl_free_ports N: N distinct free ports below 32000 (outside the kernel's
# ephemeral range, as lib.sh's free_port), on one line.
cl_free_ports() {
	local want=$1 p i
	local -a got=()
	for ((i = 0; i < 1000 && ${#got[@]} < want; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		port_is_free "$p" && [[ " ${got[*]} " != *" $p "* ]] && got+=("$p")
	done
	((${#got[@]} == want)) || return 1
	echo "${got[*]}"
}

# cl_env K: node K's environment, for env(1).
cl_env() {
	local k=$1 d=$CL_DIR/n$1
	echo HOME="$d" ERL_EPMD_PORT="$CL_EPMD_PORT" \
		ERL_CRASH_DUMP="$d/erl_crash.dump" \
		RABBITMQ_NODENAME="${CL_NODE[k]}" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
		RABBITMQ_NODE_PORT="${CL_PORT[k]}" RABBITMQ_DIST_PORT="${CL_DIST_PORT[k]}" \
		RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
		RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins"
}

# clusterctl K ARGS...: rabbitmqctl against node K (bounded).
clusterctl() {
	local k=$1
	shift
	# shellcheck disable=SC2046  # cl_env's words are the assignments
	timeout 60 env $(cl_env "$k") "$CL_BIN/rabbitmqctl" -n "${CL_NODE[k]}" "$@"
}

# cl_tls_files: a CA, a server certificate for localhost and a client
# certificate, in $CL_DIR/tls.
cl_tls_files() {
	local t=$CL_DIR/tls
	mkdir -p "$t"
	CL_CA=$t/ca.pem CL_CLIENT_CERT=$t/client.pem CL_CLIENT_KEY=$t/client.key
	[[ -s $t/client.pem ]] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$t/ca.key" -out "$t/ca.pem" \
		-days 2 -subj "/CN=taskmill cluster CA" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout "$t/server.key" -out "$t/server.csr" \
		-subj "/CN=localhost" 2>/dev/null
	printf 'subjectAltName=DNS:localhost\n' >"$t/ext.cnf"
	openssl x509 -req -in "$t/server.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" \
		-CAcreateserial -out "$t/server.pem" -days 2 -extfile "$t/ext.cnf" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -keyout "$t/client.key" -out "$t/client.csr" \
		-subj "/CN=taskmill client" 2>/dev/null
	openssl x509 -req -in "$t/client.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" \
		-CAcreateserial -out "$t/client.pem" -days 2 2>/dev/null
	chmod 644 "$t"/*.key
}

# cl_write_node K TLS: node K's directory, config and cookie.
cl_write_node() {
	local k=$1 tls=$2 d=$CL_DIR/n$1
	mkdir -p "$d/log"
	: >"$d/enabled_plugins"
	{
		echo "listeners.tcp.default = 127.0.0.1:${CL_PORT[k]}"
		echo 'loopback_users = none'
		echo 'log.console = false'
		echo 'log.file.level = info'
		echo 'disk_free_limit.absolute = 1MB'
		if [[ -n $tls ]]; then
			echo "listeners.ssl.default = 127.0.0.1:${CL_TLS_PORT[k]}"
			echo "ssl_options.cacertfile = $CL_DIR/tls/ca.pem"
			echo "ssl_options.certfile = $CL_DIR/tls/server.pem"
			echo "ssl_options.keyfile = $CL_DIR/tls/server.key"
			echo 'ssl_options.verify = verify_peer'
			echo 'ssl_options.fail_if_no_peer_cert = true'
		fi
	} >"$d/rabbitmq.conf"
	rm -f "$d/.erlang.cookie"
	printf '%s' "$CL_COOKIE" >"$d/.erlang.cookie"
	chmod 400 "$d/.erlang.cookie"
}

# cluster_start_node K: start node K (its directory written) in the
# background; cluster_await_node K waits until it runs.
cluster_start_node() {
	local k=$1
	# shellcheck disable=SC2046
	(cd "$CL_DIR/n$k" && exec env $(cl_env "$k") "$CL_BIN/rabbitmq-server") \
		>>"$CL_DIR/n$k/server.log" 2>&1 &
	CL_PID[k]=$!
}

cluster_await_node() {
	local k=$1 deadline=$((SECONDS + ${2:-60}))
	while ((SECONDS < deadline)); do
		kill -0 "${CL_PID[k]}" 2>/dev/null || return 1
		clusterctl "$k" await_startup --timeout 30 >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

# cluster_stop_node K: a clean stop of node K (rabbitmqctl stop), bounded.
cluster_stop_node() {
	local k=$1 i
	[[ -n ${CL_PID[k]:-} ]] || return 0
	clusterctl "$k" stop >/dev/null 2>&1 || true
	for ((i = 0; i < 200; i++)); do
		kill -0 "${CL_PID[k]}" 2>/dev/null || break
		((i == 150)) && kill -TERM "${CL_PID[k]}" 2>/dev/null
		sleep 0.1
	done
	cluster_kill_node "$k"
}

# cl_tree PID: PID and its descendants, by parent id.
cl_tree() {
	local c
	echo "$1"
	for c in $(pgrep -P "$1" 2>/dev/null || true); do
		cl_tree "$c"
	done
}

# cluster_kill_node K: kill -9 node K: the rabbitmq-server script started
# here and every process under it (erl, beam.smp, erl_child_setup).
cluster_kill_node() {
	local k=$1 pids
	[[ -n ${CL_PID[k]:-} ]] || return 0
	pids=$(cl_tree "${CL_PID[k]}")
	# shellcheck disable=SC2086  # one pid a word
	kill -KILL $pids 2>/dev/null || true
	wait "${CL_PID[k]}" 2>/dev/null || true
	CL_PID[k]=
}

# cluster_stop: stop every node and the cluster's epmd.
cluster_stop() {
	local k
	for ((k = 1; k <= CL_N; k++)); do
		cluster_stop_node "$k" &
	done
	wait
	[[ -z $CL_EPMD_PORT ]] || ERL_EPMD_PORT=$CL_EPMD_PORT timeout 5 epmd -kill >/dev/null 2>&1 || true
}

# cluster_start N [tls]: start and join an N-node cluster (see the top).
cluster_start() {
	local n=$1 tls=${2:-} attempt k ports t0=$SECONDS
	CL_N=$n
	CL_COOKIE=taskmill$RANDOM$RANDOM$RANDOM
	[[ -z $tls ]] || cl_tls_files
	tm_on_exit cluster_stop
	for ((attempt = 0; attempt < 3; attempt++)); do
		ports=$(cl_free_ports $((3 * n + 1))) || continue
		read -r -a ports <<<"$ports"
		CL_EPMD_PORT=${ports[0]}
		for ((k = 1; k <= n; k++)); do
			CL_PORT[k]=${ports[3 * k - 2]}
			CL_DIST_PORT[k]=${ports[3 * k - 1]}
			CL_TLS_PORT[k]=${ports[3 * k]}
			CL_NODE[k]=tmc$$-$k@localhost
			rm -rf "$CL_DIR/n$k"
			cl_write_node "$k" "$tls"
			cluster_start_node "$k"
		done
		local ok=1
		for ((k = 1; k <= n; k++)); do
			cluster_await_node "$k" 90 || {
				ok=0
				break
			}
		done
		if ((ok)); then
			for ((k = 2; k <= n; k++)); do
				{
					clusterctl "$k" stop_app &&
						clusterctl "$k" join_cluster "${CL_NODE[1]}" &&
						clusterctl "$k" start_app
				} >>"$CL_DIR/join.log" 2>&1 || {
					ok=0
					break
				}
			done
		fi
		if ((ok)); then
			note "cluster of $n nodes up in $((SECONDS - t0)) s: ports ${CL_PORT[*]}"
			return 0
		fi
		note "cluster start attempt $((attempt + 1)) failed; node logs:"
		for ((k = 1; k <= n; k++)); do
			tail -n 5 "$CL_DIR/n$k/server.log" >&2 2>/dev/null || true
		done
		cluster_stop
	done
	fail "could not start a cluster of $n RabbitMQ nodes"
}

# cluster_urls [amqps]: broker.url as a YAML flow list of every node.
cluster_urls() {
	local k sep='' out='['
	for ((k = 1; k <= CL_N; k++)); do
		if [[ ${1:-} == amqps ]]; then
			out+="${sep}amqps://localhost:${CL_TLS_PORT[k]}/"
		else
			out+="${sep}amqp://127.0.0.1:${CL_PORT[k]}/"
		fi
		sep=', '
	done
	echo "$out]"
}

# cluster_node_of_port PORT: the node number listening on PORT, or 0.
cluster_node_of_port() {
	local k
	for ((k = 1; k <= CL_N; k++)); do
		if [[ ${CL_PORT[k]} == "$1" || ${CL_TLS_PORT[k]} == "$1" ]]; then
			echo "$k"
			return 0
		fi
	done
	echo 0
}

# cluster_amqptool K ARGS...: lib_amqp.sh's amqptool against node K.
cluster_amqptool() {
	local k=$1
	shift
	RABBIT_PORT=${CL_PORT[k]} amqptool "$@"
}
