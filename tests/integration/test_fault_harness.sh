# The fault-injection harness itself (lib_fault.sh, build/test-tools/
# tcpproxy): each proxy mode seen through redis-cli and raw connections to a
# private redis, each Redis helper, and the proxy surviving resets, a dead
# target, many connections, and exiting 0 on SIGTERM.
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

priv_redis_start
fault_proxy_start R "$PRIV_REDIS_PORT"
P=$FAULT_PORT_R

# pcli ARGS...: redis-cli through the proxy, bounded.
pcli() {
	timeout 10 redis-cli -h 127.0.0.1 -p "$P" "$@"
}

# conn_open: a raw connection through the proxy, its fd in CONN_FD.
CONN_FD=
conn_open() {
	exec {CONN_FD}<>"/dev/tcp/127.0.0.1/$P" || fail "cannot connect to the proxy"
}

# conn_ping FD [TIMEOUT]: send PING, succeed when +PONG comes back in time.
conn_ping() {
	local fd=$1 t=${2:-5} reply=
	{ printf 'PING\r\n' >&"$fd"; } 2>/dev/null || return 1
	read -r -t "$t" -u "$fd" reply || return 1
	[[ ${reply%$'\r'} == +PONG ]]
}

# conn_read FD TIMEOUT: one reply line, without its CR; fails on timeout.
conn_read() {
	local reply=
	read -r -t "$2" -u "$1" reply || return 1
	printf '%s\n' "${reply%$'\r'}"
}

# ---- pass
assert_eq OK "$(pcli SET k v)" "SET through the proxy"
assert_eq v "$(pcli GET k)" "GET through the proxy"
assert_ge 1 "$(fault_proxy_stat R bytes_up)" "bytes_up"
assert_ge 1 "$(fault_proxy_stat R bytes_down)" "bytes_down"

# ---- delay: both directions wait, so a round trip takes twice the delay
fault_proxy R "delay 400"
t0=$(now_ms)
assert_eq PONG "$(pcli PING)" "PING with a delay"
took=$(($(now_ms) - t0))
note "PING with delay 400 took $took ms"
assert_ge 800 "$took" "ms for a PING through delay 400"
fault_proxy R pass

# ---- blackhole both: a new connection is accepted but a PING hangs; a live
# connection hangs too; pass delivers what was held, in order.
conn_open
live=$CONN_FD
conn_ping "$live" || fail "PING on a live connection before the blackhole"
fault_proxy R "blackhole both"
rc=0
timeout 2 redis-cli -h 127.0.0.1 -p "$P" PING >/dev/null 2>&1 || rc=$?
assert_eq 124 "$rc" "redis-cli PING into a blackhole (124: still hanging at 2 s)"
printf 'PING\r\n' >&"$live"
if conn_read "$live" 1 >/dev/null; then
	fail "a live connection got an answer through the blackhole"
fi
fault_proxy R pass
assert_eq +PONG "$(conn_read "$live" 5)" "the held PING answered after pass"
conn_ping "$live" || fail "PING on the live connection after pass"

# ---- blackhole up: a command never reaches the server
pcli DEL k >/dev/null
fault_proxy R "blackhole up"
rc=0
timeout 2 redis-cli -h 127.0.0.1 -p "$P" SET k up >/dev/null 2>&1 || rc=$?
assert_eq 124 "$rc" "SET into blackhole up"
assert_eq "" "$(priv_rcli GET k)" "k on the server after a SET into blackhole up"
# ---- blackhole down: the command runs, its answer never comes back
fault_proxy R "blackhole down"
rc=0
timeout 2 redis-cli -h 127.0.0.1 -p "$P" SET k down >/dev/null 2>&1 || rc=$?
assert_eq 124 "$rc" "SET into blackhole down"
assert_eq down "$(priv_rcli GET k)" "k on the server after a SET into blackhole down"
fault_proxy R pass
# the live connection was idle meanwhile and still works
conn_ping "$live" || fail "PING on the live connection after the blackholes"

# ---- cut: live connections are reset; new ones pass
conn_open
live2=$CONN_FD
conn_ping "$live2" || fail "PING on a second live connection"
wait_until '[[ $(fault_proxy_stat R conns) == 2 ]]' 10
fault_proxy R cut
assert_eq 0 "$(fault_proxy_stat R conns)" "connections after cut"
if conn_ping "$live" 5 || conn_ping "$live2" 5; then
	fail "a connection still answers after cut"
fi
exec {live}>&- {live2}>&-
assert_eq PONG "$(pcli PING)" "a new connection after cut"

