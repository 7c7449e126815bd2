# Fork pool: idle workers, asleep until the dispatcher hands them work,
# are still reached by a stop and watched for death. At SIGTERM every idle
# worker finds its socket closed, runs its worker fini and exits before
# the grace period after which a straggler is killed (a worker left asleep
# would be killed, its fini never run). A worker killed (-9) while idle is
# noticed and replaced, and the messages after it run.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=4
N=40
CONF=$TEST_DIR/taskmill.yaml
LOG=$TEST_DIR/workers.log
PLUGIN=$TM_BUILD/test-plugins/workerlog.so
[[ -f $PLUGIN ]] || fail "$PLUGIN not built (make test-plugins)"
write_config "$CONF" pool_kind=fork pool_size=$POOL <<YAML
tasks:
  w: { plugin: $PLUGIN, queue: q.w, config: { path: "$LOG" } }
YAML
start_daemon "$CONF"
wait_ping
wait_children "$POOL"
count() { grep -c "^$1 " "$LOG" || true; }
wait_until "[[ \$(count init) == $POOL ]]" 20

xadd_bulk q.w "$N" '{"n":%d}'
wait_metric taskmill_tasks_total 'task="w",outcome="success"' "$N" 60

# an idle worker, killed: noticed (its socket closes), replaced, and what
# comes after runs
mapfile -t workers < <(live_children "$DAEMON_PID")
victim=${workers[0]%%:*}
[[ -n $victim ]] || fail "no worker process to kill"
note "killing idle worker $victim"
kill -9 "$victim"
wait_metric taskmill_worker_restarts_total '' 1 30
wait_children "$POOL" 30
wait_until "[[ \$(count init) == $((POOL + 1)) ]]" 20
xadd_bulk q.w "$N" '{"n":%d}'
wait_metric taskmill_tasks_total 'task="w",outcome="success"' $((2 * N)) 60
assert_eq 0 "$(xpending q.w)" "entries left pending"

# every worker idle: the stop wakes them, each runs its fini
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
note "workers: $(count init) inits, $(count fini) finis"
assert_eq "$POOL" "$(count fini)" "worker finis at the stop (the killed one has none)"
grep -q "^fini $victim\$" "$LOG" && fail "the killed worker $victim ran its fini"
true
