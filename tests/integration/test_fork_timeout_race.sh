# Fork pool: a timeout is charged to the message that ran past the limit,
# never to the next one in the same child. Pool of 1, timeout 2 s; message
# A runs past the limit and answers after the parent's SIGTERM (its code
# catches it); B, sent in the same batch, has just started when the
# SIGKILL lands a second later. A is the timeout; B is not to blame: it
# goes back to the queue unstarted, spending no attempt, and then succeeds
# like C and D.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" pool_kind=fork pool_size=1 <<YAML
tasks:
  t:
    plugin: $TM_BUILD/test-plugins/termlate.so
    queue: q.t
    timeout: 2s
    max_retries: 0
YAML

# published before the start: read in one batch, sent to the child together
a=$(rcall XADD q.t '*' body '{"mode":"late"}')
b=$(rcall XADD q.t '*' body '{"mode":"nap","n":"b"}')
rcall XADD q.t '*' body '{"mode":"nap","n":"c"}' >/dev/null
rcall XADD q.t '*' body '{"mode":"nap","n":"d"}' >/dev/null

start_daemon "$CONF"
wait_ping
wait_until '(( $(metric taskmill_tasks_total "task=\"t\"") >= 4 ))' 40
wait_until '[[ $(xpending q.t) == 0 ]]' 10
daemon_alive || fail "daemon died"

outcomes=""
for outcome in success error rejected timeout crashed invalid; do
	outcomes+=" $outcome=$(metric taskmill_tasks_total "task=\"t\",outcome=\"$outcome\"")"
done
assert_eq " success=3 error=0 rejected=0 timeout=1 crashed=0 invalid=0" "$outcomes" \
	"outcomes of A (timeout) and B, C, D"
assert_eq 1 "$(xlen q.t.dlq)" "dead letters"
dlq=$(xids q.t.dlq)
assert_eq "$a" "$(xfield q.t.dlq "$dlq" origin_id)" "the dead-lettered message is A"
assert_eq 0 "$(metric taskmill_retries_total 'task="t"')" "retries"
note "B ($b) ran again without being charged"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
