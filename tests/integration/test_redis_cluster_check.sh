# Redis Cluster's one-slot rule is the Redis adapter's check of a loaded
# configuration (its check op), reported as the loader reports, at the
# file's own positions, exit 2:
#   - `taskmill check` lists every refusal: a task without a queue: key
#     at its name, a task with an untagged queue at its queue: value, a
#     schedule of that task at its task: value;
#   - `taskmill run` reports the same and does not start, exit 2;
#   - a running cluster daemon refuses a reload that adds such a task,
#     with the same line and column, keeps its configuration and goes on
#     serving; the next reload, the task tagged, is applied.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

topo_cluster_setup
P0=${TOPO_CLUSTER_PORTS[0]}

BAD=$TEST_DIR/bad.yaml
cat >"$BAD" <<YAML
broker:
  url: [redis://127.0.0.1:$P0]
  redis: { mode: cluster }
plugin_dir: $TM_PLUGINS
tasks:
  plain: { plugin: noop.so }
  named: { plugin: noop.so, queue: orders }
  tagged: { plugin: noop.so, queue: '{ok}' }
schedules:
  nightly: { task: named, every: 1h }
YAML
TASK_RULE="in broker.redis.mode: cluster, a task's keys must share one hash slot"
SCHED_RULE="in broker.redis.mode: cluster, a schedule's key must share its task's hash slot"

note "---- check: every refusal, at its position"
tm check -c "$BAD"
assert_eq 2 "$TM_RC" "exit status of taskmill check"
assert_eq 3 "$(wc -l <"$TM_ERR")" "lines of taskmill check: $(<"$TM_ERR")"
assert_match "^$BAD:6:3: tasks.plain: $TASK_RULE .*queue: '\{taskmill.plain\}'" \
	"$(sed -n 1p "$TM_ERR")" "check, the task without queue:"
assert_match "^$BAD:7:36: tasks.named: $TASK_RULE .*queue: '\{orders\}'" \
	"$(sed -n 2p "$TM_ERR")" "check, the untagged queue"
assert_match "^$BAD:10:20: schedules.nightly.task: $SCHED_RULE .*queue: '\{orders\}'" \
	"$(sed -n 3p "$TM_ERR")" "check, the schedule"

note "---- run: the same refusals, no start"
checked=$(<"$TM_ERR")
tm run -c "$BAD"
assert_eq 2 "$TM_RC" "exit status of taskmill run"
assert_eq "$checked" "$(<"$TM_ERR")" "the errors of taskmill run"

note "---- reload: refused at the task's queue, then applied once tagged"
J=$TEST_DIR/journal.txt
: >"$J"
HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
# good_config [EXTRA_TASK_LINE]: the daemon's file, one more task line
good_config() {
	cat >"$CONF" <<YAML
broker:
  url: [redis://127.0.0.1:$P0]
  redis: { mode: cluster }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
log: { level: debug }
tasks:
  journal: { plugin: journal.so, queue: '{j}', config: { path: $J } }
${1:-}
YAML
}
good_config
# the CLI's copy: the daemon's file is refused while it names the bad task
EMIT=$TEST_DIR/emit.yaml
cp "$CONF" "$EMIT"
start_daemon "$CONF"
wait_ping
id=$(emit "$EMIT" journal '{"n":1}')
wait_until "grep -q '^$id ' '$J'" 30

good_config "  extra: { plugin: noop.so, queue: extra }"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reload refused' '$DAEMON_LOG'" 30
line=$(grep 'reload refused' "$DAEMON_LOG" | tail -n 1)
assert_match "stays: $CONF:9:36: tasks.extra: $TASK_RULE .*queue: '\{extra\}'" \
	"$line" "the refused reload"
daemon_alive || fail "the daemon exited after a refused reload"
id=$(emit "$EMIT" journal '{"n":2}')
wait_until "grep -q '^$id ' '$J'" 30

good_config "  extra: { plugin: noop.so, queue: '{extra}' }"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reloaded .* as configuration 2' '$DAEMON_LOG'" 30
emit "$CONF" extra '{"n":3}' >/dev/null
id=$(emit "$CONF" journal '{"n":4}')
wait_until "grep -q '^$id ' '$J'" 30
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the daemon"
