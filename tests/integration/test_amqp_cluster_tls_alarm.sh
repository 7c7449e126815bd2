# A 3-node cluster with TLS listeners that require a client certificate:
# the daemon reaches it through broker.tls (CA, client certificate and key)
# on a list of amqps:// nodes, with quorum queues. Then a memory alarm on
# every node (so on the one the daemon is on), while it settles: the
# cluster blocks every
# publishing connection; the daemon's retry and dead-letter copies wait
# (their originals unacknowledged, so the prefetch window holds intake
# back), nothing reconnects, /ping stays 200. When it is lifted, every
# failing message is dead-lettered exactly once and every other message is
# journaled: no message lost, none run twice.
. "$TM_SRCDIR/tests/integration/lib_rabbit_cluster.sh"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"
cluster_start 3 tls
export RABBIT_PORT=${CL_PORT[1]}
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
QJ=$AQ.journal
QF=$AQ.fail
NJ=200
NF=20
PREFETCH=8
HOLD_S=12
write_amqp_config "$CONF" pool_size=4 url="$(cluster_urls amqps)" \
	tls="{ ca_file: $CL_CA, cert_file: $CL_CLIENT_CERT, key_file: $CL_CLIENT_KEY }" \
	amqp='{ queue_type: quorum, heartbeat: 10s }' <<YAML
tasks:
  journal: { plugin: journal.so, queue: $QJ, prefetch: 8, config: { path: $JOURNAL } }
  fail: { plugin: fail.so, queue: $QF, prefetch: $PREFETCH, max_retries: 1, backoff: 200ms, max_backoff: 200ms }
YAML

# without the client certificate the nodes refuse
sed "s|^  tls: .*|  tls: { ca_file: $CL_CA }|" "$CONF" >"$TEST_DIR/nocert.yaml"
tm emit -c "$TEST_DIR/nocert.yaml" journal '{"n":0}'
assert_eq 1 "$TM_RC" "emit without a client certificate"

# a first start declares the queues (over TLS)
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60
url=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .broker.node)
assert_match '^amqps://localhost:' "$url" "/status broker.node"
port=${url##*:}
NODE=$(cluster_node_of_port "${port%%/*}")
note "the daemon is on node $NODE ($url)"
stop_daemon || fail "daemon exit status after SIGTERM"
cluster_amqptool 1 publish "$QJ" "$NJ" '{"n":%d}' >"$TEST_DIR/ids.journal"
cluster_amqptool 1 publish "$QF" "$NF" '{"mode":"error","n":%d}' >"$TEST_DIR/ids.fail"

# alarm on|off: a memory alarm on every node (so on the one the daemon
# will be on, a random one), or the default watermark again; waits
# (bounded) until each node reports the change
alarm() {
	local want k
	for ((k = 1; k <= CL_N; k++)); do
		if [[ $1 == on ]]; then
			clusterctl "$k" set_vm_memory_high_watermark 0.0001 >/dev/null || fail "cannot set the watermark"
			want=1
		else
			clusterctl "$k" set_vm_memory_high_watermark 0.4 >/dev/null || fail "cannot reset the watermark"
			want=0
		fi
	done
	for ((k = 1; k <= CL_N; k++)); do
		wait_until "[[ \$(clusterctl $k eval 'length(rabbit_alarm:get_local_alarms()).' 2>/dev/null) == $want ]]" 60
	done
}
alarm on
note "memory alarm raised"

start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60
url=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r .broker.node)
port=${url##*:}
NODE=$(cluster_node_of_port "${port%%/*}")
((NODE > 0)) || fail "the daemon is on no node: '$url'"
note "the daemon is on node $NODE ($url)"

# the window of failing messages: their retry copies are held, and so
# are their originals
wait_metric taskmill_tasks_total 'task="fail",outcome="error"' "$PREFETCH" 60
wait_until "[[ \$(journal_unique $JOURNAL) == $NJ ]]" 60
sleep "$HOLD_S"
assert_eq "$PREFETCH" "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" \
	"failed runs while blocked (no redelivery, no retry, no new intake)"
assert_eq 0 "$(metric taskmill_dead_letter_total 'task="fail"')" "dead letters while blocked"
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects while blocked"
assert_eq 200 "$(http_code /ping)" "/ping while blocked"
grep -q 'blocks publishing' "$DAEMON_LOG" || fail "no log line for the block"

alarm off
note "memory alarm lifted"
wait_metric taskmill_dead_letter_total 'task="fail"' "$NF" 60
wait_until "[[ \$(cluster_amqptool 1 count $QF.dlq) == $NF ]]" 30
wait_until "[[ \$(cluster_amqptool 1 count $QF) == 0 && \$(cluster_amqptool 1 count $QJ) == 0 ]]" 30
assert_eq "$((2 * NF))" "$(metric taskmill_tasks_total 'task="fail",outcome="error"')" \
	"failed runs (each failing message runs twice: max_retries 1)"
assert_eq 0 "$(metric taskmill_broker_reconnects_total)" "reconnects"
cut -d' ' -f1 "$JOURNAL" | sort -u >"$TEST_DIR/ran"
sort -u "$TEST_DIR/ids.journal" | diff -q - "$TEST_DIR/ran" >/dev/null ||
	fail "journaled ids differ from published ids"
assert_eq "$NJ" "$(wc -l <"$JOURNAL")" "journal lines (none run twice)"
tm dlq -c "$CONF" list fail
assert_eq 0 "$TM_RC" "dlq list exit status"
cut -f2 "$TM_OUT" | sort -u >"$TEST_DIR/dead"
sort -u "$TEST_DIR/ids.fail" | diff -q - "$TEST_DIR/dead" >/dev/null ||
	fail "dead-lettered origins differ from the failing ids"
assert_eq "$NF" "$(grep -c . "$TM_OUT")" "dead letters listed (none twice)"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
