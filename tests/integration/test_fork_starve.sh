# Fork pool: one task whose plugin crashes on every message costs that
# task, never the others. Pool of 2; task `f` crashes on each of its 200
# queued messages (max_retries 0); task `noop` has 2,000 messages. The
# healthy task must finish all of them within 60 s while `f` keeps failing
# (each crash is charged to f, the daemon and /ping stay up). f's circuit
# breaker is off here: the pool alone must keep f's crashes to f
# (test_circuit.sh covers the breaker).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
N_BAD=200
N_OK=2000
CONF=$TEST_DIR/taskmill.yaml

if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate crash: let the child die of SIGSEGV (see
	# test_fork_crash.sh)
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
fi

write_config "$CONF" pool_kind=fork pool_size=$POOL log_level=info <<YAML
tasks:
  f:
    plugin: fail.so
    queue: q.f
    max_retries: 0
    circuit_failures: 0
  noop: { plugin: noop.so, queue: q.noop }
YAML

xadd_bulk q.f "$N_BAD" '{"mode":"crash","n":%d}'
xadd_bulk q.noop "$N_OK" '{"n":%d}'

start_daemon "$CONF"
wait_ping
t0=$(now_ms)
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N_OK" 60
elapsed=$(($(now_ms) - t0))
crashed=$(metric taskmill_tasks_total 'task="f",outcome="crashed"')
note "noop: $N_OK messages in $elapsed ms; f: $crashed crashes meanwhile"

daemon_alive || fail "daemon died"
assert_eq 200 "$(http_code /ping)" "/ping while f keeps crashing"
# f was really failing meanwhile, and every failure was its own
assert_ge 1 "$crashed" "crashes of f while noop ran"
for outcome in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"noop\",outcome=\"$outcome\"")" \
		"noop outcome $outcome"
done
assert_eq 0 "$(metric taskmill_tasks_total 'task="f",outcome="success"')" \
	"successes of f"
wait_until '[[ $(xpending q.noop) == 0 ]]' 10

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
