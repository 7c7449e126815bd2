# The trace export never holds up a run, and what it cannot send is
# dropped and counted, within bounded memory:
#  - the collector down (nothing listens): 50,000 traced runs all finish,
#    no span is exported, every one but those still queued (at most
#    4096) is counted dropped, and the daemon's peak RSS stays under a
#    bound (the queue is bounded, nothing else grows per span);
#  - the collector answering 503: each batch is retried (several
#    requests), then dropped and counted;
#  - the collector slow (5 s per answer): N runs finish before its first
#    answer comes, and their spans arrive afterwards.
. "$TM_SRCDIR/tests/integration/lib_otel.sh"

# start_noop NAME PORT [TASK_KEYS]: a daemon exporting to PORT, its task
# noop on the stream q.NAME, ready
start_noop() {
	local conf=$TEST_DIR/$1.yaml
	write_config "$conf" log_level=info http_port="$(free_port)" <<YAML
telemetry: { otlp_endpoint: http://127.0.0.1:$2 }
tasks:
  noop: { plugin: noop.so, queue: q.$1${3:+, $3} }
YAML
	start_daemon "$conf"
	wait_ping
}

# --- collector down
DOWN=$(free_port)
start_noop down "$DOWN" 'prefetch: 256'
N=50000
xadd_bulk q.down "$N" '{"n":%d}'
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' "$N" 240
wait_until "(( \$(metric taskmill_spans_dropped_total) >= $N - 4096 ))" 60
assert_eq 0 "$(metric taskmill_spans_exported_total)" "collector down: nothing exported"
hwm=$(daemon_hwm)
note "collector down: peak RSS ${hwm} KiB after $N spans, $(metric taskmill_spans_dropped_total) dropped"
# the queue holds 4096 spans of well under 1 KiB; the bound leaves room
# for the pool and the broker's buffers (about 16 MiB in all), four
# times as much under a sanitizer
bound=65536
if ldd "$TM_BIN" | grep -E 'lib(a|t)san' >/dev/null; then
	bound=$((bound * 4))
fi
(( hwm < bound )) || fail "peak RSS ${hwm} KiB, over the bound of ${bound} KiB"
grep -q 'export to http://127.0.0.1:'"$DOWN"'/v1/traces failed' "$DAEMON_LOG" ||
	fail "the failed export is not logged"
stop_daemon

# --- the collector answers 503: retried, then dropped and counted
otlp_start 503
start_noop busy "$OTLP_PORT"
xadd_bulk q.busy 10 '{"n":%d}'
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 10 30
wait_metric taskmill_spans_dropped_total '' 10 60
assert_eq 0 "$(metric taskmill_spans_exported_total)" "503: nothing exported"
tries=$(grep -c '^503 ' "$OTLP_OUT.requests")
(( tries >= 2 )) || fail "503: the batch was not retried ($tries requests)"
# once the collector takes them again, new spans go through
otlp_mode ok
xadd_bulk q.busy 5 '{"n":%d}'
wait_metric taskmill_spans_exported_total '' 5 30
stop_daemon

# --- the collector is slow: runs go on while a request waits
otlp_mode slow
: >"$OTLP_OUT.requests"
start_noop slow "$OTLP_PORT"
xadd_bulk q.slow 20 '{"n":%d}'
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 20 30
# the first batch leaves within 1 s and is held 5 s by the collector:
# meanwhile N more runs finish, not waiting for it (they take some ms;
# 5 s is the loose bound)
wait_until "[[ -s '$OTLP_OUT.held' ]]" 10
N=300
t0=$(now_ms)
xadd_bulk q.slow "$N" '{"n":%d}'
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' $((N + 20)) 60
answered=$(grep -c . "$OTLP_OUT.requests" || true)
note "slow collector: $N runs took $(($(now_ms) - t0)) ms; collector answers meanwhile: $answered"
assert_eq 0 "$answered" "the runs finished while the collector held the first request"
wait_metric taskmill_spans_exported_total '' $((N + 20)) 60
assert_eq 0 "$(metric taskmill_spans_dropped_total)" "slow: nothing dropped"
stop_daemon
