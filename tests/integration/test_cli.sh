# The command line: --version, --help, exit statuses, `check` on good and
# broken configs (exit 2 with one FILE:LINE:COL: line per error naming the
# key, every error of a file up to a cap), the config from -c,
# $TASKMILL_CONFIG or the default place, `emit` printing an id, bodies from
# standard input (emit - / invoke -), byte offsets of JSON errors, and
# `dlq list` of every task and `dlq purge` of all asking for --yes on a
# terminal.
VERSION=$(sed -n 's/^VERSION *:\?= *//p' "$TM_SRCDIR/Makefile")

tm --version
assert_eq 0 "$TM_RC" "taskmill --version exit status"
assert_eq "taskmill $VERSION" "$(cat "$TM_OUT")" "taskmill --version output"

tm --help
assert_eq 0 "$TM_RC" "taskmill --help exit status"
help=$(cat "$TM_OUT")
assert_match '[Uu]sage' "$help" "--help output"
for word in run check emit; do
	[[ $help == *"$word"* ]] || fail "--help does not mention '$word'"
done

tm frobnicate
assert_eq 2 "$TM_RC" "exit status of an unknown command"
[[ -s $TM_ERR ]] || fail "unknown command: nothing on stderr"
tm
assert_eq 2 "$TM_RC" "exit status without arguments"
tm check
assert_eq 2 "$TM_RC" "exit status of check without -c"
tm --no-such-option
assert_eq 2 "$TM_RC" "exit status of an unknown option"

# A valid generated config, and the shipped example (from the repo root, as
# its relative paths expect).
GOOD=$TEST_DIR/good.yaml
write_config "$GOOD" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.cli }
  add:
    plugin: add.so
    queue: q.add
    on_error: reject
    timeout: 5s
    max_payload: 1MiB
YAML
tm check -c "$GOOD"
assert_eq 0 "$TM_RC" "check on a valid config (stderr: $(head -c 300 "$TM_ERR"))"

[[ -f $TM_SRCDIR/conf/taskmill.yaml ]] || fail "conf/taskmill.yaml is missing"
(
	cd "$TM_SRCDIR" || exit 1
	tm check -c conf/taskmill.yaml
	assert_eq 0 "$TM_RC" "check -c conf/taskmill.yaml (stderr: $(head -c 300 "$TM_ERR"))"
)

# bad_config NAME LINE WORD < YAML: check exits 2 and prints a line
# "FILE:LINE:COL: message" (LINE as given unless empty; message naming WORD
# unless empty).
bad_config() {
	local name=$1 line=$2 word=$3 file=$TEST_DIR/bad-$1.yaml
	cat >"$file"
	tm check -c "$file"
	assert_eq 2 "$TM_RC" "check exit status on $name (stderr: $(head -c 300 "$TM_ERR"))"
	local re="^$file:([0-9]+):([0-9]+): (.+)$" l got=
	while IFS= read -r l; do
		if [[ $l =~ $re ]]; then
			got=$l
			break
		fi
	done <"$TM_ERR"
	[[ -n $got ]] || fail "$name: no '$file:LINE:COL: message' line on stderr: $(head -c 300 "$TM_ERR")"
	[[ -z $line || ${BASH_REMATCH[1]} == "$line" ]] ||
		fail "$name: error at line ${BASH_REMATCH[1]}, expected line $line: $got"
	(( BASH_REMATCH[2] >= 1 )) || fail "$name: column ${BASH_REMATCH[2]} < 1: $got"
	[[ -z $word || ${BASH_REMATCH[3]} == *"$word"* ]] ||
		fail "$name: message does not name '$word': $got"
	assert_eq 1 "$(grep -c "^$file:[0-9]*:[0-9]*: " "$TM_ERR")" "$name: number of error lines"
	note "$name: $got"
}

BROKER="broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }"

bad_config unknown_key 3 bogus_key <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
bogus_key: 1
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML

