# An exec command cannot read the daemon's secrets: it gets a clean
# environment (PATH, LANG, TZ, the run's TASKMILL_* and the task's env:,
# nothing else of the daemon's), and the daemon's /proc/PID/environ and mem
# (and those of a fork-pool worker and the zygote) cannot be opened by it,
# although it runs as the daemon's own uid. The daemon gets a password in
# TASKMILL_BROKER_URL (a Redis ACL user), TASKMILL_HTTP_TOKEN and an
# unrelated SECRET_X. Root (CAP_SYS_PTRACE) can read any process, so the
# daemon and its commands run here as an unprivileged uid (setpriv); the
# probe walks up from its parent through every taskmill process above it.
# With TASKMILL_DUMPABLE=1 (the documented opt-out) the daemon's environ
# is readable again, while the command's own environment stays clean.
command -v setpriv >/dev/null || skip "setpriv (util-linux) not installed"
[[ $(id -u) == 0 ]] || skip "needs root to run the daemon as another uid"
[[ -f $TM_PLUGINS/exec.so ]] || fail "exec.so not built"

UID_RUN=65534
PW=pw-$RANDOM$RANDOM-brokerpass
TOKEN=tok-$RANDOM$RANDOM-httptoken
SECRET=sx-$RANDOM$RANDOM-unrelated
ACL_USER=tmexec$RANDOM

# The unprivileged daemon cannot enter the scratch dir (0700): its config,
# the probe and the probe's output live in a directory it can.
WD=$(mktemp -d "${TMPDIR:-/tmp}/tm-exec-secrets.XXXXXX")
tm_on_exit "rm -rf '$WD'"
chmod 755 "$WD"
mkdir "$WD/out"
chown "$UID_RUN" "$WD/out"
install -m 755 "$TM_SRCDIR/tests/hosts/exec_probe.sh" "$WD/probe.sh"
# TM_BIN for start_daemon: the daemon as UID_RUN, same pid (exec)
cat >"$WD/as-user" <<SH
#!/bin/sh
exec setpriv --reuid=$UID_RUN --regid=$UID_RUN --clear-groups -- "$TM_BIN" "\$@"
SH
chmod 755 "$WD/as-user"

rcall ACL SETUSER "$ACL_USER" on ">$PW" '~*' '&*' '+@all' >/dev/null
tm_on_exit "rcall ACL DELUSER '$ACL_USER' >/dev/null"

CONF=$WD/taskmill.yaml
conf() {
	local kind=$1 port
	port=$(free_port)
	HTTP_PORT=$port
	cat >"$CONF" <<YAML
broker: { url: "\${TASKMILL_BROKER_URL}" }
pool: { kind: $kind, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$port, token: "\${TASKMILL_HTTP_TOKEN}" }
shutdown_timeout: 10s
log: { level: debug, format: text }
tasks:
  probe:
    plugin: exec.so
    queue: q.probe
    on_error: reject
    timeout: 20s
    config:
      command: [$WD/probe.sh]
      env: { PROBE_DIR: $WD/out, LANG: C }
YAML
	chmod 644 "$CONF"
}

# run_probe KIND [DUMPABLE]: one message through a daemon of pool KIND run
# with the secrets in its environment; the probe's report in $REPORT.
run_probe() {
	local kind=$1 dumpable=${2:-} id
	conf "$kind"
	rm -f "$WD"/out/*
	id=$(rcall XADD q.probe '*' body '{}')
	local -a envv=(TASKMILL_BROKER_URL="redis://$ACL_USER:$PW@127.0.0.1:$REDIS_PORT/0"
		TASKMILL_HTTP_TOKEN="$TOKEN" SECRET_X="$SECRET"
		LANG=C.UTF-8 TZ=UTC0)
	[[ -z $dumpable ]] || envv+=(TASKMILL_DUMPABLE="$dumpable")
	# env and the wrapper exec: $! is the daemon's pid
	env "${envv[@]}" "$WD/as-user" run -c "$CONF" \
		>"$TEST_DIR/daemon.$kind$dumpable.log" 2>&1 &
	DAEMON_PID=$!
	echo "$DAEMON_PID" >>"$TEST_DIR/daemon.pids"
	DAEMON_LOG=$TEST_DIR/daemon.$kind$dumpable.log
	wait_ping
	wait_until "[[ -s $WD/out/$id ]]" 30
	REPORT=$(cat "$WD/out/$id")
	note "$kind pool${dumpable:+, TASKMILL_DUMPABLE=$dumpable}: probe report:"
	sed 's/^/    /' "$WD/out/$id" >&2
	local rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "$kind pool: daemon exit status"
}

# self_env: the probe's own environment, one "NAME=value" a line
self_env() {
	awk '/^== self/ {on = 1; next} /^== / {on = 0} on' <<<"$REPORT"
}

check_clean_env() {
	local what=$1 names bad
	names=$(self_env | sed 's/=.*//' | sort | tr '\n' ' ')
	note "$what: the command's environment: $names"
	bad=$(self_env | sed 's/=.*//' |
		grep -v -x -E 'PATH|LANG|TZ|PROBE_DIR|TASKMILL_(TASK|MESSAGE_ID|ATTEMPT|DEADLINE_MS)' || true)
	[[ -z $bad ]] || fail "$what: the command got variables outside the contract: $(echo $bad)"
	self_env | grep -q -x "PATH=$PATH" || fail "$what: PATH not the daemon's"
	self_env | grep -q -x 'TZ=UTC0' || fail "$what: TZ not the daemon's"
	self_env | grep -q -x 'LANG=C' || fail "$what: env: LANG not applied"
	self_env | grep -q -x 'TASKMILL_TASK=probe' || fail "$what: TASKMILL_TASK missing"
	self_env | grep -q -x "PROBE_DIR=$WD/out" || fail "$what: the task's env: missing"
}

