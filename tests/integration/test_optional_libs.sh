# The daemon does not link librabbitmq, libssl or libcrypto: it opens them
# when a configuration names a broker that needs them (src/util/dlib.h).
# - An idle Redis daemon with the example tasks maps none of the three.
# - With LD_LIBRARY_PATH naming a directory that holds broken copies
#   (empty files) of librabbitmq.so.4 and libssl.so.3, a Redis daemon
#   still starts and serves; a config that needs one of them is refused
#   where it names the broker, exit 2, by `taskmill check` and by
#   `taskmill run`, and a reload to such a file is refused with the same
#   reason while the running configuration stays.
# Before the change the dynamic loader refused to start the binary at all
# with those files in its path.
J=$TEST_DIR/journal.txt
write_config "$TEST_DIR/redis.yaml" <<YAML
tasks:
  noop: { plugin: noop.so }
  add: { plugin: add.so }
  sleep: { plugin: sleep.so }
  fail: { plugin: fail.so }
  journal: { plugin: journal.so, config: { path: $J } }
YAML

# maps_libs PID: the optional libraries the process maps, one a line
maps_libs() {
	local maps
	maps=$(cat "/proc/$1/maps")
	grep -oE '/[^ ]*/lib(rabbitmq|ssl|crypto)\.so[^ ]*' <<<"$maps" | sort -u || true
}

note "---- an idle Redis daemon maps none of them"
start_daemon "$TEST_DIR/redis.yaml"
wait_ping
id=$(emit "$TEST_DIR/redis.yaml" journal '{"n":1}')
wait_until "grep -q '^$id ' '$J' 2>/dev/null" 30
assert_eq "" "$(maps_libs "$DAEMON_PID")" "optional libraries mapped by an idle Redis daemon"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the Redis daemon"

BAD=$TEST_DIR/badlib
mkdir -p "$BAD"
: >"$BAD/librabbitmq.so.4"
: >"$BAD/libssl.so.3"

note "---- broken copies in LD_LIBRARY_PATH: a Redis daemon runs"
HTTP_PORT=
write_config "$TEST_DIR/redis2.yaml" <<YAML
tasks:
  journal: { plugin: journal.so, config: { path: $J } }
YAML
LD_LIBRARY_PATH=$BAD start_daemon "$TEST_DIR/redis2.yaml"
wait_ping
id=$(emit "$TEST_DIR/redis2.yaml" journal '{"n":2}')
wait_until "grep -q '^$id ' '$J' 2>/dev/null" 30

# refused NAME URL SONAME PACKAGE: a config for URL fails to load with
# the broken SONAME, exit 2, naming the file, line and column of
# broker.url (line 2, column 8) and the package
refused() {
	local name=$1 url=$2 soname=$3 pkg=$4 want cmd
	cat >"$TEST_DIR/$name.yaml" <<YAML
broker:
  url: "$url"
plugin_dir: $TM_PLUGINS
tasks:
  noop: { plugin: noop.so }
YAML
	want="$TEST_DIR/$name.yaml:2:8: broker.url * needs $soname (Debian: apt-get install $pkg): $BAD/$soname: file too short"
	for cmd in check run; do
		LD_LIBRARY_PATH=$BAD tm "$cmd" -c "$TEST_DIR/$name.yaml"
		assert_eq 2 "$TM_RC" "exit status of taskmill $cmd, $name"
		[[ $(<"$TM_ERR") == *$want* ]] ||
			fail "taskmill $cmd, $name: expected '$want', got: $(<"$TM_ERR")"
		[[ $(<"$TM_ERR") != *secret* ]] ||
			fail "taskmill $cmd, $name: the password is shown: $(<"$TM_ERR")"
	done
	# the library is opened, not only looked for: a good copy loads
	tm check -c "$TEST_DIR/$name.yaml"
	assert_eq 0 "$TM_RC" "exit status of taskmill check, $name, without the broken copy: $(<"$TM_ERR")"
}
refused amqp "amqp://guest:secret@127.0.0.1:1/" librabbitmq.so.4 librabbitmq4
refused amqps "amqps://guest:secret@127.0.0.1:1/" librabbitmq.so.4 librabbitmq4
refused rediss "rediss://:secret@127.0.0.1:1/0" libssl.so.3 libssl3

note "---- a reload to an amqp:// file is refused with the reason"
cp "$TEST_DIR/amqp.yaml" "$TEST_DIR/redis2.yaml"
kill -HUP "$DAEMON_PID"
wait_until "grep -q 'reload refused.*needs librabbitmq.so.4 (Debian: apt-get install librabbitmq4)' '$DAEMON_LOG'" 30
daemon_alive || fail "the daemon exited after a refused reload"
assert_eq 200 "$(http_code /ping)" "/ping after the refused reload"
assert_eq "" "$(maps_libs "$DAEMON_PID")" "optional libraries mapped after the refused reload"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the Redis daemon with the broken copies in its path"
