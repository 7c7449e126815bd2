# Fork pool: a task added by a reload has its cb_init run once for the new
# configuration, in the worker zygote (whose copy of the task data the
# new workers inherit), not once in the daemon and again in the zygote; a
# task the reload keeps is not initialised again. An added task whose
# cb_init fails refuses the reload at its config: key, as at start.
. "$TM_SRCDIR/tests/integration/lib_fork.sh"

POOL=2
CONF=$TEST_DIR/taskmill.yaml
ILOG=$TEST_DIR/init.log
INITLOG=$TM_BUILD/test-plugins/initlog.so

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
run_one() { # NAME N: the Nth successful run of task NAME
	rcall XADD "q.$1" '*' body '{}' >/dev/null
	wait_metric taskmill_tasks_total "task=\"$1\",outcome=\"success\"" "$2" 15
}
reload_to() { # GEN: send SIGHUP and wait for configuration GEN
	kill -HUP "$DAEMON_PID"
	wait_until "grep -q 'as configuration $1' '$DAEMON_LOG'" 15
}

conf a
start_daemon "$CONF"
wait_ping
wait_children "$POOL"
zygote=$(zygote_of "$DAEMON_PID") || fail "no worker zygote"
run_one a 1
# configuration 1: initialised by the daemon, inherited by the zygote
assert_eq 1 "$(inits a)" "cb_init lines of a at start"
assert_eq "init a $DAEMON_PID" "$(grep '^init a ' "$ILOG")" "who initialised a"

# configuration 2 adds b: one cb_init, in the zygote; a is kept
conf a b
reload_to 2
run_one b 1
run_one a 2
note "init log after the first reload: $(paste -sd '|' "$ILOG")"
assert_eq 1 "$(inits b)" "cb_init lines of b added by the reload"
assert_eq "init b $zygote" "$(grep '^init b ' "$ILOG")" "who initialised b"
assert_eq 1 "$(inits a)" "cb_init lines of a kept by the reload"
wait_until "grep -q '\\[task:b\\].*run in pid' '$DAEMON_LOG'" 5

# configuration 3 adds c: one more, for c only
conf a b c
reload_to 3
run_one c 1
run_one b 2
note "init log after the second reload: $(paste -sd '|' "$ILOG")"
assert_eq 1 "$(inits c)" "cb_init lines of c added by the second reload"
assert_eq "init c $zygote" "$(grep '^init c ' "$ILOG")" "who initialised c"
assert_eq 1 "$(inits b)" "cb_init lines of b after the second reload"
assert_eq 1 "$(inits a)" "cb_init lines of a after the second reload"

# an added task whose cb_init fails refuses the reload at its config: key
conf a b c
echo "  d: { plugin: $INITLOG, queue: q.d, config: { path: '' } }" >>"$CONF"
line=$(grep -n '^  d:' "$CONF" | cut -d: -f1)
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reload refused' '$DAEMON_LOG'" 15
wait_until "grep -q '$CONF:$line:[0-9]*: tasks.d.config: .*init failed' '$DAEMON_LOG'" 5
assert_eq 0 "$(metric taskmill_config_last_reload_successful)" "last reload successful"
assert_eq 0 "$(inits d)" "cb_init lines of the refused task d"
run_one c 2
wait_children "$POOL"
for tag in $(daemon_children); do
	assert_eq "$zygote" "$(proc_field "${tag%%:*}" 4)" "parent of worker $tag"
done

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