for kind in thread fork; do
	run_probe "$kind"
	check_clean_env "$kind pool"
	grep -q '^== ancestor ' <<<"$REPORT" || fail "$kind pool: no taskmill process above the command"
	for s in "$PW" "$TOKEN" "$SECRET"; do
		if grep -q -F -e "$s" <<<"$REPORT"; then
			fail "$kind pool: the command read a secret of the daemon: $(grep -F -e "$s" <<<"$REPORT" | head -3)"
		fi
	done
	if grep -q -E '^(environ|mem): readable' <<<"$REPORT"; then
		fail "$kind pool: a taskmill process's /proc files are open to the command: $(grep -E -B3 '^(environ|mem): readable' <<<"$REPORT" | grep -E '^(==|environ|mem)' | tr '\n' ' ')"
	fi
	n=$(grep -c '^== ancestor ' <<<"$REPORT")
	assert_eq "$n" "$(grep -c '^environ: denied' <<<"$REPORT")" "$kind pool: environ denied for every taskmill ancestor"
	assert_eq "$n" "$(grep -c '^mem: denied' <<<"$REPORT")" "$kind pool: mem denied for every taskmill ancestor"
done

# `taskmill invoke` runs the command itself: the same holds for it.
conf thread
rm -f "$WD"/out/*
TM_RC=0
env TASKMILL_BROKER_URL="redis://$ACL_USER:$PW@127.0.0.1:$REDIS_PORT/0" \
	TASKMILL_HTTP_TOKEN="$TOKEN" SECRET_X="$SECRET" LANG=C.UTF-8 TZ=UTC0 \
	timeout -k 5 60 "$WD/as-user" invoke -c "$CONF" probe '{}' \
	>"$TM_OUT" 2>"$TM_ERR" || TM_RC=$?
assert_eq 0 "$TM_RC" "invoke: exit status ($(head -c 300 "$TM_ERR"))"
REPORT=$(cat "$WD/out/invoke-1")
note "invoke: probe report:"
sed 's/^/    /' "$WD/out/invoke-1" >&2
check_clean_env invoke
assert_eq 1 "$(grep -c '^== ancestor .* taskmill$' <<<"$REPORT")" "invoke: the taskmill process above the command"
for s in "$PW" "$TOKEN" "$SECRET"; do
	! grep -q -F -e "$s" <<<"$REPORT" || fail "invoke: the command read a secret: $(grep -F -e "$s" <<<"$REPORT" | head -3)"
done
grep -q '^environ: denied' <<<"$REPORT" || fail "invoke: taskmill's environ is open to the command"
grep -q '^mem: denied' <<<"$REPORT" || fail "invoke: taskmill's mem is open to the command"

# The opt-out: the daemon stays dumpable, its environ is open to its own
# uid again (the trade-off docs/operations.md states); the command's
# environment is clean all the same.
run_probe thread 1
check_clean_env "TASKMILL_DUMPABLE=1"
grep -q '^environ: readable' <<<"$REPORT" || fail "TASKMILL_DUMPABLE=1: the daemon's environ is still closed"
grep -q -F -e "$TOKEN" <<<"$REPORT" || fail "TASKMILL_DUMPABLE=1: the token not seen in the daemon's environ"
