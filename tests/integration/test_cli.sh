# The command line: --version, --help, exit statuses, `check` on good and
# broken configs (exit 2 with one FILE:LINE:COL: line naming the key),
# `emit` printing an id.
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
grep -q "no-such-file.yaml" "$TM_ERR" || fail "missing config: stderr does not name the file"

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
