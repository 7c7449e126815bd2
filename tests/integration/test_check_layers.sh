# scripts/check-layers.py (make check-layers) passes on the tree as it is,
# and fails, naming the offence, on a copy of src/ with each kind of
# offence put in: an include upwards (config/ reading daemon/), a call
# upwards (an object of util/ referencing a daemon symbol), a file outside
# every folder, a header only its folder includes not named *_private.h,
# a cycle no header names, and a cycle a header names that the code does
# not have.
CHECK=$TM_SRCDIR/scripts/check-layers.py

out=$(python3 "$CHECK" "$TM_BUILD" 2>&1) || fail "the tree fails check-layers: $out"
assert_match "each reaching only those below it" "$out" "the tree passes"

# fresh_tree: a copy of src/ and the script, with the build's objects
fresh_tree() {
	rm -rf "$TEST_DIR/tree"
	mkdir -p "$TEST_DIR/tree/scripts" "$TEST_DIR/tree/build"
	cp -r "$TM_SRCDIR/src" "$TEST_DIR/tree/src"
	# the C sources outside src/ count as users of its headers
	mkdir -p "$TEST_DIR/tree/tests"
	cp -r "$TM_SRCDIR/plugins" "$TM_SRCDIR/bench" "$TEST_DIR/tree/"
	cp -r "$TM_SRCDIR/tests/unit" "$TM_SRCDIR/tests/plugins" \
		"$TM_SRCDIR/tests/tools" "$TEST_DIR/tree/tests/"
	cp "$CHECK" "$TEST_DIR/tree/scripts/"
	cp -r "$TM_BUILD/obj" "$TEST_DIR/tree/build/obj"
}

# offends WHAT PATTERN: check-layers on the tree exits 1 with a line
# matching PATTERN
offends() {
	local rc=0 got
	got=$(python3 "$TEST_DIR/tree/scripts/check-layers.py" "$TEST_DIR/tree/build" 2>&1) || rc=$?
	assert_eq 1 "$rc" "$1: exit status"
	grep -Eq "$2" <<<"$got" || fail "$1: expected a line matching '$2', got: $got"
	note "$1: $(grep -E "$2" <<<"$got" | head -n 1)"
}

fresh_tree
printf '#include "daemon/daemon.h"\n' >>"$TEST_DIR/tree/src/config/units.c"
offends "include upwards" 'src/config/units.c includes src/daemon/daemon.h: daemon/ is not below config/'

fresh_tree
# util/util.o now references a symbol that daemon/ defines
cc -c -x c -o "$TEST_DIR/up.o" - <<'C'
extern int tm_daemon_alive(void *d);
int tm_layers_probe(void *d) { return tm_daemon_alive(d); }
C
ld -r -o "$TEST_DIR/tree/build/obj/util/util.o.new" \
	"$TEST_DIR/tree/build/obj/util/util.o" "$TEST_DIR/up.o"
mv "$TEST_DIR/tree/build/obj/util/util.o.new" "$TEST_DIR/tree/build/obj/util/util.o"
offends "call upwards" 'src/util/util.c calls src/daemon/[a-z_]+\.c \(tm_daemon_alive\)'

fresh_tree
printf '/* loose.c */\n' >"$TEST_DIR/tree/src/loose.c"
offends "file outside every folder" 'src/loose.c is in no folder'

fresh_tree
printf '/* extra.h */\n' >"$TEST_DIR/tree/src/pool/extra.h"
printf '#include "pool/extra.h"\n' >>"$TEST_DIR/tree/src/pool/thread.c"
offends "private header not so named" 'src/pool/extra.h is included only inside pool/: name it pool/extra_private.h'

fresh_tree
sed -i '/cycle: thread.c watch.c/d' "$TEST_DIR/tree/src/pool/pool.h"
offends "unnamed cycle" 'src/pool/: call cycle thread.c watch.c is not the one'

fresh_tree
printf '/* cycle: thread.c pool.c - no such cycle */\n' >>"$TEST_DIR/tree/src/pool/pool.h"
offends "named cycle the code lacks" 'names the cycle pool.c thread.c, which the code does not have'
