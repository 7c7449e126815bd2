# Reload visibility. taskmill_config_generation numbers the configurations
# that took effect (1 at start; a refused reload takes no number),
# taskmill_config_last_reload_successful says whether the last reload took
# effect, and taskmill_config_last_reload_success_timestamp_seconds when
# the running configuration did (as Prometheus names its own). The reload
# log line names the tasks added, removed and changed, with the plugin
# versions old -> new.
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
build_version() { # N -> $TEST_DIR/versioned-N.so
	cc -std=c11 -Wall -Wextra -Werror -fPIC -shared -I "$TM_SRCDIR/include" \
		-DTM_TEST_VERSION="$1" -o "$TEST_DIR/versioned-$1.so" \
		"$TM_SRCDIR/tests/plugins/versioned.c" || fail "cannot build v$1"
	chmod 0755 "$TEST_DIR/versioned-$1.so"
}
install_version() {
	cp "$TEST_DIR/versioned-$1.so" "$PLUG/.versioned.so.tmp"
	mv -f "$PLUG/.versioned.so.tmp" "$PLUG/versioned.so"
}
for v in 1 2; do build_version $v; done
install_version 1
cp "$TM_PLUGINS/journal.so" "$TM_BUILD/test-plugins/initfail.so" "$PLUG/"

CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
write() { # TASK_LINES...: the config with these tasks
	{
		cat <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: thread, size: 2 }
plugin_dir: $PLUG
http: { listen: 127.0.0.1:$HTTP_PORT }
log: { level: debug }
tasks:
YAML
		printf '  %s\n' "$@"
	} >"$CONF"
}
A="a: { plugin: journal.so, queue: q.a, config: { path: $TEST_DIR/a.log } }"
B="b: { plugin: journal.so, queue: q.b, config: { path: $TEST_DIR/b.log } }"
V="v: { plugin: versioned.so, queue: q.v, config: { path: $TEST_DIR/v.log } }"
C="c: { plugin: initfail.so, queue: q.c }"
refusals() { grep -c 'reload refused' "$DAEMON_LOG" || true; }
gen_is() { # N SUCCESSFUL
	assert_eq "$1" "$(metric taskmill_config_generation)" "taskmill_config_generation"
	assert_eq "$2" "$(metric taskmill_config_last_reload_successful)" \
		"taskmill_config_last_reload_successful"
}
stamp() { metric taskmill_config_last_reload_success_timestamp_seconds; }

write "$A" "$V"
t0=$(($(now_ms) / 1000))
start_daemon "$CONF"
wait_ping
gen_is 1 1
ts1=$(stamp)
assert_ge "$((t0 - 1))" "${ts1%.*}" "success timestamp at start"
grep -q '^# TYPE taskmill_config_generation gauge$' <(curl -s "http://127.0.0.1:$HTTP_PORT/metrics") ||
	fail "taskmill_config_generation is not a gauge"

# 1. a reload that takes effect: b added, v's plugin 1.0.1 -> 1.0.2
sleep 1.1 # a later second for the timestamp
install_version 2
write "$A" "$B" "$V"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 2' $DAEMON_LOG" 10
line=$(grep 'as configuration 2' "$DAEMON_LOG")
assert_match 'added: b \(journal [0-9.]+\)' "$line" "reload line, added"
assert_match 'changed: v \(test-versioned 1\.0\.1 -> test-versioned 1\.0\.2\)' "$line" "reload line, changed"
wait_until "[[ \$(metric taskmill_config_generation) == 2 ]]" 5
gen_is 2 1
ts2=$(stamp)
assert_ge "$((${ts1%.*} + 1))" "${ts2%.*}" "success timestamp after the reload"

# 2. refused by a plugin: no generation number is spent
write "$A" "$B" "$V" "$C"
kill -HUP "$DAEMON_PID"
wait_until "[[ \$(refusals) == 1 ]]" 10
wait_until "[[ \$(metric taskmill_config_last_reload_successful) == 0 ]]" 5
gen_is 2 0
assert_eq "$ts2" "$(stamp)" "success timestamp after a refusal"
st=$(curl -s "http://127.0.0.1:$HTTP_PORT/status")
assert_eq 2 "$(jq -r .config.generation <<<"$st")" "/status config.generation"
assert_eq false "$(jq -r .config.last_reload_successful <<<"$st")" \
	"/status config.last_reload_successful"
assert_match 'tasks\.c\.plugin' "$(jq -r .config.last_reload_error <<<"$st")" \
	"/status config.last_reload_error"

# 3. refused as a bad file
printf 'tasks: [\n' >"$CONF"
kill -HUP "$DAEMON_PID"
wait_until "[[ \$(refusals) == 2 ]]" 10
gen_is 2 0

# 4. good again: the next number, without a gap; a removed
write "$B" "$V"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'as configuration 3' $DAEMON_LOG" 10
line=$(grep 'as configuration 3' "$DAEMON_LOG")
assert_match 'removed: a' "$line" "reload line, removed"
assert_match '2 unchanged' "$line" "reload line, unchanged count"
wait_until "[[ \$(metric taskmill_config_last_reload_successful) == 1 ]]" 5
gen_is 3 1
st=$(curl -s "http://127.0.0.1:$HTTP_PORT/status")
assert_eq 3 "$(jq -r .config.generation <<<"$st")" "/status config.generation"
assert_eq true "$(jq -r .config.last_reload_successful <<<"$st")" \
	"/status config.last_reload_successful"
assert_eq null "$(jq -r .config.last_reload_error <<<"$st")" \
	"/status: no error after a reload that took effect"
assert_match '^20[0-9-]+T[0-9:.]+Z$' \
	"$(jq -r .config.last_reload_success_time <<<"$st")" \
	"/status config.last_reload_success_time"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status"
