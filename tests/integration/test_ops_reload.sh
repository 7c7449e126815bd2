# SIGHUP reload: an added task consumes without a restart, a removed task
# stops consuming, a changed plugin runs its new code while the message
# already running finishes on the old code, and a bad config changes
# nothing. plugin_watch: true reloads by itself when a .so is replaced.
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
build_version() { # N -> $TEST_DIR/versioned-N.so
	cc -std=c11 -Wall -Wextra -Werror -fPIC -shared -I "$TM_SRCDIR/include" \
		-DTM_TEST_VERSION="$1" -o "$TEST_DIR/versioned-$1.so" \
		"$TM_SRCDIR/tests/plugins/versioned.c" || fail "cannot build v$1"
	chmod 0755 "$TEST_DIR/versioned-$1.so"
}
# install_version N: replace the plugin file atomically (a new inode), as
# package managers and `install` do; writing into a mapped .so is unsafe
install_version() {
	cp "$TEST_DIR/versioned-$1.so" "$PLUG/.versioned.so.tmp"
	mv -f "$PLUG/.versioned.so.tmp" "$PLUG/versioned.so"
}
for v in 1 2 3; do build_version $v; done
install_version 1
cp "$TM_PLUGINS/journal.so" "$TM_PLUGINS/noop.so" "$PLUG/"

VLOG=$TEST_DIR/versioned.log
ALOG=$TEST_DIR/a.log
BLOG=$TEST_DIR/b.log
CONF=$TEST_DIR/taskmill.yaml
HP=$(free_port)
header() {
	cat <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: ${POOL_KIND:-thread}, size: 2 }
plugin_dir: $PLUG
plugin_watch: ${WATCH:-false}
http: { listen: 127.0.0.1:$HP }
shutdown_timeout: 10s
log: { level: debug }
tasks:
YAML
}
HTTP_PORT=$HP
lines() { [[ -f $1 ]] && wc -l <"$1" || echo 0; }

{
	header
	echo "  a: { plugin: journal.so, queue: q.a, config: { path: $ALOG } }"
	echo "  v: { plugin: versioned.so, queue: q.v, config: { path: $VLOG } }"
} >"$CONF"
start_daemon "$CONF"
wait_ping
rcall XADD q.a '*' body '{"n":1}' >/dev/null
rcall XADD q.v '*' body '{"n":1}' >/dev/null
wait_until "[[ \$(lines $ALOG) == 1 && \$(lines $VLOG) == 1 ]]" 10
assert_match '^v1 ' "$(tail -1 "$VLOG")" "first run on v1"

# 1. add task b: it consumes without a restart; a keeps working
{
	header
	echo "  a: { plugin: journal.so, queue: q.a, config: { path: $ALOG } }"
	echo "  b: { plugin: journal.so, queue: q.b, config: { path: $BLOG } }"
	echo "  v: { plugin: versioned.so, queue: q.v, config: { path: $VLOG } }"
} >"$CONF"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 5
rcall XADD q.b '*' body '{"n":2}' >/dev/null
rcall XADD q.a '*' body '{"n":2}' >/dev/null
wait_until "[[ \$(lines $BLOG) == 1 && \$(lines $ALOG) == 2 ]]" 10
wait_ping
daemon_alive "$DAEMON_PID" || fail "daemon died on reload"

# 2. a changed plugin runs new code; the message running during the
# reload finishes on the old code
rcall XADD q.v '*' body '{"ms":1500}' >/dev/null
wait_until "[[ \$(metric taskmill_pool_busy '') -ge 1 ]]" 5
install_version 2
kill -HUP "$DAEMON_PID"
# what arrives once the reload took effect runs on v2; sent earlier, the
# old intake may still read it (a slow reload, e.g. under a sanitizer)
wait_until "grep -q 'as configuration 3' $DAEMON_LOG" 5
rcall XADD q.v '*' body '{"n":3}' >/dev/null
wait_until "[[ \$(lines $VLOG) == 3 ]]" 10
assert_eq 1 "$(grep -c '^v2 ' "$VLOG")" "runs on v2 after the reload"
assert_eq 2 "$(grep -c '^v1 ' "$VLOG")" "runs on v1 (the one in flight finished on old code)"

# 3. remove task a: its queue is no longer consumed
{
	header
	echo "  b: { plugin: journal.so, queue: q.b, config: { path: $BLOG } }"
	echo "  v: { plugin: versioned.so, queue: q.v, config: { path: $VLOG } }"
} >"$CONF"
kill -HUP "$DAEMON_PID"
wait_until "[[ -z \$(metric taskmill_tasks_total 'task=\"a\",outcome=\"success\"' 2>/dev/null | grep -v '^0$') ]]" 10
rcall XADD q.a '*' body '{"n":3}' >/dev/null
rcall XADD q.b '*' body '{"n":3}' >/dev/null
wait_until "[[ \$(lines $BLOG) == 2 ]]" 10
sleep 1 # give a removed task's intake every chance to (wrongly) consume
assert_eq 2 "$(lines "$ALOG")" "lines of removed task a"

# 4. a bad config is logged and changes nothing
cp "$CONF" "$TEST_DIR/good.yaml"
printf 'tasks:\n  b: { plugin: journal.so, prefetch: many }\n' >>"$CONF"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reload refused' $DAEMON_LOG" 5
rcall XADD q.b '*' body '{"n":4}' >/dev/null
wait_until "[[ \$(lines $BLOG) == 3 ]]" 10
cp "$TEST_DIR/good.yaml" "$CONF"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status"
grep -E 'ERROR: AddressSanitizer|runtime error' "$DAEMON_LOG" && fail "sanitizer report"

# 5. plugin_watch: replacing the file is enough (fork pool this time)
WATCH=true POOL_KIND=fork
{
	header
	echo "  v: { plugin: versioned.so, queue: q.v, config: { path: $VLOG } }"
} >"$CONF"
start_daemon "$CONF"
wait_ping
install_version 3
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
wait_ping
rcall XADD q.v '*' body '{"n":5}' >/dev/null
wait_until "[[ \$(grep -c '^v3 ' $VLOG) == 1 ]]" 10
stop_daemon
