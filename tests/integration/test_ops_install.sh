# make install into a DESTDIR gives a working tree: the binary and plugins
# run, taskmill.h + taskmill.pc build the out-of-tree plugin template, and
# the systemd unit passes systemd-analyze verify where the tool exists.
ROOT=$TEST_DIR/root
# the build under test: the same flags, so make finds it up to date
FLAGS=()
if [[ $TM_BUILD == */build-asan ]]; then
	FLAGS=(SANITIZER=address OPTIMIZATION=-O1)
fi
make -s -C "$TM_SRCDIR" install BUILD="$TM_BUILD" "${FLAGS[@]}" \
	PREFIX=/usr/local DESTDIR="$ROOT" >"$TEST_DIR/install.log" 2>&1 ||
	fail "make install failed: $(tail -5 "$TEST_DIR/install.log")"
for f in usr/local/bin/taskmill usr/local/include/taskmill.h \
	usr/local/lib/pkgconfig/taskmill.pc usr/local/lib/taskmill/plugins/noop.so \
	etc/taskmill/taskmill.yaml.example \
	usr/local/lib/systemd/system/taskmill.service; do
	[[ -e $ROOT/$f ]] || fail "make install did not install /$f"
done
assert_match '^taskmill [0-9]+\.[0-9]+\.[0-9]+$' \
	"$("$ROOT/usr/local/bin/taskmill" --version)" "installed --version"
grep -q '^plugin_dir: /usr/local/lib/taskmill/plugins$' \
	"$ROOT/etc/taskmill/taskmill.yaml.example" ||
	fail "installed example config does not point at the installed plugins"
above=$(grep -B3 '^plugin_dir:' "$ROOT/etc/taskmill/taskmill.yaml.example")
[[ $above == *"built by \`make\`"* ]] &&
	fail "installed example config says its plugin_dir is the build tree: $above"

# The plugin template builds out of tree with pkg-config alone.
cflags=$(PKG_CONFIG_PATH=$ROOT/usr/local/lib/pkgconfig \
	PKG_CONFIG_SYSROOT_DIR=$ROOT pkg-config --cflags taskmill | xargs)
assert_eq "-I$ROOT/usr/local/include" "$cflags" "pkg-config --cflags taskmill"
PLUG=$TEST_DIR/plugins
mkdir -p "$PLUG" && chmod 0755 "$PLUG"
cp "$ROOT/usr/local/share/doc/taskmill/plugin-template/"* "$PLUG/"
PKG_CONFIG_PATH=$ROOT/usr/local/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$ROOT \
	make -s -C "$PLUG" >"$TEST_DIR/template.log" 2>&1 ||
	fail "template plugin does not build: $(cat "$TEST_DIR/template.log")"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  hello: { plugin: $PLUG/hello.so, queue: q.hello, config: { loud: true } }
YAML
out=$("$ROOT/usr/local/bin/taskmill" invoke -c "$CONF" hello '{"name":"you"}')
assert_match 'result: \{"greeting":"HELLO, you"\}' "$out" "template invoke"

TM_BIN=$ROOT/usr/local/bin/taskmill start_daemon "$CONF"
wait_ping
id=$("$ROOT/usr/local/bin/taskmill" emit -c "$CONF" hello '{"name":"daemon"}')
assert_match '^[0-9]+-[0-9]+$' "$id" "emitted id"
wait_metric taskmill_tasks_total 'task="hello",outcome="success"' 1 10
stop_daemon

# PREFIX=/usr into a stage: pkg-config drops -I/usr/include (a system
# directory), so --cflags prints nothing; the template still builds, with
# PKG_CONFIG_SYSROOT_DIR as documented and without it, under a umask of
# 002, and its own taskmill.yaml runs it. Its result is built by the
# daemon's JSON helpers: a name that needs escaping stays valid JSON.
STAGE=$TEST_DIR/stage
make -s -C "$TM_SRCDIR" install BUILD="$TM_BUILD" "${FLAGS[@]}" \
	PREFIX=/usr DESTDIR="$STAGE" >"$TEST_DIR/install-usr.log" 2>&1 ||
	fail "make install PREFIX=/usr failed: $(tail -5 "$TEST_DIR/install-usr.log")"
