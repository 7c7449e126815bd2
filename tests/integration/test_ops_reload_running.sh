# A reload never unloads code or frees state that a running call still
# uses: a plugin whose run sleeps 4 s without asking should_stop() is
# replaced while it runs, with shutdown_timeout 1s. The old configuration
# gives up waiting at 1 s but keeps the old plugin (code, task data,
# worker data) until the run returns; the run completes on the old code,
# later messages run on the new code, and the daemon stays up. Thread
# pool, then fork pool (whose dispatcher must outlive its children's
# runs).
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
build_version() { # N -> $TEST_DIR/stubborn-N.so
	cc -std=c11 -Wall -Wextra -Werror -fPIC -shared -I "$TM_SRCDIR/include" \
		-DTM_TEST_VERSION="$1" -o "$TEST_DIR/stubborn-$1.so" \
		"$TM_SRCDIR/tests/plugins/stubborn.c" || fail "cannot build v$1"
	chmod 0755 "$TEST_DIR/stubborn-$1.so"
}
install_version() { # N: replace the plugin file under a new inode
	cp "$TEST_DIR/stubborn-$1.so" "$PLUG/.stubborn.so.tmp"
	mv -f "$PLUG/.stubborn.so.tmp" "$PLUG/stubborn.so"
}
for v in 1 2 3; do build_version $v; done
LOG=$TEST_DIR/stubborn.log
CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
lines() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }

# round KIND: one daemon with a KIND pool through one replacement
round() {
	local kind=$1 id rc
	: >"$LOG"
	install_version 1
	cat >"$CONF" <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: $kind, size: 2 }
plugin_dir: $PLUG
plugin_watch: true
http: { listen: 127.0.0.1:$HTTP_PORT }
shutdown_timeout: 1s
log: { level: debug }
tasks:
  st: { plugin: stubborn.so, queue: q.$kind, config: { path: $LOG } }
YAML
	start_daemon "$CONF"
	wait_ping
	id=$(rcall XADD "q.$kind" '*' body '{"ms":4000}')
	wait_until "[[ \$(metric taskmill_pool_busy '') -ge 1 ]]" 10
	install_version 2
	wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 15
	wait_until "grep -q 'shutdown_timeout of 1000 ms reached' $DAEMON_LOG" 15
	if [[ $kind == thread ]]; then
		# the abandoned run still returns, on the old code and state
		wait_until "grep -q '^v1 $id\$' $LOG" 15
	fi
	daemon_alive || fail "$kind pool: daemon died under the running call"
	rcall XADD "q.$kind" '*' body '{"n":2}' >/dev/null
	wait_until "grep -q '^v2 ' $LOG" 15
	# and once more: a configuration retired after a lingering one
	install_version 3
	wait_until "grep -q 'as configuration 3' $DAEMON_LOG" 15
	rcall XADD "q.$kind" '*' body '{"n":3}' >/dev/null
	wait_until "grep -q '^v3 ' $LOG" 15
	daemon_alive || fail "$kind pool: daemon died"
	if grep -q 'finalised under a running call' "$DAEMON_LOG"; then
		fail "$kind pool: a run saw its state finalised"
	fi
	rc=0
	stop_daemon || rc=$?
	note "$kind pool: exit status $rc"
	(( rc == 0 || rc == 1 )) || fail "$kind pool: exit status $rc"
}
round thread
round fork
