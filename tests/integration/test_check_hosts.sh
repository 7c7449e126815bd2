# `taskmill check` loads every host's module, script or executable and
# runs its init as `run` does, and tells every refusal, each at its place:
# a Python module that does not import, a Lua script that does not
# compile and an exec command that is not there each exit 2 at the task's
# config: key; a misspelt key in each host's config: at that key; all of
# them in one run, good tasks not named. Before: a Python module that did
# not import passed (it was imported by the workers only), a misspelt key
# was ignored, and check stopped at the first refusal.
CONF=$TEST_DIR/taskmill.yaml
export LSAN_OPTIONS=suppressions=$TM_SRCDIR/tests/hosts/lsan-python.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}
MODDIR=$TEST_DIR/pymod
for h in python lua exec; do
	[[ -f $TM_PLUGINS/$h.so ]] || fail "$h.so not built"
done
mkdir -p "$MODDIR"
printf 'def run(body, ctx):\n    return {"ok": True}\n' >"$MODDIR/good.py"
printf 'def run(body, ctx):\n    return {"ok": True\n' >"$MODDIR/broken.py"
printf 'import no_such_module_here\n' >"$MODDIR/needs.py"
printf 'function run(body, ctx)\n  return { ok = true }\nend\n' >"$TEST_DIR/good.lua"
printf 'function run(body, ctx)\n  return { ok = true \nend\n' >"$TEST_DIR/broken.lua"

# one_task NAME <<YAML: a config with that one task; check it.
check_one() {
	write_config "$CONF"
	tm check -c "$CONF"
	note "$1: rc $TM_RC: $(tr '\n' ' ' <"$TM_ERR" | tail -c 600)"
}

# each on its own: exit 2, FILE:LINE:COL at the right key
check_one py-broken < <(cat <<YAML
tasks:
  pyb:
    plugin: python.so
    config: { module: broken, path: [$MODDIR] }
YAML
)
assert_eq 2 "$TM_RC" "python module with a syntax error: exit status"
grep -Eq "^$CONF:10:5: tasks\.pyb\.config: .*init failed" "$TM_ERR" ||
	fail "python syntax error: no refusal at the config: key: $(cat "$TM_ERR")"
grep -q "SyntaxError" "$TM_ERR" || fail "python syntax error: the reason is not logged"

check_one py-import < <(cat <<YAML
tasks:
  pyi:
    plugin: python.so
    config: { module: needs, path: [$MODDIR] }
YAML
)
assert_eq 2 "$TM_RC" "python module whose import fails: exit status"
grep -Eq "^$CONF:10:5: tasks\.pyi\.config: " "$TM_ERR" ||
	fail "python import error: no refusal at the config: key"
grep -q "ModuleNotFoundError" "$TM_ERR" || fail "python import error: the reason is not logged"

check_one lua-broken < <(cat <<YAML
tasks:
  lub:
    plugin: lua.so
    config: { script: $TEST_DIR/broken.lua }
YAML
)
assert_eq 2 "$TM_RC" "lua script that does not compile: exit status"
grep -Eq "^$CONF:10:5: tasks\.lub\.config: " "$TM_ERR" ||
	fail "lua: no refusal at the config: key: $(cat "$TM_ERR")"

check_one exec-missing < <(cat <<YAML
tasks:
  exm:
    plugin: exec.so
    config: { command: [$TEST_DIR/no-such-program] }
YAML
)
assert_eq 2 "$TM_RC" "exec command that is not there: exit status"
grep -Eq "^$CONF:10:5: tasks\.exm\.config: " "$TM_ERR" ||
	fail "exec: no refusal at the config: key: $(cat "$TM_ERR")"

# a misspelt key in each host's config:, at the key, named
check_one typos < <(cat <<YAML
tasks:
  pyt:
    plugin: python.so
    config:
      module: good
      pth: [$MODDIR]
  lut:
    plugin: lua.so
    config: { script: $TEST_DIR/good.lua, memory_limt: 8000000 }
  ext:
    plugin: exec.so
    config:
      command: [/bin/cat]
      cwdir: /
YAML
)
assert_eq 2 "$TM_RC" "misspelt keys: exit status"
grep -q "^$CONF:12:7: tasks\.pyt\.config\.pth: unknown key for plugin 'python' (known: module, function, path)\$" "$TM_ERR" ||
	fail "python: misspelt key not refused at its place: $(cat "$TM_ERR")"
grep -Eq "^$CONF:15:[0-9]+: tasks\.lut\.config\.memory_limt: unknown key for plugin 'lua' \(known: script, function, memory_limit, unsafe\)\$" "$TM_ERR" ||
	fail "lua: misspelt key not refused at its place"
grep -q "^$CONF:20:7: tasks\.ext\.config\.cwdir: unknown key for plugin 'exec' (known: " "$TM_ERR" ||
	fail "exec: misspelt key not refused at its place"

# all of them at once, between good tasks: every refusal, in order
check_one all < <(cat <<YAML
tasks:
  ok1:
    plugin: python.so
    config: { module: good, path: [$MODDIR] }
  pyb:
    plugin: python.so
    config: { module: broken, path: [$MODDIR] }
  lub:
    plugin: lua.so
    config: { script: $TEST_DIR/broken.lua }
  ok2:
    plugin: lua.so
    config: { script: $TEST_DIR/good.lua }
  exm:
    plugin: exec.so
    config: { command: [$TEST_DIR/no-such-program] }
  pyt:
    plugin: python.so
    config: { module: good, pth: [$MODDIR] }
  nop:
    plugin: no-such-plugin.so
  ok3:
    plugin: exec.so
    config: { command: [/bin/cat] }
YAML
)
assert_eq 2 "$TM_RC" "all: exit status"
got=$(grep -Eo "^$CONF:[0-9]+:[0-9]+: tasks\.[a-z0-9]+\.[a-z.]+" "$TM_ERR" | sed "s|^$CONF:||" | tr '\n' ' ')
# (the column of pth: depends on nothing but the line above; 29)
assert_eq "13:5: tasks.pyb.config 16:5: tasks.lub.config 22:5: tasks.exm.config 25:29: tasks.pyt.config.pth 27:13: tasks.nop.plugin " "$got" "all: the refusals told"
! grep -Eq "tasks\.ok[123]" "$TM_ERR" || fail "all: a good task was refused"

# and a good file passes
check_one good < <(cat <<YAML
tasks:
  ok1:
    plugin: python.so
    config: { module: good, path: [$MODDIR] }
  ok2:
    plugin: lua.so
    config:
      script: $TEST_DIR/good.lua
      request_schema: { type: object }
      response_schema: { type: object }
  ok3:
    plugin: exec.so
    config: { command: [/bin/cat], cwd: / }
YAML
)
# (the schemas are the daemon's keys, accepted for any plugin)
assert_eq 0 "$TM_RC" "good tasks: exit status"
