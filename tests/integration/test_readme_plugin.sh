# The complete plugin shown in README.md compiles against include/taskmill.h
# alone and runs: through `taskmill invoke`, and through the daemon.
README=$TM_SRCDIR/README.md
SRC=$TEST_DIR/greet.c
PLUGDIR=$TEST_DIR/plugins
mkdir -p "$PLUGDIR"
chmod 0755 "$PLUGDIR"

sed -n '/<!-- readme-plugin:start -->/,/<!-- readme-plugin:end -->/p' "$README" |
	sed -e '1,/^```c$/d' -e '/^```$/,$d' >"$SRC"
[[ -s $SRC ]] || fail "no plugin source between the readme-plugin markers"
grep -q 'TM_TASK_DECLARE' "$SRC" || fail "extracted source has no TM_TASK_DECLARE"

cc -std=c11 -Wall -Wextra -Werror -fPIC -shared -I "$TM_SRCDIR/include" \
	-o "$PLUGDIR/greet.so" "$SRC" 2>"$TEST_DIR/cc.log" ||
	fail "README plugin does not compile: $(cat "$TEST_DIR/cc.log")"
chmod 0755 "$PLUGDIR/greet.so"

CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  greet: { plugin: $PLUGDIR/greet.so, queue: q.greet, on_error: reject }
YAML

out=$("$TM_BIN" invoke -c "$CONF" greet '{"name": "world"}')
note "$out"
assert_match 'outcome: success' "$out" "invoke outcome"
assert_match 'result: \{"greeting":"hello, world"\}' "$out" "invoke result"

# A name that needs escaping comes back escaped: the result is valid JSON
# holding the name as sent (\u00e9 decoded to UTF-8, " and \ escaped).
out=$("$TM_BIN" invoke -c "$CONF" greet '{"name": "a\"b\\c\u00e9"}')
note "$out"
assert_match 'outcome: success' "$out" "invoke outcome for a quoted name"
assert_eq 'result: {"greeting":"hello, a\"b\\c'$'\xc3\xa9''"}' \
	"$(grep '^result: ' <<<"$out")" "escaped result"

rc=0
out=$("$TM_BIN" invoke -c "$CONF" greet '{"who": 1}') || rc=$?
assert_eq 1 "$rc" "invoke exit status for a rejected body"
assert_match 'outcome: rejected' "$out" "invoke outcome for a bad body"

start_daemon "$CONF"
wait_ping
rcall XADD q.greet '*' body '{"name":"daemon"}' >/dev/null
wait_metric taskmill_tasks_total 'task="greet",outcome="success"' 1 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
