# A consumer that stalls never takes back an entry another consumer took
# over. Daemon A runs attempt 1 of a message, which fails and is scheduled
# for a retry in 3 s; A is then stopped (SIGSTOP) past claim_idle. Daemon B
# runs the retry (attempt 2, which takes 6 s). A is resumed while B runs
# it: A must not claim it back (its retry is gone from its hands, and its
# keep-alive refresh only touches entries it holds), so attempt 2 is the
# only run after attempt 1: one journal line per attempt, no attempt 3.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

JOURNAL=$TEST_DIR/runs.txt
FLAKY=$TM_BUILD/test-plugins/flaky.so
[[ -f $FLAKY ]] || fail "$FLAKY not built (make test-plugins)"
tasks() {
	cat <<YAML
tasks:
  flaky:
    plugin: $FLAKY
    queue: q.own
    claim_idle: 2s
    on_error: requeue
    max_retries: 3
    backoff: 3s
    max_backoff: 3s
    config: { path: "$JOURNAL" }
YAML
}
runs() { # runs ID: journal lines of ID
	grep -c "^$1 " "$JOURNAL" 2>/dev/null || true
}

write_config "$TEST_DIR/a.yaml" instance=a < <(tasks)
PORT_A=$HTTP_PORT
start_daemon "$TEST_DIR/a.yaml"
PID_A=$DAEMON_PID
LOG_A=$DAEMON_LOG
wait_ping "$PORT_A"

id=$(rcall XADD q.own '*' body '{"ms":6000}')
note "published $id"
wait_until "grep -aF ' id=$id attempt 1 ' $LOG_A | grep -q 'retry in'" 20
kill -STOP "$PID_A"
note "daemon A stopped after attempt 1"
tmr_on_exit "kill -CONT $PID_A 2>/dev/null || true"

HTTP_PORT=
write_config "$TEST_DIR/b.yaml" instance=b < <(tasks)
PORT_B=$HTTP_PORT
start_daemon "$TEST_DIR/b.yaml"
PID_B=$DAEMON_PID
wait_ping "$PORT_B"
wait_until "grep -q '^$id 2\$' $JOURNAL" 30
note "daemon B runs attempt 2"
kill -CONT "$PID_A"
note "daemon A resumed"

# while B runs attempt 2 (6 s) and after: no other run
hold_for 5 "[[ \$(runs $id) == 2 ]]"
wait_until '[[ $(xpending q.own) == 0 ]]' 20
hold_for 2 "[[ \$(runs $id) == 2 ]]"
assert_eq "$id 1,$id 2" "$(paste -sd, "$JOURNAL")" "runs"
assert_eq 0 "$(xlen q.own.dlq)" "dead letters"

DAEMON_PID=$PID_B
stop_daemon
DAEMON_PID=$PID_A
stop_daemon
