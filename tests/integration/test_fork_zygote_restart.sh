# Fork pool: a worker zygote killed (kill -9), again and again, is
# restarted by its seed each time: taskmill_zygote_restarts_total counts
# the restarts, the log tells of each death and restart, the new workers
# are the new zygote's children (never the daemon's: it has threads), a
# reloaded configuration's tasks are loaded again into the new zygote
# (one cb_init each per zygote), and messages of both configurations'
# tasks keep succeeding.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
KILLS=4
CONF=$TEST_DIR/taskmill.yaml
ILOG=$TEST_DIR/init.log
INITLOG=$TM_BUILD/test-plugins/initlog.so

if [[ $TM_BUILD == *build-asan ]]; then
	# EXPECTED, deliberate kills: workers die of SIGKILL with their zygote
	export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0
fi

task() { # NAME: one initlog task on queue q.NAME
	echo "  $1: { plugin: $INITLOG, queue: q.$1, config: { path: $ILOG } }"
}
inits() { # NAME: how many cb_init lines task NAME has
	grep -c "^init $1 " "$ILOG" || true
}
conf() { # TASK...: the configuration with these tasks
	local t
	write_config "$CONF" pool_kind=fork pool_size=$POOL http_port="${HTTP_PORT:-}" < <(
		echo "tasks:"
		for t in "$@"; do task "$t"; done
	)
}
OK_A=0 OK_B=0
run_both() { # one more successful run of a and of b
	OK_A=$((OK_A + 1)) OK_B=$((OK_B + 1))
	rcall XADD q.a '*' body '{}' >/dev/null
	rcall XADD q.b '*' body '{}' >/dev/null
	wait_metric taskmill_tasks_total 'task="a",outcome="success"' "$OK_A" 20
	wait_metric taskmill_tasks_total 'task="b",outcome="success"' "$OK_B" 20
}

conf a
start_daemon "$CONF"
wait_ping
wait_children "$POOL"
seed=$(seed_of "$DAEMON_PID") || fail "no zygote seed"
conf a b
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' '$DAEMON_LOG'" 15
run_both
assert_eq 0 "$(metric taskmill_zygote_restarts_total)" "zygote restarts before any death"

zygote=$(zygote_of "$DAEMON_PID") || fail "no worker zygote"
for ((k = 1; k <= KILLS; k++)); do
	note "kill $k of the zygote $zygote"
	kill -KILL "$zygote"
	wait_until "grep -q 'worker zygote (pid $zygote) is gone' '$DAEMON_LOG'" 15
	wait_metric taskmill_zygote_restarts_total '' "$k" 30
	wait_until "grep -q 'worker zygote restarted (pid [0-9]*, restart $k)' '$DAEMON_LOG'" 5
	wait_children "$POOL" 30
	next=$(zygote_of "$DAEMON_PID") || fail "no zygote after restart $k"
	assert_ne "$zygote" "$next" "the zygote after kill $k"
	grep -q "worker zygote restarted (pid $next, restart $k)" "$DAEMON_LOG" ||
		fail "the log does not name zygote $next as restart $k"
	assert_eq "$seed" "$(proc_field "$next" 4)" "parent of the zygote after kill $k"
	for tag in $(daemon_children); do
		assert_eq "$next" "$(proc_field "${tag%%:*}" 4)" "parent of worker $tag after kill $k"
	done
	assert_eq "$seed" "$(pgrep -P "$DAEMON_PID" | paste -sd ' ')" "the daemon's children after kill $k"
	run_both
	zygote=$next
done

# configuration 1's task data is inherited by every zygote (one cb_init,
# the daemon's); configuration 2's b is loaded again by each new zygote
note "init log: $(paste -sd '|' "$ILOG")"
assert_eq 1 "$(inits a)" "cb_init lines of a"
assert_eq $((KILLS + 1)) "$(inits b)" "cb_init lines of b (one per zygote)"
assert_eq "init b $zygote" "$(grep '^init b ' "$ILOG" | tail -n 1)" "the last init of b"
daemon_alive || fail "daemon died with its zygote"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
wait_until "! kill -0 $seed 2>/dev/null" 10
