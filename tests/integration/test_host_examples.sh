# The language hosts' examples, as `make install` puts them: the example
# config's commented tasks for them, uncommented, run each example with
# `taskmill invoke`.
ROOT=$TEST_DIR/root
FLAGS=()
if [[ $TM_BUILD == */build-asan ]]; then
	FLAGS=(SANITIZER=address OPTIMIZATION=-O1)
	export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
fi
make -s -C "$TM_SRCDIR" install BUILD="$TM_BUILD" "${FLAGS[@]}" \
	PREFIX="$ROOT/usr" SYSCONFDIR="$ROOT/etc" >"$TEST_DIR/install.log" 2>&1 ||
	fail "make install failed: $(tail -5 "$TEST_DIR/install.log")"
DOC=$ROOT/usr/share/doc/taskmill
for f in languages.md examples/python/yaml_task.py examples/lua/wordcount.lua \
	examples/exec/wc.sh; do
	[[ -f $DOC/$f ]] || fail "make install did not install $DOC/$f"
done
for p in exec lua python; do
	[[ -f $ROOT/usr/lib/taskmill/plugins/$p.so ]] || fail "$p.so not installed"
done

# the example config with the hosts' tasks uncommented
CONF=$TEST_DIR/taskmill.yaml
sed -e '/Tasks in other languages/,$ s/^  # \{0,1\}\( *[a-z_]*:.*\)$/  \1/' \
	"$ROOT/etc/taskmill/taskmill.yaml.example" >"$CONF"
for t in wc wordcount yaml; do
	grep -q "^  $t:\$" "$CONF" || fail "no task $t in the example config"
done
grep -q "$DOC/examples/lua/wordcount.lua" "$CONF" ||
	fail "the example config does not point at the installed examples"

tm invoke -c "$CONF" wc '{"text": "one two three"}'
assert_eq 0 "$TM_RC" "wc: exit status ($(cat "$TM_OUT" "$TM_ERR"))"
assert_match 'result: \{"bytes":25,"words":4,"lines":1\}' "$(cat "$TM_OUT")" "wc: result"
grep -q 'stderr: message invoke-1, attempt 1' "$TM_ERR" || fail "wc: stderr not logged"

tm invoke -c "$CONF" wordcount '{"text": "the cat and the hat"}'
assert_eq 0 "$TM_RC" "wordcount: exit status ($(cat "$TM_OUT" "$TM_ERR"))"
out=$(cat "$TM_OUT")
for k in '"words":5' '"distinct":4' '"top":"the"'; do
	[[ $out == *"$k"* ]] || fail "wordcount: $k missing in $out"
done
tm invoke -c "$CONF" wordcount '{"text": 3}'
assert_match 'outcome: rejected' "$(cat "$TM_OUT")" "wordcount: a bad body"

tm invoke -c "$CONF" yaml '{"yaml": "name: taskmill\nhosts: [exec, lua, python]\n"}'
assert_eq 0 "$TM_RC" "yaml: exit status ($(cat "$TM_OUT" "$TM_ERR"))"
assert_match 'result: \{"data":\{"name":"taskmill","hosts":\["exec","lua","python"\]\},"keys":2\}' \
	"$(cat "$TM_OUT")" "yaml: result"
tm invoke -c "$CONF" yaml '{"yaml": "a: [1"}'
assert_match 'outcome: rejected' "$(cat "$TM_OUT")" "yaml: bad YAML"
