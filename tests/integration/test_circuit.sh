# Circuit breaker: circuit_failures crashes or timeouts in a row open a
# task's circuit; its intake pauses (the messages stay in the broker,
# spending no attempt) for circuit_cool_off, then one probe runs: a failed
# probe re-opens it for twice the last cool-off, up to
# circuit_max_cool_off; a probe that does not crash or time out closes it.
# Visible as taskmill_task_circuit_open{task} and "circuit" in /status,
# logged once per state change. Fork pool (crashes), then thread pool
# (timeouts).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

CONF=$TEST_DIR/taskmill.yaml

if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate crash: let the child die of SIGSEGV (see
	# test_fork_crash.sh)
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
fi

status_circuit() {
	curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/status" | jq -r ".tasks.$1.circuit"
}

# ---- fork pool: 3 crashes open it; 3 failed probes; an error closes it
write_config "$CONF" pool_kind=fork pool_size=2 log_level=info <<YAML
tasks:
  f:
    plugin: fail.so
    queue: q.f
    prefetch: 1
    max_retries: 0
    circuit_failures: 3
    circuit_cool_off: 2s
    circuit_max_cool_off: 5s
  noop: { plugin: noop.so, queue: q.noop }
YAML

N_CRASH=6
N_ERROR=5
start_daemon "$CONF"
wait_ping
assert_eq closed "$(status_circuit f)" "/status circuit of f at start"
assert_eq 0 "$(metric taskmill_task_circuit_open 'task="f"')" "circuit_open{f} at start"
xadd_bulk q.f "$N_CRASH" '{"mode":"crash","n":%d}'
xadd_bulk q.f "$N_ERROR" '{"mode":"error","n":%d}'

wait_metric taskmill_task_circuit_open 'task="f"' 1 20
# open: nothing more of f is read while the cool-off lasts
assert_eq 3 "$(metric taskmill_tasks_total 'task="f",outcome="crashed"')" \
	"crashes of f when its circuit opened"
assert_eq open "$(status_circuit f)" "/status circuit of f after 3 crashes"
assert_eq "3 0 $((N_CRASH + N_ERROR - 3))" "$(stream_state q.f)" \
	"acked/pending/undelivered of q.f while open"

# the other task is not affected
xadd_bulk q.noop 100 '{"n":%d}'
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 100 20
assert_eq 0 "$(metric taskmill_task_circuit_open 'task="noop"')" "circuit_open{noop}"

# probes: 3 more crashes, each re-opening it (2 s, 4 s, 5 s), then the
# first error closes it and the rest run
wait_metric taskmill_tasks_total 'task="f",outcome="error"' "$N_ERROR" 40
assert_eq "$N_CRASH" "$(metric taskmill_tasks_total 'task="f",outcome="crashed"')" \
	"crashes of f"
assert_eq 0 "$(metric taskmill_task_circuit_open 'task="f"')" "circuit_open{f} at the end"
assert_eq closed "$(status_circuit f)" "/status circuit of f at the end"
assert_eq "$((N_CRASH + N_ERROR)) 0 0" "$(stream_state q.f)" "acked/pending/undelivered of q.f"
# every message of f ran once: held ones spent no attempt
assert_eq "$((N_CRASH + N_ERROR))" "$(xlen q.f.dlq)" "dead letters of f"
for id in $(xids q.f.dlq); do
	assert_eq 1 "$(xfield q.f.dlq "$id" attempts)" "attempts of DLQ entry $id"
done

# one line per state change, the cool-off doubling up to its cap
changes=$(sed -n 's/.*\[circuit:f\] //p' "$DAEMON_LOG" | paste -sd '|')
note "state changes: $changes"
half='circuit half-open: cool-off over; trying 1 message(s)'
again='circuit open again: a probe failed; intake paused for'
assert_eq "circuit open: 3 crashes or timeouts in a row; intake paused for 2000 ms (messages stay in the broker)|$half|$again 4000 ms|$half|$again 5000 ms|$half|$again 5000 ms|$half|circuit closed: a probe succeeded; intake resumes" \
	"$changes" "circuit state changes of f"
assert_eq 0 "$(grep -c 'circuit:noop' "$DAEMON_LOG" || true)" "circuit log lines of noop"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

# ---- thread pool: timeouts count too
rcall DEL q.t >/dev/null
write_config "$CONF" pool_kind=thread pool_size=2 log_level=info <<YAML
tasks:
  t:
    plugin: sleep.so
    queue: q.t
    prefetch: 1
    timeout: 100ms
    max_retries: 0
    circuit_failures: 2
    circuit_cool_off: 1m
YAML
xadd_bulk q.t 5 '{"ms":2000,"n":%d}'
start_daemon "$CONF"
wait_ping
wait_metric taskmill_task_circuit_open 'task="t"' 1 20
assert_eq open "$(status_circuit t)" "/status circuit of t after 2 timeouts"
assert_eq 2 "$(metric taskmill_tasks_total 'task="t",outcome="timeout"')" "timeouts of t"
assert_eq "2 0 3" "$(stream_state q.t)" "acked/pending/undelivered of q.t while open"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
