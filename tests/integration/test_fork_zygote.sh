# Fork pool: workers are forked by a zygote, a single-threaded process
# forked by the zygote seed, which the daemon forks before it starts any
# thread; never by a thread of the daemon, so no worker inherits a lock
# another thread held. The daemon's only child is the seed, the seed's
# the zygote; the workers, first ones and replacements, are the zygote's
# children. A reload's new tasks are loaded by the zygote itself (its
# cb_init makes the task data the new workers use), as the daemon has
# threads by then. A zygote that dies takes its workers along and is
# restarted by the seed; the new workers are its children, never the
# daemon's (test_fork_zygote_restart.sh: repeated deaths, the backoff).
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
CONF=$TEST_DIR/taskmill.yaml
INITPID=$TM_BUILD/test-plugins/initpid.so

if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate crash: let the child die of SIGSEGV (see
	# test_fork_crash.sh)
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
fi

tasks() {
	cat <<YAML
tasks:
  a: { plugin: $INITPID, queue: q.a }
  f: { plugin: fail.so, queue: q.f, max_retries: 0 }
YAML
}
write_config "$CONF" pool_kind=fork pool_size=$POOL < <(tasks)

start_daemon "$CONF"
wait_ping
wait_children "$POOL"

threads() { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }
# ThreadSanitizer's runtime starts a background thread of its own in the
# forked zygote: one more than the zygote's code has
zygote_threads=1
[[ $TM_BUILD == *build-tsan ]] && zygote_threads=2
seed=$(seed_of "$DAEMON_PID") || fail "the daemon has no tm-zygote-seed child"
zygote=$(zygote_of "$DAEMON_PID") || fail "the seed has no tm-zygote child"
note "seed pid $seed, zygote pid $zygote; daemon threads $(threads "$DAEMON_PID")"
assert_eq "$seed" "$(pgrep -P "$DAEMON_PID" | paste -sd ' ')" "the daemon's children"
assert_eq "$zygote" "$(pgrep -P "$seed" | paste -sd ' ')" "the seed's children"
assert_le "$zygote_threads" "$(threads "$seed")" "threads of the seed"
assert_le "$zygote_threads" "$(threads "$zygote")" "threads of the zygote"
assert_ge 2 "$(threads "$DAEMON_PID")" "threads of the daemon"
first=$(daemon_children | paste -sd ' ')

# a crash: the replacement comes from the zygote too
rcall XADD q.f '*' body '{"mode":"crash"}' >/dev/null
wait_metric taskmill_tasks_total 'task="f",outcome="crashed"' 1 15
wait_children "$POOL"
assert_ne "$first" "$(daemon_children | paste -sd ' ')" "workers after a crash"
assert_eq "$seed" "$(pgrep -P "$DAEMON_PID" | paste -sd ' ')" "the daemon's children after a crash"
assert_eq "$zygote" "$(zygote_of "$DAEMON_PID")" "the zygote after a crash"

# the first configuration's task data was made by the daemon (inherited)
rcall XADD q.a '*' body '{"n":1}' >/dev/null
wait_metric taskmill_tasks_total 'task="a",outcome="success"' 1 15
wait_until "grep -q '\\[task:a\\].*init in pid $DAEMON_PID, run in pid' '$DAEMON_LOG'" 5

# reload with a new task: the zygote loads it, its workers use that data
write_config "$CONF" pool_kind=fork pool_size=$POOL http_port="$HTTP_PORT" < <(
	tasks
	echo "  b: { plugin: $INITPID, queue: q.b }"
)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' '$DAEMON_LOG'" 10
rcall XADD q.b '*' body '{"n":1}' >/dev/null
wait_metric taskmill_tasks_total 'task="b",outcome="success"' 1 15
wait_until "grep -q '\\[task:b\\].*init in pid $zygote, run in pid' '$DAEMON_LOG'" 5
assert_le "$zygote_threads" "$(threads "$zygote")" "threads of the zygote after the reload"
assert_eq "$zygote" "$(zygote_of "$DAEMON_PID")" "the zygote after the reload"
wait_children "$POOL" 15
for tag in $(daemon_children); do
	assert_eq "$zygote" "$(proc_field "${tag%%:*}" 4)" "parent of worker $tag"
done
assert_eq 0 "$(grep -c 'no worker zygote\|is forked while\|zygote.*is gone' "$DAEMON_LOG" || true)" \
	"zygote warnings in the log"

# a zygote killed takes its workers along; the seed forks a new one,
# which forks the new workers
kill -KILL "$zygote"
wait_until "grep -q 'zygote (pid $zygote) is gone' '$DAEMON_LOG'" 15
wait_until "grep -q 'worker zygote restarted' '$DAEMON_LOG'" 15
wait_children "$POOL" 15
zygote2=$(zygote_of "$DAEMON_PID") || fail "no zygote after the restart"
assert_ne "$zygote" "$zygote2" "the zygote after its death"
assert_eq "$seed" "$(proc_field "$zygote2" 4)" "parent of the new zygote"
assert_le "$zygote_threads" "$(threads "$zygote2")" "threads of the new zygote"
for tag in $(daemon_children); do
	assert_eq "$zygote2" "$(proc_field "${tag%%:*}" 4)" "parent of worker $tag after the restart"
	# its own rings only (two mappings), none of its siblings'
	assert_eq 2 "$(grep -c taskmill-fork-ring "/proc/${tag%%:*}/maps" || true)" \
		"ring mappings of worker $tag forked by the new zygote"
done
assert_eq "$seed" "$(pgrep -P "$DAEMON_PID" | paste -sd ' ')" "the daemon's children after the restart"
rcall XADD q.a '*' body '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="a",outcome="success"' 2 15
rcall XADD q.b '*' body '{"n":2}' >/dev/null
wait_metric taskmill_tasks_total 'task="b",outcome="success"' 2 15
wait_metric taskmill_zygote_restarts_total '' 1 5
daemon_alive || fail "daemon died with its zygote"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