# ---- refuse: new connections are closed at once; current ones pass
conn_open
live=$CONN_FD
conn_ping "$live" || fail "PING before refuse"
fault_proxy R refuse
out=$(pcli PING 2>&1) || true
assert_ne PONG "$out" "PING on a new connection while refusing"
note "redis-cli while refusing: $out"
conn_ping "$live" || fail "PING on the connection made before refuse"
fault_proxy R pass
assert_eq PONG "$(pcli PING)" "PING after refuse, pass"

# ---- bad commands are answered with an error, the proxy keeps running
if (fault_proxy R "delay soon") 2>/dev/null; then
	fail "the proxy accepted 'delay soon'"
fi
if (fault_proxy R "explode") 2>/dev/null; then
	fail "the proxy accepted 'explode'"
fi

# ---- many connections at once
fds=()
for ((i = 0; i < 100; i++)); do
	conn_open
	fds+=("$CONN_FD")
done
for fd in "${fds[@]}"; do
	conn_ping "$fd" || fail "PING on one of 100 connections"
done
wait_until '[[ $(fault_proxy_stat R conns) == 101 ]]' 10
for fd in "${fds[@]}"; do
	exec {fd}>&-
done
wait_until '[[ $(fault_proxy_stat R conns) == 1 ]]' 10

# ---- redis_kill_clients: the server side drops them; the proxy passes the
# close on and survives
n=$(redis_kill_clients "$PRIV_REDIS_PORT")
assert_ge 1 "$n" "clients killed"
if conn_ping "$live" 5; then
	fail "the connection through the proxy survived CLIENT KILL"
fi
exec {live}>&-
wait_until '[[ $(fault_proxy_stat R conns) == 0 ]]' 10
assert_eq PONG "$(pcli PING)" "PING after CLIENT KILL"

# ---- a dead target: the client's connection is reset, the proxy lives on
dead=$(free_port)
fault_proxy_start D "$dead"
out=$(timeout 10 redis-cli -h 127.0.0.1 -p "$FAULT_PORT_D" PING 2>&1) || true
assert_ne PONG "$out" "PING through a proxy to a dead port"
assert_eq 0 "$(fault_proxy_stat D conns)" "connections to the dead target"
grep -q 'connect to the target: Connection refused' "$TEST_DIR/proxy.D.log" ||
	fail "the proxy did not report the refused connect"

# ---- SIGTERM: the proxy exits 0
pid=$FAULT_PID_D
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
assert_eq 0 "$rc" "proxy exit status after SIGTERM"
FAULT_PID_D=

# ---- redis_oom
redis_oom "$PRIV_REDIS_PORT" on
out=$(priv_rcli XADD s '*' f v)
assert_match '^OOM ' "$out" "XADD under redis_oom on"
redis_oom "$PRIV_REDIS_PORT" off
assert_match '^[0-9]+-[0-9]+$' "$(priv_rcli XADD s '*' f v)" "XADD after redis_oom off"
assert_eq 0 "$(priv_rcli CONFIG GET maxmemory | sed -n 2p)" "maxmemory restored"

# ---- redis_debug_sleep: the server answers nobody meanwhile, then again
redis_debug_sleep "$PRIV_REDIS_PORT" 3
rc=0
timeout 1 redis-cli -h 127.0.0.1 -p "$PRIV_REDIS_PORT" PING >/dev/null 2>&1 || rc=$?
assert_eq 124 "$rc" "PING during DEBUG SLEEP (124: no answer within 1 s)"
wait_until '[[ $(priv_rcli PING) == PONG ]]' 15

# ---- redis_replica_start: a read-only copy of the master
redis_replica_start "$PRIV_REDIS_PORT"
id=$(priv_rcli XADD s '*' f replicated)
wait_until "[[ \$(redis-cli -p $REPLICA_PORT XRANGE s $id $id | sed -n 3p) == replicated ]]" 10
out=$(redis-cli -p "$REPLICA_PORT" XADD s '*' f v)
assert_match '^READONLY ' "$out" "XADD on the replica"
redis_replica_promote
assert_match '^[0-9]+-[0-9]+$' "$(redis-cli -p "$REPLICA_PORT" XADD s '*' f v)" \
	"XADD on the promoted replica"

# the proxy never died on the way
# shellcheck disable=SC2153 # set by fault_proxy_start
kill -0 "$FAULT_PID_R" || fail "the proxy died"
if grep -v -- '->' "$TEST_DIR/proxy.R.log" | grep -q .; then
	note "proxy R diagnostics: $(grep -v -- '->' "$TEST_DIR/proxy.R.log" | head -n 5)"
fi