bad_config unknown_task_key 7 colour <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
tasks:
  noop:
    plugin: noop.so
    queue: q.noop
    colour: blue
YAML

bad_config bad_pool_kind 2 kind <<YAML
$BROKER
pool: { kind: banana, size: 2 }
plugin_dir: $TM_PLUGINS
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML

bad_config bad_duration 3 shutdown_timeout <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
shutdown_timeout: 10 parsecs
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML

bad_config missing_plugin 5 "" <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
tasks:
  noop:
    plugin: no-such-plugin.so
    queue: q.noop
YAML

bad_config priority_on_redis 7 priority <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
tasks:
  noop:
    plugin: noop.so
    queue: q.noop
    priority: 2
YAML

unset TM_IT_UNSET_VARIABLE
bad_config unset_env_var 1 TM_IT_UNSET_VARIABLE <<YAML
broker: { url: "redis://127.0.0.1:\${TM_IT_UNSET_VARIABLE}/0" }
plugin_dir: $TM_PLUGINS
tasks:
  noop: { plugin: noop.so, queue: q.noop }
YAML

bad_config yaml_syntax "" "" <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
tasks: [ { noop: 1 }
YAML

tm check -c "$TEST_DIR/no-such-file.yaml"
assert_eq 2 "$TM_RC" "check exit status on a missing file"
assert_eq "cannot open $TEST_DIR/no-such-file.yaml: No such file or directory" \
	"$(head -n 1 "$TM_ERR")" "missing config: the message"

# Every error of a file is reported, each on its own line, in file order.
ALL=$TEST_DIR/bad-all.yaml
cat >"$ALL" <<YAML
$BROKER
plugin_dir: $TM_PLUGINS
pool: { kind: banana }
shutdown_timeout: soon
tasks:
  noop: { plugin: noop.so, queue: q.noop, colour: blue }
  add: { queue: q.add }
YAML
tm check -c "$ALL"
assert_eq 2 "$TM_RC" "check exit status on a file with four errors"
grep "^$ALL:[0-9]*:[0-9]*: " "$TM_ERR" | cut -d: -f2 >"$TEST_DIR/all.lines"
assert_eq "3 4 6 7" "$(paste -sd ' ' "$TEST_DIR/all.lines")" \
	"lines of the errors reported (stderr: $(head -c 600 "$TM_ERR"))"
grep -q "pool.kind" "$TM_ERR" && grep -q "shutdown_timeout" "$TM_ERR" &&
	grep -q "colour" "$TM_ERR" && grep -q "missing required key 'plugin'" "$TM_ERR" ||
	fail "check does not name every bad key: $(head -c 600 "$TM_ERR")"
# ... up to a cap, then it says it stopped
{
	echo "$BROKER"
	echo "tasks:"
	for ((i = 0; i < 30; i++)); do echo "  t$i: { plugin: noop.so, colour: $i }"; done
} >"$TEST_DIR/bad-many.yaml"
tm check -c "$TEST_DIR/bad-many.yaml"
assert_eq 2 "$TM_RC" "check exit status on a file with 30 errors"
assert_eq 20 "$(grep -c "^$TEST_DIR/bad-many.yaml:[0-9]*:[0-9]*: " "$TM_ERR")" "errors shown of 30"
grep -q "stopped after 20 errors" "$TM_ERR" || fail "no word that checking stopped at the cap"

# -c defaults to $TASKMILL_CONFIG, then the installed config's place.
TASKMILL_CONFIG=$GOOD tm check
assert_eq 0 "$TM_RC" "check with TASKMILL_CONFIG (stderr: $(head -c 300 "$TM_ERR"))"
assert_eq "$GOOD: ok (2 tasks)" "$(cat "$TM_OUT")" "check with TASKMILL_CONFIG"
TASKMILL_CONFIG=$TEST_DIR/no-such-file.yaml tm check
assert_eq 2 "$TM_RC" "check with TASKMILL_CONFIG naming a missing file"
grep -q "^cannot open $TEST_DIR/no-such-file.yaml: " "$TM_ERR" ||
	fail "TASKMILL_CONFIG: the missing file is not named: $(head -c 300 "$TM_ERR")"
grep -q 'TASKMILL_CONFIG' "$TM_ERR" || fail "no hint that the file came from TASKMILL_CONFIG"
if [[ ! -e /etc/taskmill/taskmill.yaml ]]; then
	(
		unset TASKMILL_CONFIG
		tm check
		assert_eq 2 "$TM_RC" "check without -c or TASKMILL_CONFIG"
		grep -q "^cannot open /etc/taskmill/taskmill.yaml: " "$TM_ERR" ||
			fail "without -c: the default file is not named: $(head -c 300 "$TM_ERR")"
	)
fi

# emit: prints the new entry's id and adds it to the task's stream.
assert_eq 0 "$(xlen q.cli)" "XLEN q.cli before emit"
id1=$(emit "$GOOD" noop '{"x":1}')
assert_eq 1 "$(xlen q.cli)" "XLEN q.cli after one emit"
assert_eq "$id1" "$(xids q.cli)" "id printed by emit"
assert_eq '{"x":1}' "$(xfield q.cli "$id1" body | tr -d ' ')" "body of the emitted entry"
id2=$(emit "$GOOD" noop '{"x":2}')
assert_eq 2 "$(xlen q.cli)" "XLEN q.cli after two emits"
[[ $id2 != "$id1" ]] || fail "emit printed the same id twice"

tm emit -c "$GOOD" no-such-task '{"x":1}'
assert_eq 2 "$TM_RC" "emit to an unknown task"
tm emit -c "$GOOD" noop 'not json'
assert_eq 2 "$TM_RC" "emit of a body that is not JSON"
tm emit -c "$GOOD" noop '[1,2]'
assert_eq 2 "$TM_RC" "emit of a body that is not an object"
tm emit -c "$GOOD" noop
assert_eq 2 "$TM_RC" "emit without a body"
assert_eq 2 "$(xlen q.cli)" "XLEN q.cli after the refused emits"

# A body that is not JSON: where it goes wrong, as a byte offset.
tm emit -c "$GOOD" noop '{"a":1,}'
assert_eq 2 "$TM_RC" "emit of a body with a trailing comma"
grep -q 'not valid JSON (at byte 7' "$TM_ERR" || fail "emit: no byte offset: $(cat "$TM_ERR")"
tm invoke -c "$GOOD" noop '{"a":1,}'
assert_eq 1 "$TM_RC" "invoke of a body with a trailing comma"
grep -qx 'error: body is not valid JSON (at byte 7)' "$TM_OUT" ||
	fail "invoke: no byte offset: $(cat "$TM_OUT")"

# emit without -c, through TASKMILL_CONFIG
id3=$(TASKMILL_CONFIG=$GOOD "$TM_BIN" emit noop '{"x":3}')
assert_eq 3 "$(xlen q.cli)" "XLEN q.cli after an emit through TASKMILL_CONFIG"
assert_eq "$id3" "$(xids q.cli | tail -n 1)" "id printed by emit through TASKMILL_CONFIG"

# emit - and invoke -: the body from standard input, as large as
# max_payload allows (4 MiB here; as an argument, Linux refuses any
# single argument above 128 KiB).
BIG=$TEST_DIR/big.yaml
write_config "$BIG" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.big, max_payload: 8MiB }
  small: { plugin: noop.so, queue: q.small, max_payload: 1KiB }
  add: { plugin: add.so, queue: q.add2 }
