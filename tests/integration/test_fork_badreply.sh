# Fork pool: the parent checks every reply of its children. Task code that
# writes a crafted frame on its worker's socket (an outcome that does not
# exist, a 4 GiB error text, bytes that are no frame) costs exactly the
# message that was running: it counts as `crashed`, with the reason in its
# error, the child is replaced at once, and the daemon, /ping and the other
# task's messages go on untouched.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
N_NOOP=200
MODES=(outcome huge garbage)
CONF=$TEST_DIR/taskmill.yaml

write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  bad:
    plugin: $TM_BUILD/test-plugins/badreply.so
    queue: q.bad
    max_retries: 0
    timeout: 20s
  noop: { plugin: noop.so, queue: q.noop }
YAML

start_daemon "$CONF"
wait_ping
wait_children "$POOL"
ping_watch_start

declare -A MODE_OF=()
for mode in "${MODES[@]}"; do
	id=$(rcall XADD q.bad '*' body "{\"mode\":\"$mode\"}")
	MODE_OF[$id]=$mode
	xadd_bulk q.noop $((N_NOOP / ${#MODES[@]})) "{\"n\":%d,\"after\":\"$mode\"}"
done
xadd_bulk q.noop $((N_NOOP - N_NOOP / ${#MODES[@]} * ${#MODES[@]})) '{"n":%d}'
ok_id=$(rcall XADD q.bad '*' body '{"mode":"ok"}')

N_BAD=${#MODES[@]}
wait_metric taskmill_tasks_total 'task="bad",outcome="success"' 1 15
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N_NOOP" 15
wait_until "[[ \$(xlen q.bad.dlq) == $N_BAD ]]" 15
# a few samples at least, however fast the run was
wait_until "(( \$(grep -c . '$TEST_DIR/ping.samples') >= 3 ))" 10
ping_watch_stop
daemon_alive || fail "daemon died"

for outcome in success error rejected timeout crashed invalid; do
	want=0
	[[ $outcome == crashed ]] && want=$N_BAD
	[[ $outcome == success ]] && want=1
	assert_eq "$want" "$(metric taskmill_tasks_total "task=\"bad\",outcome=\"$outcome\"")" \
		"bad outcome $outcome"
	[[ $outcome == success ]] && want=$N_NOOP || want=0
	assert_eq "$want" "$(metric taskmill_tasks_total "task=\"noop\",outcome=\"$outcome\"")" \
		"noop outcome $outcome"
done
declare -A SEEN=()
while read -r origin dlq_id; do
	mode=${MODE_OF[$origin]:-}
	[[ -n $mode ]] || fail "DLQ entry $dlq_id: origin '$origin' is not a corrupting message (ok one: $ok_id)"
	SEEN[$mode]=1
	error=$(xfield q.bad.dlq "$dlq_id" error)
	note "DLQ $dlq_id ($mode): $error"
	assert_match 'sent a malformed reply' "$error" "DLQ error of mode $mode"
done < <(dlq_origin_map q.bad.dlq)
assert_eq "$N_BAD" "${#SEEN[@]}" "distinct corrupting messages dead-lettered"
assert_eq "$((N_BAD + 1)) 0 0" "$(stream_state q.bad)" "acked/pending/undelivered of q.bad"
assert_eq "$N_NOOP 0 0" "$(stream_state q.noop)" "acked/pending/undelivered of q.noop"
wait_children "$POOL" 10

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