PC=$STAGE/usr/lib/pkgconfig
[[ -f $PC/taskmill.pc && -f $STAGE/usr/include/taskmill.h ]] ||
	fail "PREFIX=/usr: taskmill.pc or taskmill.h not installed"
assert_eq "" "$(PKG_CONFIG_PATH=$PC pkg-config --cflags taskmill | xargs)" \
	"pkg-config --cflags taskmill for PREFIX=/usr (system dir dropped)"
assert_eq "-I$STAGE/usr/include" \
	"$(PKG_CONFIG_PATH=$PC PKG_CONFIG_SYSROOT_DIR=$STAGE pkg-config --cflags taskmill | xargs)" \
	"pkg-config --cflags taskmill with PKG_CONFIG_SYSROOT_DIR"
assert_eq "/usr/lib/taskmill/plugins" \
	"$(PKG_CONFIG_PATH=$PC pkg-config --variable=plugindir taskmill)" "plugindir"
for how in sysroot plain; do
	T=$TEST_DIR/tpl-$how
	mkdir -p "$T" && chmod 0755 "$T"
	cp "$STAGE/usr/share/doc/taskmill/plugin-template/"* "$T/"
	[[ -f $T/taskmill.yaml ]] || fail "the template ships no taskmill.yaml"
	env=(PKG_CONFIG_PATH="$PC")
	[[ $how == sysroot ]] && env+=(PKG_CONFIG_SYSROOT_DIR="$STAGE")
	(umask 002 && env "${env[@]}" make -C "$T" >"$TEST_DIR/tpl-$how.log" 2>&1) ||
		fail "template ($how) does not build against PREFIX=/usr in a stage: $(cat "$TEST_DIR/tpl-$how.log")"
	mode=$(stat -c %a "$T/hello.so")
	assert_eq 755 "$mode" "template ($how): mode of hello.so built under umask 002"
	out=$("$STAGE/usr/bin/taskmill" invoke -c "$T/taskmill.yaml" hello \
		'{"name": "a\"b"}') || fail "template ($how) invoke failed: $out"
	assert_match 'outcome: success' "$out" "template ($how) outcome"
	assert_eq 'result: {"greeting":"hello, a\"b"}' "$(grep '^result: ' <<<"$out")" \
		"template ($how) result, escaped"
	rc=0
	out=$("$STAGE/usr/bin/taskmill" invoke -c "$T/taskmill.yaml" hello '{"name": 5}') || rc=$?
	assert_eq 1 "$rc" "template ($how): a non-string name is refused"
	assert_match 'outcome: rejected' "$out" "template ($how) outcome for a bad name"
done
# make install puts it, not group-writable, into the plugin directory
env PKG_CONFIG_PATH="$PC" PKG_CONFIG_SYSROOT_DIR="$STAGE" \
	make -s -C "$TEST_DIR/tpl-sysroot" install >>"$TEST_DIR/tpl-sysroot.log" 2>&1 ||
	fail "template make install failed: $(tail -5 "$TEST_DIR/tpl-sysroot.log")"
assert_eq 755 "$(stat -c %a "$STAGE/usr/lib/taskmill/plugins/hello.so")" \
	"mode of the installed template plugin"

if command -v systemd-analyze >/dev/null 2>&1; then
	UNIT=$TEST_DIR/taskmill.service
	sed "s|/usr/local|$ROOT/usr/local|g" \
		"$ROOT/usr/local/lib/systemd/system/taskmill.service" >"$UNIT"
	systemd-analyze verify "$UNIT" >"$TEST_DIR/verify.log" 2>&1 ||
		fail "systemd-analyze verify: $(cat "$TEST_DIR/verify.log")"
	[[ -s $TEST_DIR/verify.log ]] &&
		fail "systemd-analyze verify printed: $(cat "$TEST_DIR/verify.log")"
else
	note "systemd-analyze not installed: unit not verified"
fi
true
