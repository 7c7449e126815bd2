# Thread pool stop: a worker takes queued messages in chunks (one lock for
# several), and on SIGTERM the ones of its chunk it has not started go
# back unacknowledged, like those still in the queue: the stop waits for
# the run under way only, not for the rest of a chunk. One worker, twenty
# 400 ms runs read at once (a chunk of ten), shutdown_timeout 2 s: the
# daemon exits 0 with one or two runs done and the rest pending for
# redelivery (it ran its whole chunk, 4 s, and exited 1 before).
N=20
write_config "$TEST_DIR/taskmill.yaml" pool_size=1 shutdown_timeout=2s <<YAML
tasks:
  slow: { plugin: sleep.so, queue: q.chunk, prefetch: 64 }
YAML
xadd_bulk q.chunk "$N" '{"ms":400,"n":%d}'
start_daemon "$TEST_DIR/taskmill.yaml"
wait_ping
wait_metric taskmill_pool_busy '' 1 30
sleep 0.2
rc=0
stop_daemon 20 || rc=$?
assert_eq 0 "$rc" "exit status after SIGTERM (the run under way finished within shutdown_timeout)"
done_n=$(xlen q.chunk)
pending=$(xpending q.chunk)
note "after the stop: $pending of $N pending"
assert_le 3 "$((N - pending))" "runs finished and acknowledged before the stop"
assert_ge $((N - 3)) "$pending" "messages left pending for redelivery"
assert_eq "$N" "$done_n" "entries in the stream"