YAML
{
	printf '{"pad":"'
	head -c $((4 * 1024 * 1024)) /dev/zero | tr '\0' 'x'
	printf '"}'
} >"$TEST_DIR/big.json"
size=$(stat -c %s "$TEST_DIR/big.json")
tm emit -c "$BIG" noop - <"$TEST_DIR/big.json"
assert_eq 0 "$TM_RC" "emit - of a $size-byte body (stderr: $(head -c 300 "$TM_ERR"))"
big_id=$(cat "$TM_OUT")
assert_eq 1 "$(xlen q.big)" "XLEN q.big after emit -"
assert_eq "$size" "$(rcall EVAL "local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
	local f = r[1][2]
	for i = 1, #f, 2 do if f[i] == 'body' then return #f[i + 1] end end
	return -1" 1 q.big "$big_id")" "length of the body emitted from standard input"
# over max_payload: refused, nothing published
tm emit -c "$BIG" small - <"$TEST_DIR/big.json"
assert_eq 2 "$TM_RC" "emit - over max_payload"
grep -q "max_payload" "$TM_ERR" || fail "emit - over max_payload: $(cat "$TM_ERR")"
tm emit -c "$BIG" small "$(head -c 2000 "$TEST_DIR/big.json")\"}"
assert_eq 2 "$TM_RC" "emit of an argument over max_payload"
assert_eq 0 "$(xlen q.small)" "XLEN q.small after the refused emits"
# an empty standard input is no JSON
tm emit -c "$BIG" noop - </dev/null
assert_eq 2 "$TM_RC" "emit - of an empty standard input"
printf '{"a": 2, "b": 40}' >"$TEST_DIR/add.json"
tm invoke -c "$BIG" add - <"$TEST_DIR/add.json"
assert_eq 0 "$TM_RC" "invoke - (stderr: $(head -c 300 "$TM_ERR"))"
grep -qx 'result: {"sum":42}' "$TM_OUT" || fail "invoke -: $(cat "$TM_OUT")"

# ---- dlq: every task's counts; purge of all asks for --yes on a terminal
for i in 1 2; do
	rcall XADD q.add.dlq '*' body "{\"a\":$i}" task add error "missing b" \
		attempts 1 failed_at 1796030229271 origin_id "1-$i" >/dev/null
done
tm dlq -c "$GOOD" list
assert_eq 0 "$TM_RC" "dlq list without a task (stderr: $(head -c 300 "$TM_ERR"))"
assert_eq $'noop\tq.cli.dlq\t0\nadd\tq.add.dlq\t2' "$(cat "$TM_OUT")" "dlq list without a task"
tm dlq -c "$GOOD" list add
assert_eq 0 "$TM_RC" "dlq list add"
assert_eq 2 "$(wc -l <"$TM_OUT")" "lines of dlq list add"
assert_eq "$(date -u -d @1796030229 +%Y-%m-%dT%H:%M:%S).271Z" "$(cut -f4 "$TM_OUT" | head -n 1)" "failed_at in dlq list"
if command -v script >/dev/null 2>&1; then
	rc=0
	timeout -k 5 60 script -qec "'$TM_BIN' dlq -c '$GOOD' purge add" /dev/null \
		>"$TEST_DIR/tty.out" 2>&1 </dev/null || rc=$?
	assert_eq 2 "$rc" "dlq purge of all on a terminal without --yes ($(head -c 300 "$TEST_DIR/tty.out"))"
	grep -q -- '--yes' "$TEST_DIR/tty.out" || fail "purge on a terminal does not ask for --yes: $(cat "$TEST_DIR/tty.out")"
	assert_eq 2 "$(xlen q.add.dlq)" "XLEN q.add.dlq after the refused purge"
	rc=0
	timeout -k 5 60 script -qec "'$TM_BIN' dlq -c '$GOOD' purge add --yes" /dev/null \
		>"$TEST_DIR/tty.out" 2>&1 </dev/null || rc=$?
	assert_eq 0 "$rc" "dlq purge --yes on a terminal ($(head -c 300 "$TEST_DIR/tty.out"))"
	assert_eq 0 "$(xlen q.add.dlq)" "XLEN q.add.dlq after purge --yes"
else
	note "script(1) not installed: purge on a terminal not checked"
fi
